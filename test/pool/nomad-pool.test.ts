/**
 * The pool on the NomadProvisioner against the Nomad API emulator, whose allocations are
 * real sandbox-server processes: pool → Nomad API → allocation → sandbox server → tool call.
 * Faults (kills, lost node, 500s, image pulls, ACL) are in nomad-pool-faults.test.ts.
 */
import { describe, expect, it } from "vitest";
import { sandboxJob } from "../../src/nomad/job.js";
import { NomadProvisioner } from "../../src/pool/nomad-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { bash, until, useNomadHarness } from "./support/nomad-harness.js";

const h = useNomadHarness("pool-test");

describe("SlotPool on the NomadProvisioner (emulator, real sandbox processes)", () => {
  it("submits the job, runs calls in allocations, resets on release, and purges on stop", async () => {
    // One slot, so b surely gets a's (just-reset) slot.
    const { pool, jobId } = h.nomadPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1 });
    await pool.start();
    const job = await h.client().readJob(jobId);
    expect(job?.Meta?.["slotpool"]).toBe("true");
    const a = await pool.acquire({ trajectoryId: "a" });
    const alloc = h.nomad.allocations(jobId)[0]!;
    expect(a.container.id).toBe(alloc["ID"]);
    expect(a.container.index).toBe(0);
    expect((await bash(a, "echo hello > f && cat f")).output.trim()).toBe("hello");
    await pool.release(a);
    const b = await pool.acquire({ trajectoryId: "b" });
    expect((await bash(b, "ls -A")).output.trim()).toBe("");
    await pool.stop({ purge: true });
    expect(await h.client().readJob(jobId)).toBeNull();
  });

  it("scales up under demand with one scale call", async () => {
    const { pool, jobId } = h.nomadPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 3 });
    await pool.start();
    const slots = await Promise.all(Array.from({ length: 6 }, (_, i) => pool.acquire({ trajectoryId: `t${i}` })));
    expect(h.scaleCalls(jobId)).toBe(1);
    expect(new Set(slots.map((s) => s.container.index))).toEqual(new Set([0, 1, 2]));
    const outs = await Promise.all(slots.map((s) => bash(s, `echo ${s.trajectoryId}`)));
    expect(outs.map((o) => o.output.trim())).toEqual(slots.map((s) => s.trajectoryId));
  });

  it("a scale refused for an active deployment (someone registered a version with an update block) is made once the deployment ends", async () => {
    const { pool, jobId, provisioner } = h.nomadPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 2 });
    await pool.start();
    const first = await pool.acquire({ trajectoryId: "first" });
    const withUpdate = { ...sandboxJob({ jobId, slots: 2, count: 1, token: first.container.token!, meta: { "slotpool.run": provisioner.runId } }), Update: { MaxParallel: 1 } };
    await h.client().registerJob(withUpdate, { preserveCounts: true });
    const started = Date.now();
    const more = await Promise.all([0, 1, 2].map((i) => pool.acquire({ trajectoryId: `m${i}`, timeoutMs: 20_000 })));
    // The emulator's deployment lasts 3 s: the first call was refused, the one after it placed.
    expect(Date.now() - started).toBeGreaterThan(2_000);
    // Exactly two calls: the provisioner waited for the deployment (blind retries would make more).
    expect(h.scaleCalls(jobId)).toBe(2);
    expect(new Set(more.map((s) => s.container.index))).toContain(1);
    expect(pool.stats().containers.lost).toBe(0);
  });

  it("each allocation runs its slots under its own host uids (slot_0 of two allocations differ when root)", async () => {
    const { pool } = h.nomadPool({ slotsPerContainer: 1, minContainers: 2, maxContainers: 2 });
    await pool.start();
    const [x, y] = await Promise.all([pool.acquire({ trajectoryId: "x" }), pool.acquire({ trajectoryId: "y" })]);
    expect(x!.container.index).not.toBe(y!.container.index);
    const [ux, uy] = await Promise.all([bash(x!, "id -u"), bash(y!, "id -u")]);
    if (typeof process.getuid === "function" && process.getuid() === 0) {
      expect(Number(ux.output.trim())).toBeGreaterThanOrEqual(2 ** 30);
      expect(ux.output.trim()).not.toBe(uy.output.trim());
    } else expect(ux.output.trim()).toBe(uy.output.trim()); // not root: both run as this user
  });

  it("scale-down under load: drained allocations are stopped only once free; no workspace is lost", async () => {
    const { pool, jobId } = h.nomadPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 3, idleTimeoutMs: 300 });
    await pool.start();
    const slots = await Promise.all(Array.from({ length: 6 }, (_, i) => pool.acquire({ trajectoryId: `t${i}` })));
    for (const s of slots) await s.execute({ tool: "write_file", args: { path: "mine.txt", content: s.trajectoryId } });
    const lost: string[] = [];
    pool.on("slot-lost", (e) => lost.push(e.trajectoryId));
    for (const s of slots.filter((s) => s.container.index === 0)) await pool.release(s);
    await until(() => pool.stats().containers.draining >= 1);
    const remaining = slots.filter((s) => s.container.index > 0).sort((x, y) => y.container.index - x.container.index);
    while (remaining.length) {
      const s = remaining.shift()!;
      await new Promise((r) => setTimeout(r, 200)); // give the pool time to act between releases
      for (const other of [s, ...remaining]) {
        const res = await other.execute({ tool: "read_file", args: { path: "mine.txt" } });
        expect(res.output).toContain(other.trajectoryId);
      }
      await pool.release(s);
    }
    await until(() => h.nomad.allocations(jobId).filter((a) => a["DesiredStatus"] === "run").length === 1);
    const running = h.nomad.allocations(jobId).filter((a) => a["DesiredStatus"] === "run");
    expect(String(running[0]!["Name"])).toMatch(/\[0\]$/);
    const stopped = h.nomad.allocations(jobId).filter((a) => a["DesiredStatus"] === "stop");
    expect(stopped.map((a) => a["DesiredDescription"])).toEqual(["alloc not needed due to job update", "alloc not needed due to job update"]);
    expect(lost).toEqual([]);
    expect(pool.stats().containers.lost).toBe(0);
  });

  it("purgeJobOnStart replaces a job left behind by a crashed run", async () => {
    // A crashed run left its job behind (registered straight through the API here, an hour
    // old and without heartbeats: its owner is gone).
    const jobId = `pool-test-${process.pid}-left-behind`;
    const created = new Date(Date.now() - 3_600_000).toISOString();
    await h.client().registerJob(sandboxJob({ jobId, slots: 2, count: 1, token: "old-token", created, meta: { "slotpool.run": "crashed" } }));
    const [old] = await h.nomad.waitForAllocations(jobId, (allocs) => allocs.some((a) => a["ClientStatus"] === "running"));
    const provisioner = new NomadProvisioner({ slotsPerContainer: 2, client: h.client(), job: { jobId }, purgeJobOnStart: true, blockingWaitMs: 5_000 });
    const pool = new SlotPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 1, provisioner });
    h.pools.push(pool);
    await pool.start();
    const s = await pool.acquire({ trajectoryId: "fresh" });
    expect(s.container.id).not.toBe(old!["ID"]);
    expect(s.container.token).not.toBe("old-token");
    expect((await bash(s, "echo ok")).output.trim()).toBe("ok");
    const live = h.nomad.allocations(jobId).filter((a) => a["DesiredStatus"] === "run" && a["ClientStatus"] === "running");
    expect(live.map((a) => a["ID"])).toEqual([s.container.id]);
  });

  it("attaches to its own running job with PreserveCounts, reusing the job's token", async () => {
    // The same run started again (same run id) finds the job it made still running.
    const jobId = `pool-test-${process.pid}-attach`;
    await h.client().registerJob(sandboxJob({ jobId, slots: 2, count: 2, token: "running-token", meta: { "slotpool.run": "run-again" } }));
    await h.nomad.waitForAllocations(jobId, (allocs) => allocs.filter((a) => a["ClientStatus"] === "running").length === 2);
    const before = h.nomad.allocations(jobId).map((a) => a["ID"]);
    const provisioner = new NomadProvisioner({ slotsPerContainer: 2, client: h.client(), job: { jobId }, runId: "run-again", blockingWaitMs: 5_000 });
    const pool = new SlotPool({ slotsPerContainer: 2, minContainers: 2, maxContainers: 2, provisioner });
    h.pools.push(pool);
    await pool.start();
    // Same token and preserved count: the running allocations were kept, not replaced.
    const running = h.nomad.allocations(jobId).filter((a) => a["DesiredStatus"] === "run").map((a) => a["ID"]);
    expect(running.sort()).toEqual([...before].sort());
    const s = await pool.acquire({ trajectoryId: "t" });
    expect(s.container.token).toBe("running-token");
    expect(before).toContain(s.container.id);
    expect((await bash(s, "echo attached")).output.trim()).toBe("attached");
  });

  it("reclaims an abandoned slot after its lease, resetting the allocation's workspace", async () => {
    const { pool } = h.nomadPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1, leaseTimeoutMs: 300 });
    await pool.start();
    const reclaimed: string[] = [];
    pool.on("slot-reclaimed", (e) => reclaimed.push(e.trajectoryId));
    const a = await pool.acquire({ trajectoryId: "gone-quiet" });
    await bash(a, "echo x > leftover");
    const b = await pool.acquire({ trajectoryId: "next", timeoutMs: 10_000 });
    expect(reclaimed).toEqual(["gone-quiet"]);
    expect(b.key).toBe(a.key);
    expect((await bash(b, "ls -A")).output.trim()).toBe("");
    await expect(bash(a, "true")).rejects.toThrow(/gone-quiet neither used nor released/);
  });
});
