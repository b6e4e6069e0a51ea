/**
 * Runs that share a cluster own their jobs (issue 29): two pools on one emulated Nomad never
 * touch each other's job (scale, lend, stop), a live owner's job is refused even by id, an
 * orphan (owner gone) is taken over only on request, and a pool whose job disappears fails
 * with one clear error instead of retrying `job not found` for the rest of the run.
 */
import { describe, expect, it } from "vitest";
import { sandboxJob } from "../../src/nomad/job.js";
import { HEARTBEAT_MESSAGE, META_RUN, ownerLiveness } from "../../src/nomad/ownership.js";
import { NomadProvisioner } from "../../src/pool/nomad-provisioner.js";
import { ProvisionerError } from "../../src/pool/provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { bash, until, useNomadHarness } from "./support/nomad-harness.js";

const h = useNomadHarness("own-test");

/** A pool as a run makes it by default: no job id given. */
function defaultPool(options: { minContainers?: number; maxContainers?: number; heartbeatMs?: number; jobId?: string; shareJob?: boolean } = {}) {
  const provisioner = new NomadProvisioner({
    slotsPerContainer: 2,
    client: h.client(),
    blockingWaitMs: 2_000,
    heartbeatMs: options.heartbeatMs ?? 300,
    ...(options.jobId ? { job: { jobId: options.jobId } } : {}),
    ...(options.shareJob ? { shareJob: true } : {}),
  });
  const pool = new SlotPool({ slotsPerContainer: 2, minContainers: options.minContainers ?? 1, maxContainers: options.maxContainers ?? 3, tickMs: 50, idleTimeoutMs: 200, startTimeoutMs: 20_000, provisioner });
  h.pools.push(pool);
  return { pool, provisioner };
}

const scaleRequests = (jobId: string) => h.nomad.requests.filter((r) => r.method === "POST" && r.path === `/v1/job/${jobId}/scale`).length;
const deletes = (jobId: string) => h.nomad.requests.filter((r) => r.method === "DELETE" && r.path === `/v1/job/${jobId}`).length;

describe("runs sharing a Nomad cluster own their jobs", () => {
  it("two runs with default settings get a job each; the second never scales, lends or stops the first's", async () => {
    const a = defaultPool({ minContainers: 2, maxContainers: 2 });
    await a.pool.start();
    const aJob = a.provisioner.jobId;
    expect(aJob).toMatch(/^slotpool-sandbox-[0-9a-f]{8}$/);
    const aAllocs = h.nomad.allocations(aJob).map((x) => x["ID"]);
    const held = await Promise.all([0, 1, 2, 3].map((i) => a.pool.acquire({ trajectoryId: `a${i}` })));

    // The second run starts while the first holds every slot, scales down to 1 and stops.
    const b = defaultPool({ minContainers: 1, maxContainers: 1 });
    await b.pool.start();
    expect(b.provisioner.jobId).not.toBe(aJob);
    const bSlot = await b.pool.acquire({ trajectoryId: "b0" });
    // Never one of the first run's slots (same token, same container).
    expect(held.map((s) => s.container.id)).not.toContain(bSlot.container.id);
    expect((await bash(bSlot, "echo b")).output.trim()).toBe("b");
    await b.pool.release(bSlot);
    const aScalesBefore = scaleRequests(aJob);
    await b.pool.stop();

    // The first run's job: same allocations, count, no scale or stop from the second run.
    expect(deletes(aJob)).toBe(0);
    const job = await h.client().readJob(aJob);
    expect(job?.Stop).toBe(false);
    expect(job?.TaskGroups?.[0]?.Count).toBe(2);
    expect(h.nomad.allocations(aJob).filter((x) => x["DesiredStatus"] === "run").map((x) => x["ID"]).sort()).toEqual([...aAllocs].sort());
    expect(scaleRequests(aJob)).toBeLessThanOrEqual(aScalesBefore + 2); // a's own heartbeats only
    // Every trajectory of the first run still runs.
    const outs = await Promise.all(held.map((s) => bash(s, `echo ${s.trajectoryId}`)));
    expect(outs.map((o) => o.output.trim())).toEqual(["a0", "a1", "a2", "a3"]);
    expect(a.pool.stats().containers.lost).toBe(0);
  });

  it("a job whose owner is alive is refused by id, even with shareJob and purgeJobOnStart, and left as it was", async () => {
    const jobId = `own-test-${process.pid}-shared`;
    const a = defaultPool({ jobId, minContainers: 1, maxContainers: 1 });
    await a.pool.start();
    const slot = await a.pool.acquire({ trajectoryId: "owner" });
    const before = h.nomad.allocations(jobId).map((x) => x["ID"]);
    for (const prov of [{}, { shareJob: true }, { shareJob: true, purgeJobOnStart: true }]) {
      const provisioner = new NomadProvisioner({ slotsPerContainer: 2, client: h.client(), job: { jobId }, blockingWaitMs: 2_000, ...prov });
      const b = new SlotPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 3, startTimeoutMs: 10_000, provisioner });
      h.pools.push(b);
      const err = await b.start().then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(ProvisionerError);
      expect((err as ProvisionerError).kind).toBe("job-owned");
      expect((err as Error).message).toMatch(new RegExp(`belongs to run ${a.provisioner.runId}, which is alive.*pool\\.nomad\\.jobId`));
    }
    expect(deletes(jobId)).toBe(0);
    expect(h.nomad.allocations(jobId).map((x) => x["ID"])).toEqual(before);
    expect((await bash(slot, "echo still")).output.trim()).toBe("still");
  });

  it("a job left behind by a run that is gone is refused without shareJob, taken over with it", async () => {
    const jobId = `own-test-${process.pid}-orphan`;
    const created = new Date(Date.now() - 3_600_000).toISOString();
    await h.client().registerJob(sandboxJob({ jobId, slots: 2, count: 1, token: "orphan-token", created, meta: { [META_RUN]: "crashed-run" } }));
    await h.nomad.waitForAllocations(jobId, (allocs) => allocs.some((x) => x["ClientStatus"] === "running"));
    const refused = defaultPool({ jobId });
    const err = await refused.pool.start().then(() => undefined, (e: unknown) => e);
    expect((err as ProvisionerError).kind).toBe("job-owned");
    expect((err as Error).message).toMatch(/left behind by run crashed-run.*shareJob/);
    expect(deletes(jobId)).toBe(0);

    const taker = defaultPool({ jobId, shareJob: true });
    await taker.pool.start();
    const s = await taker.pool.acquire({ trajectoryId: "t" });
    expect(s.container.token).toBe("orphan-token");
    expect((await h.client().readJob(jobId))?.Meta?.[META_RUN]).toBe(taker.provisioner.runId);
  });

  it("the owner's heartbeats keep it alive in Nomad's scale events; `slotpool jobs prune` logic sees an orphan once they stop", async () => {
    const a = defaultPool({ heartbeatMs: 100 });
    await a.pool.start();
    const jobId = a.provisioner.jobId;
    await until(() => scaleRequests(jobId) >= 2, 30_000);
    const job = await h.client().readJob(jobId);
    const scale = await h.client().scaleStatus(jobId);
    const events = scale?.TaskGroups?.["sandbox"]?.Events ?? [];
    expect(events[0]?.Message).toBe(HEARTBEAT_MESSAGE);
    expect(events[0]?.Count ?? null).toBeNull(); // no count change: nothing is placed or stopped
    expect(ownerLiveness(job?.Meta, scale, "sandbox", { staleMs: 2_000 }).alive).toBe(true);
    // An hour later without a heartbeat, the same job's owner is gone.
    expect(ownerLiveness(job?.Meta, scale, "sandbox", { staleMs: 2_000, now: Date.now() + 3_600_000 }).alive).toBe(false);
  });

  it("a job re-registered by an operator without the owner mark stays this run's: no failure, slots still served", async () => {
    const a = defaultPool({ minContainers: 1, maxContainers: 1, heartbeatMs: 100 });
    await a.pool.start();
    const jobId = a.provisioner.jobId;
    const held = await a.pool.acquire({ trajectoryId: "held" });
    let failure: unknown;
    a.pool.on("failed", (e) => (failure = e));
    const spec = sandboxJob({ jobId, slots: 2, count: 1, token: held.container.token! });
    expect((spec.Meta as Record<string, string> | undefined)?.[META_RUN]).toBeUndefined();
    await h.client().registerJob(spec, { preserveCounts: true });
    const beats = scaleRequests(jobId);
    await until(() => scaleRequests(jobId) >= beats + 3, 30_000);
    expect(failure).toBeUndefined();
    expect((await bash(held, "echo still")).output.trim()).toBe("still");
    await a.pool.stop({ purge: true });
    expect(deletes(jobId)).toBe(1); // still its own: stopped at the end
  });

  it("a job purged under a running pool: one clear error, at once, and no more scale calls", async () => {
    const a = defaultPool({ minContainers: 1, maxContainers: 2, heartbeatMs: 500 });
    await a.pool.start();
    const jobId = a.provisioner.jobId;
    const failed = new Promise<ProvisionerError>((resolve) => a.pool.once("failed", resolve));
    const waiting = [0, 1, 2].map((i) => a.pool.acquire({ trajectoryId: `w${i}`, timeoutMs: 60_000 }).then(() => undefined, (e: unknown) => e));
    const started = Date.now();
    await h.client().deregisterJob(jobId, { purge: true });
    const err = await failed;
    // bound: noticed from the allocation watch at once, not an acquire's 60 s timeout: 20 s is far from both.
    expect(Date.now() - started).toBeLessThan(20_000);
    expect(err.kind).toBe("job-gone");
    expect(err.message).toMatch(new RegExp(`job '${jobId}' of this run is gone`));
    // The two slots of the one container went out; the third waiter and later acquires fail
    // with that same error, at once.
    const results = await Promise.all(waiting);
    expect(results[2]).toBe(err);
    // At once: a failed pool rejects in the same tick, nothing awaits a timer (a resolved check, not a 100 ms bound).
    let settled = false;
    const late = a.pool.acquire({ trajectoryId: "late" }).finally(() => (settled = true));
    await new Promise((r) => setImmediate(r));
    expect(settled).toBe(true);
    await expect(late).rejects.toBe(err);
    const scales = scaleRequests(jobId);
    // wait: a window in which no scale call may come (a loaded box can only show fewer: never a false failure)
    await new Promise((r) => setTimeout(r, 1_500));
    expect(scaleRequests(jobId)).toBe(scales);
    await a.pool.stop();
    expect(deletes(jobId)).toBe(1); // the test's own purge; the pool stops nothing more
  });
});
