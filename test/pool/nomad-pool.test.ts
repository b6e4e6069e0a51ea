/**
 * The pool on the NomadProvisioner against the Nomad API emulator, whose allocations are
 * real sandbox-server processes: pool → Nomad API → allocation → sandbox server → tool call.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { NomadClient } from "../../src/nomad/client.js";
import { sandboxJob } from "../../src/nomad/job.js";
import { SlotLostError } from "../../src/pool/errors.js";
import { NomadProvisioner, type NomadProvisionerOptions } from "../../src/pool/nomad-provisioner.js";
import { SlotPool, type SlotPoolOptions } from "../../src/pool/slot-pool.js";
import type { Slot } from "../../src/pool/types.js";
import { startNomadEmulator, type NomadEmulator } from "../support/nomad-emulator.js";

let nomad: NomadEmulator;
const pools: SlotPool[] = [];
let jobCounter = 0;

beforeAll(async () => {
  nomad = await startNomadEmulator({ rescheduleDelayMs: 100 });
});
afterEach(async () => {
  for (const p of pools.splice(0)) await p.stop().catch(() => undefined);
});
afterAll(async () => {
  await nomad?.stop();
});

function client(address = nomad.address, token?: string): NomadClient {
  return new NomadClient({ address, retry: { attempts: 3, baseMs: 20, maxMs: 100 }, timeoutMs: 5_000, ...(token ? { token } : {}) });
}

function nomadPool(
  config: Partial<SlotPoolOptions> = {},
  prov: Partial<NomadProvisionerOptions> = {},
): { pool: SlotPool; provisioner: NomadProvisioner; jobId: string } {
  const jobId = `pool-test-${process.pid}-${++jobCounter}`;
  const slotsPerContainer = config.slotsPerContainer ?? 2;
  const provisioner = new NomadProvisioner({ slotsPerContainer, client: client(), job: { jobId }, blockingWaitMs: 5_000, ...prov });
  const pool = new SlotPool({ slotsPerContainer, minContainers: 1, maxContainers: 3, tickMs: 50, startTimeoutMs: 20_000, ...config, provisioner });
  pools.push(pool);
  return { pool, provisioner, jobId };
}

async function until(cond: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}

const bash = (slot: Slot, command: string) => slot.execute({ tool: "bash", args: { command } });
const scaleCalls = (jobId: string) => nomad.requests.filter((r) => r.method === "POST" && r.path === `/v1/job/${jobId}/scale`).length;

describe("SlotPool on the NomadProvisioner (emulator, real sandbox processes)", () => {
  it("submits the job, runs calls in allocations, resets on release, and purges on stop", async () => {
    const { pool, jobId } = nomadPool({ minContainers: 1, maxContainers: 1 });
    await pool.start();
    const job = await client().readJob(jobId);
    expect(job?.Meta?.["slotpool"]).toBe("true");
    const a = await pool.acquire({ trajectoryId: "a" });
    const alloc = nomad.allocations(jobId)[0]!;
    expect(a.container.id).toBe(alloc["ID"]);
    expect(a.container.index).toBe(0);
    expect((await bash(a, "echo hello > f && cat f")).output.trim()).toBe("hello");
    await pool.release(a);
    const b = await pool.acquire({ trajectoryId: "b" });
    expect((await bash(b, "ls -A")).output.trim()).toBe("");
    await pool.stop({ purge: true });
    expect(await client().readJob(jobId)).toBeNull();
  });

  it("scales up under demand with one scale call", async () => {
    const { pool, jobId } = nomadPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 3 });
    await pool.start();
    const slots = await Promise.all(Array.from({ length: 6 }, (_, i) => pool.acquire({ trajectoryId: `t${i}` })));
    expect(scaleCalls(jobId)).toBe(1);
    expect(new Set(slots.map((s) => s.container.index))).toEqual(new Set([0, 1, 2]));
    const outs = await Promise.all(slots.map((s) => bash(s, `echo ${s.trajectoryId}`)));
    expect(outs.map((o) => o.output.trim())).toEqual(slots.map((s) => s.trajectoryId));
  });

  it("scale-down under load: drained allocations are stopped only once free; no workspace is lost", async () => {
    const { pool, jobId } = nomadPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 3, idleTimeoutMs: 300 });
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
    await until(() => nomad.allocations(jobId).filter((a) => a["DesiredStatus"] === "run").length === 1);
    const running = nomad.allocations(jobId).filter((a) => a["DesiredStatus"] === "run");
    expect(String(running[0]!["Name"])).toMatch(/\[0\]$/);
    const stopped = nomad.allocations(jobId).filter((a) => a["DesiredStatus"] === "stop");
    expect(stopped.map((a) => a["DesiredDescription"])).toEqual(["alloc not needed due to job update", "alloc not needed due to job update"]);
    expect(lost).toEqual([]);
    expect(pool.stats().containers.lost).toBe(0);
  });

  it("an allocation killed mid-trajectory: SlotLostError naming it, noticed within 2 s; the replacement joins", async () => {
    const { pool } = nomadPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 1 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    await bash(a, "echo keep > f");
    const lostAt = new Promise<number>((resolve) => pool.once("slot-lost", () => resolve(Date.now())));
    const t0 = Date.now();
    await nomad.killAllocation(a.container.id);
    expect((await lostAt) - t0).toBeLessThan(2_000);
    const err = await bash(a, "cat f").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SlotLostError);
    expect((err as SlotLostError).allocationId).toBe(a.container.id);
    expect((err as Error).message).toContain(a.container.id);
    expect((err as Error).message).toMatch(/failed|Terminated|exit code/i);
    await pool.release(a);
    const b = await pool.acquire({ trajectoryId: "b", timeoutMs: 15_000 });
    expect(b.container.id).not.toBe(a.container.id);
    expect(b.container.index).toBe(0);
    expect((await bash(b, "ls -A")).output.trim()).toBe("");
  });

  it("keeps serving when Nomad answers 500 during scaling", async () => {
    const { pool, jobId } = nomadPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 3 });
    await pool.start();
    // Three 500s in a row: the client's own retries (3 attempts) give up once, the pool retries.
    nomad.failNext(`POST /v1/job/${jobId}/scale`, 500, 4, "rpc error: leader unavailable");
    const slots = await Promise.all([0, 1, 2].map((i) => pool.acquire({ trajectoryId: `t${i}`, timeoutMs: 20_000 })));
    expect(slots).toHaveLength(3);
    expect(pool.scaleLog().some((e) => !e.ok && /leader unavailable/.test(e.error ?? ""))).toBe(true);
    expect(pool.scaleLog().at(-1)).toMatchObject({ ok: true, to: 3 });
    expect(scaleCalls(jobId)).toBeGreaterThanOrEqual(5);
  });

  it("fails start() fast on an image pull failure, with the allocation's task events", async () => {
    const { pool, jobId } = nomadPool({ minContainers: 1 });
    nomad.failImagePull(jobId);
    const t0 = Date.now();
    const err = await pool.start().catch((e: unknown) => e);
    nomad.clearImagePullFailures();
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/could not be pulled/);
    expect((err as Error).message).toMatch(/Failed to pull/);
    expect((err as Error).message).toMatch(/docker login|registry/);
    expect(Date.now() - t0).toBeLessThan(5_000);
  });

  it("fails start() with an actionable error when Nomad is unreachable or denies access", async () => {
    const unreachable = new NomadProvisioner({ slotsPerContainer: 1, client: new NomadClient({ address: "http://127.0.0.1:9", retry: { attempts: 1, baseMs: 1, maxMs: 1 } }), job: { jobId: "nowhere" } });
    const p1 = new SlotPool({ slotsPerContainer: 1, minContainers: 1, provisioner: unreachable });
    await expect(p1.start()).rejects.toThrow(/cannot reach Nomad at http:\/\/127\.0\.0\.1:9.*NOMAD_ADDR/);

    const guarded = await startNomadEmulator({ token: "secret-acl-token" });
    try {
      const denied = new NomadProvisioner({ slotsPerContainer: 1, client: client(guarded.address, "wrong-token"), job: { jobId: "denied" } });
      const p2 = new SlotPool({ slotsPerContainer: 1, minContainers: 1, provisioner: denied });
      await expect(p2.start()).rejects.toThrow(/denied.*NOMAD_TOKEN/);
    } finally {
      await guarded.stop();
    }
  });

  it("purgeJobOnStart replaces a job left behind by a crashed run", async () => {
    // A crashed run left its job behind (registered straight through the API here).
    const jobId = `pool-test-${process.pid}-left-behind`;
    await client().registerJob(sandboxJob({ jobId, slots: 2, count: 1, token: "old-token" }));
    const [old] = await nomad.waitForAllocations(jobId, (allocs) => allocs.some((a) => a["ClientStatus"] === "running"));
    const provisioner = new NomadProvisioner({ slotsPerContainer: 2, client: client(), job: { jobId }, purgeJobOnStart: true, blockingWaitMs: 5_000 });
    const pool = new SlotPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 1, provisioner });
    pools.push(pool);
    await pool.start();
    const s = await pool.acquire({ trajectoryId: "fresh" });
    expect(s.container.id).not.toBe(old!["ID"]);
    expect(s.container.token).not.toBe("old-token");
    expect((await bash(s, "echo ok")).output.trim()).toBe("ok");
    const live = nomad.allocations(jobId).filter((a) => a["DesiredStatus"] === "run" && a["ClientStatus"] === "running");
    expect(live.map((a) => a["ID"])).toEqual([s.container.id]);
  });

  it("attaches to its own running job with PreserveCounts, reusing the job's token", async () => {
    const jobId = `pool-test-${process.pid}-attach`;
    await client().registerJob(sandboxJob({ jobId, slots: 2, count: 2, token: "running-token" }));
    await nomad.waitForAllocations(jobId, (allocs) => allocs.filter((a) => a["ClientStatus"] === "running").length === 2);
    const before = nomad.allocations(jobId).map((a) => a["ID"]);
    const provisioner = new NomadProvisioner({ slotsPerContainer: 2, client: client(), job: { jobId }, blockingWaitMs: 5_000 });
    const pool = new SlotPool({ slotsPerContainer: 2, minContainers: 2, maxContainers: 2, provisioner });
    pools.push(pool);
    await pool.start();
    // Same token and preserved count: the running allocations were kept, not replaced.
    const running = nomad.allocations(jobId).filter((a) => a["DesiredStatus"] === "run").map((a) => a["ID"]);
    expect(running.sort()).toEqual([...before].sort());
    const s = await pool.acquire({ trajectoryId: "t" });
    expect(s.container.token).toBe("running-token");
    expect(before).toContain(s.container.id);
    expect((await bash(s, "echo attached")).output.trim()).toBe("attached");
  });

  it("a lost node: every held slot is lost with the reason, replacements on the new node join", async () => {
    const { pool } = nomadPool({ slotsPerContainer: 1, minContainers: 2, maxContainers: 2 });
    await pool.start();
    const held = [await pool.acquire({ trajectoryId: "x" }), await pool.acquire({ trajectoryId: "y" })];
    await nomad.loseNode();
    await until(() => held.every((s) => s.lost), 2_000);
    for (const s of held) {
      const err = await bash(s, "true").catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SlotLostError);
      expect((err as Error).message).toMatch(/is lost/);
      await pool.release(s);
    }
    const fresh = await Promise.all([pool.acquire({ trajectoryId: "z1", timeoutMs: 15_000 }), pool.acquire({ trajectoryId: "z2", timeoutMs: 15_000 })]);
    expect(fresh.map((s) => s.container.id).sort()).not.toEqual(held.map((s) => s.container.id).sort());
    expect((await bash(fresh[0]!, "echo back")).output.trim()).toBe("back");
  });

  it("reclaims an abandoned slot after its lease, resetting the allocation's workspace", async () => {
    const { pool } = nomadPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1, leaseTimeoutMs: 300 });
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

  it("with watch: events, follows the event stream: a killed allocation is noticed within 2 s, scaling works", async () => {
    const { pool, jobId } = nomadPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 2 }, { watch: "events" });
    await pool.start();
    const [a, b] = await Promise.all([pool.acquire({ trajectoryId: "a" }), pool.acquire({ trajectoryId: "b" })]);
    expect(scaleCalls(jobId)).toBe(1);
    expect(nomad.requests.some((r) => r.path === "/v1/event/stream" && (r.query["topic"] ?? []).includes(`Allocation:${jobId}`))).toBe(true);
    const lostAt = new Promise<number>((resolve) => pool.once("slot-lost", () => resolve(Date.now())));
    const t0 = Date.now();
    await nomad.killAllocation(b!.container.id);
    expect((await lostAt) - t0).toBeLessThan(2_000);
    await expect(bash(b!, "true")).rejects.toBeInstanceOf(SlotLostError);
    expect((await bash(a!, "echo still")).output.trim()).toBe("still");
    await pool.release(b!);
    const c = await pool.acquire({ trajectoryId: "c", timeoutMs: 15_000 });
    expect(c.container.index).toBe(1);
    expect(c.container.id).not.toBe(b!.container.id);
  });
});
