import { afterEach, describe, expect, it } from "vitest";
import { PoolNotRunningError, SlotAcquireTimeoutError, SlotLostError, PoolError, SlotReleasedError } from "../../src/pool/errors.js";
import { ProvisionerError } from "../../src/pool/provisioner.js";
import { SlotPool, type SlotPoolOptions } from "../../src/pool/slot-pool.js";
import type { LeasedSlot } from "../../src/pool/types.js";
import { MemoryProvisioner, type MemoryProvisionerOptions } from "./support/memory-provisioner.js";

const pools: SlotPool[] = [];
afterEach(async () => {
  for (const p of pools.splice(0)) await p.stop();
});

function makePool(config: Partial<SlotPoolOptions> = {}, prov: Partial<MemoryProvisionerOptions> = {}): { pool: SlotPool; provisioner: MemoryProvisioner } {
  const provisioner = new MemoryProvisioner({ slots: config.slotsPerContainer ?? 2, ...prov });
  const pool = new SlotPool({
    slotsPerContainer: 2,
    minContainers: 1,
    maxContainers: 4,
    tickMs: 20,
    ...config,
    provisioner,
    createClient: provisioner.clientFactory,
  });
  pools.push(pool);
  return { pool, provisioner };
}

async function until(cond: () => boolean, timeoutMs = 3_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("SlotPool on the in-memory provisioner", () => {
  it("rejects bad config with a message naming the field", () => {
    const provisioner = new MemoryProvisioner({ slots: 2 });
    expect(() => new SlotPool({ provisioner, minContainers: 5, maxContainers: 2 })).toThrow(/minContainers must not exceed maxContainers/);
    expect(() => new SlotPool({ provisioner, slotsPerContainer: 0 })).toThrow(/slotsPerContainer/);
    expect(() => new SlotPool({ provisioner, bogus: 1 } as unknown as SlotPoolOptions)).toThrow(/bogus/);
  });

  it("start() waits for minContainers healthy containers; acquire before start fails clearly", async () => {
    const { pool } = makePool({ minContainers: 2 }, { upDelayMs: 30 });
    await expect(pool.acquire({ trajectoryId: "t" })).rejects.toBeInstanceOf(PoolNotRunningError);
    await pool.start();
    const s = pool.stats();
    expect(s.containers.ready).toBe(2);
    expect(s.slots).toEqual({ total: 4, free: 4, held: 0, lost: 0 });
  });

  it("start() fails fast with the provisioner's problem", async () => {
    const { pool, provisioner } = makePool({ minContainers: 1 }, { upDelayMs: 5_000 });
    setTimeout(() => provisioner.problem(new ProvisionerError("image pull failed: manifest unknown", "image-pull")), 20);
    const t0 = Date.now();
    await expect(pool.start()).rejects.toThrow(/image pull failed/);
    // bound: at the problem (20 ms in), not when the containers come up (5 s): 3 s tells them apart on a loaded box.
    expect(Date.now() - t0).toBeLessThan(3_000);
    expect(provisioner.stopped).toBeDefined();
  });

  it("packs slots onto the lowest container index first and isolates workspaces", async () => {
    const { pool } = makePool({ minContainers: 3, maxContainers: 3 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    const b = await pool.acquire({ trajectoryId: "b" });
    const c = await pool.acquire({ trajectoryId: "c" });
    expect([a.container.index, b.container.index, c.container.index]).toEqual([0, 0, 1]);
    expect(a.slotId).toBe("slot_0");
    expect(b.slotId).toBe("slot_1");
    await a.execute({ tool: "write_file", args: { path: "x", content: "from a" } });
    expect((await b.execute({ tool: "read_file", args: { path: "x" } })).success).toBe(false);
    expect((await a.execute({ tool: "read_file", args: { path: "x" } })).output).toBe("from a");
  });

  it("a slot just reset is handed out after the container's other free (warm) slots; reset:false keeps it on top", async () => {
    const { pool } = makePool({ slotsPerContainer: 3, minContainers: 1, maxContainers: 1 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    expect(a.slotId).toBe("slot_0");
    await pool.release(a); // reset: slot_0's namespace is being rebuilt
    const b = await pool.acquire({ trajectoryId: "b" });
    expect(b.slotId).toBe("slot_1");
    await pool.release(b, { reset: false }); // still warm: first in line again
    const c = await pool.acquire({ trajectoryId: "c" });
    expect(c.slotId).toBe("slot_1");
    const d = await pool.acquire({ trajectoryId: "d" });
    const e = await pool.acquire({ trajectoryId: "e" });
    expect([d.slotId, e.slotId]).toEqual(["slot_2", "slot_0"]);
  });

  it("release resets by default; a released handle raises SlotReleasedError; reset:false keeps files", async () => {
    // One slot, so b surely gets a's slot (a just-reset slot is otherwise handed out last).
    const { pool, provisioner } = makePool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    await a.execute({ tool: "write_file", args: { path: "f", content: "1" } });
    await pool.release(a);
    await expect(a.execute({ tool: "read_file", args: { path: "f" } })).rejects.toBeInstanceOf(SlotReleasedError);
    await pool.release(a); // idempotent
    const b = await pool.acquire({ trajectoryId: "b" });
    expect(b.key).toBe(a.key);
    expect((await b.execute({ tool: "read_file", args: { path: "f" } })).success).toBe(false);
    expect(provisioner.running.get(0)!.resets).toBe(1);
    await b.execute({ tool: "write_file", args: { path: "g", content: "2" } });
    await pool.release(b, { reset: false });
    const c = await pool.acquire({ trajectoryId: "c" });
    expect((await c.execute({ tool: "read_file", args: { path: "g" } })).output).toBe("2");
    await expect(pool.release({ key: "x" } as unknown as LeasedSlot)).rejects.toBeInstanceOf(PoolError);
  });

  it("a slot whose reset fails is taken out of service", async () => {
    const { pool, provisioner } = makePool({ minContainers: 1, maxContainers: 1 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    provisioner.running.get(0)!.failResets = true;
    await pool.release(a);
    expect(pool.stats().slots.free).toBe(1);
    expect(pool.stats().slots.total).toBe(1);
  });

  it("serves waiters first-in first-out", async () => {
    const { pool } = makePool({ minContainers: 1, maxContainers: 1 });
    await pool.start();
    const held = [await pool.acquire({ trajectoryId: "h1" }), await pool.acquire({ trajectoryId: "h2" })];
    const order: string[] = [];
    const waits = ["w1", "w2", "w3"].map((id) => pool.acquire({ trajectoryId: id }).then((s) => (order.push(id), s)));
    await until(() => pool.stats().waiting === 3);
    await pool.release(held[0]!);
    await pool.release(held[1]!);
    const [s1, s2] = await Promise.all([waits[0]!, waits[1]!]);
    expect(order).toEqual(["w1", "w2"]);
    await pool.release(s1);
    const s3 = await waits[2]!;
    expect(order).toEqual(["w1", "w2", "w3"]);
    expect(s3.trajectoryId).toBe("w3");
    expect(s2.trajectoryId).toBe("w2");
  });

  it("times out with counts, and cancels through an AbortSignal", async () => {
    const { pool, provisioner } = makePool({ minContainers: 1, maxContainers: 1 });
    await pool.start();
    await pool.acquire({ trajectoryId: "a" });
    await pool.acquire({ trajectoryId: "b" });
    const err = await pool.acquire({ trajectoryId: "c", timeoutMs: 50 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SlotAcquireTimeoutError);
    expect((err as SlotAcquireTimeoutError).counts).toMatchObject({ slots: 2, held: 2, waiting: 1, maxContainers: 1 });
    expect((err as Error).message).toMatch(/2 slots exist, 2 are held, 1 acquires are waiting/);
    // A provisioner problem after start (e.g. no capacity) is named in later timeouts.
    provisioner.problem(new ProvisionerError("Nomad could not place 1 of 2 sandbox allocations: DimensionExhausted: memory (3)", "placement"));
    const err2 = await pool.acquire({ trajectoryId: "c2", timeoutMs: 30 }).catch((e: unknown) => e);
    expect((err2 as Error).message).toMatch(/memory provisioner reported \d+ s ago: Nomad could not place/);
    const controller = new AbortController();
    const p = pool.acquire({ trajectoryId: "d", signal: controller.signal });
    await until(() => pool.stats().waiting === 1);
    controller.abort(new Error("trajectory cancelled"));
    await expect(p).rejects.toThrow("trajectory cancelled");
    expect(pool.stats().waiting).toBe(0);
  });

  it("scales up from demand in one call: ceil((held + waiting + headroom) / slots)", async () => {
    const { pool, provisioner } = makePool({ slotsPerContainer: 10, minContainers: 1, maxContainers: 10, headroomSlots: 5 });
    await pool.start();
    const acquires = Array.from({ length: 40 }, (_, i) => pool.acquire({ trajectoryId: `t${i}` }));
    const slots = await Promise.all(acquires);
    // 40 demand + 5 headroom over 10 per container = 5 containers, asked in a single call.
    expect(provisioner.scaleCalls.map((c) => c.count)).toEqual([5]);
    expect(new Set(slots.map((s) => s.key)).size).toBe(40);
    expect(pool.stats().scaleEvents).toBe(1);
    expect(pool.stats().targetContainers).toBe(5);
    const metrics = pool.metrics.render();
    expect(metrics).toContain('slotpool_pool_slots{state="held"} 40');
    expect(metrics).toContain(`slotpool_pool_containers{state="ready"} ${pool.stats().containers.ready}`);
    expect(metrics).toContain('slotpool_pool_scale_events_total{result="ok"} 1');
    expect(metrics).toMatch(/slotpool_pool_acquire_seconds_count 40/);
  });

  it("clamps to maxContainers and limits containers still starting", async () => {
    const { pool, provisioner } = makePool(
      { slotsPerContainer: 1, minContainers: 1, maxContainers: 6, maxStartingContainers: 2, acquireTimeoutMs: 5_000 },
      { upDelayMs: 40 },
    );
    await pool.start();
    const acquires = Array.from({ length: 10 }, (_, i) => pool.acquire({ trajectoryId: `t${i}` }).catch((e: unknown) => e));
    await until(() => pool.stats().slots.held === 6);
    const counts = provisioner.scaleCalls.map((c) => c.count);
    expect(counts[0]).toBe(3); // 1 up + 2 starting
    expect(Math.max(...counts)).toBe(6);
    for (let i = 1; i < counts.length; i++) expect(counts[i]! - counts[i - 1]!).toBeLessThanOrEqual(2);
    expect(pool.stats().waiting).toBe(4);
    await pool.stop();
    const results = await Promise.all(acquires);
    expect(results.filter((r) => r instanceof PoolNotRunningError)).toHaveLength(4);
  });

  it("scale-down drains the highest containers and lowers the count only once their slots are free", async () => {
    const { pool, provisioner } = makePool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 4, idleTimeoutMs: 100 });
    await pool.start();
    const slots = await Promise.all(Array.from({ length: 8 }, (_, i) => pool.acquire({ trajectoryId: `t${i}` })));
    expect(pool.stats().containers.ready).toBe(4);
    for (const s of slots) await s.execute({ tool: "write_file", args: { path: "mine", content: s.trajectoryId } });
    // Release everything on containers 0 and 1: demand 4 slots → 2 containers; 2 and 3 are drained.
    for (const s of slots.filter((s) => s.container.index <= 1)) await pool.release(s);
    const keep = slots.filter((s) => s.container.index >= 2);
    await until(() => pool.stats().containers.draining === 2);
    // Draining containers hand out nothing new; held slots there keep working.
    const fresh = await pool.acquire({ trajectoryId: "fresh" });
    expect(fresh.container.index).toBeLessThanOrEqual(1);
    await pool.release(fresh);
    // wait: a window of five ticks (50 ms) in which no scale-down may come while slots are held (a loaded box can only show fewer)
    await new Promise((r) => setTimeout(r, 250));
    expect(provisioner.scaleCalls.at(-1)!.count).toBe(4); // nothing stopped while slots are held there
    for (const s of keep) expect((await s.execute({ tool: "read_file", args: { path: "mine" } })).output).toBe(s.trajectoryId);
    // Free container 3 first: the count drops to 3 (Nomad stops the highest index).
    for (const s of keep.filter((s) => s.container.index === 3)) await pool.release(s);
    await until(() => provisioner.target === 3);
    for (const s of keep.filter((s) => s.container.index === 2)) {
      expect((await s.execute({ tool: "read_file", args: { path: "mine" } })).output).toBe(s.trajectoryId);
      await pool.release(s);
    }
    await until(() => provisioner.target === 1);
    expect(pool.stats().slots.lost).toBe(0);
    expect(pool.stats().containers.lost).toBe(0);
  });

  it("demand returning during a drain un-drains containers instead of starting new ones", async () => {
    const { pool, provisioner } = makePool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 3, idleTimeoutMs: 50 });
    await pool.start();
    const slots = await Promise.all([0, 1, 2].map((i) => pool.acquire({ trajectoryId: `t${i}` })));
    await pool.release(slots[1]!);
    await pool.release(slots[2]!);
    await until(() => pool.stats().containers.draining === 1 || provisioner.target < 3);
    const again = await Promise.all([pool.acquire({ trajectoryId: "x" }), pool.acquire({ trajectoryId: "y" })]);
    expect(again.map((s) => s.container.index).sort()).toEqual([1, 2]);
    expect(pool.stats().slots.held).toBe(3);
  });

  it("containers being stopped by a scale-down are never lent out again, even if demand returns", async () => {
    const { pool, provisioner } = makePool(
      { slotsPerContainer: 1, minContainers: 1, maxContainers: 3, idleTimeoutMs: 30 },
      { stopDelayMs: 300 },
    );
    await pool.start();
    const slots = await Promise.all([0, 1, 2].map((i) => pool.acquire({ trajectoryId: `t${i}` })));
    for (const s of slots.slice(1)) await pool.release(s);
    await until(() => provisioner.target === 1);
    const stoppingIds = slots.slice(1).map((s) => s.container.id);
    // Demand returns while containers 1 and 2 are still shutting down.
    const again = await Promise.all([pool.acquire({ trajectoryId: "x" }), pool.acquire({ trajectoryId: "y" })]);
    for (const s of again) expect(stoppingIds).not.toContain(s.container.id);
    // wait: the stopping containers finish going; a loss of the new slots would show in this window
    await new Promise((r) => setTimeout(r, 400));
    expect(again.every((s) => !s.lost)).toBe(true);
    expect(pool.stats().slots.lost).toBe(0);
  });

  it("a lost container: held slots raise SlotLostError naming the allocation, free slots vanish, a replacement joins", async () => {
    const { pool, provisioner } = makePool({ slotsPerContainer: 2, minContainers: 2, maxContainers: 2 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    const b = await pool.acquire({ trajectoryId: "b" });
    const c = await pool.acquire({ trajectoryId: "c" });
    expect(c.container.index).toBe(1);
    const lostEvents: string[] = [];
    pool.on("slot-lost", (e) => lostEvents.push(e.trajectoryId));
    const dead = provisioner.kill(0, "OOM Killed: exit code 137");
    expect(a.lost).toBe(true);
    const err = await a.execute({ tool: "bash", args: {} }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SlotLostError);
    expect((err as SlotLostError).containerId).toBe(dead.info.id);
    expect((err as Error).message).toContain(dead.info.id);
    expect((err as Error).message).toContain("OOM Killed");
    await expect(b.readArtifact({ path: "x" })).rejects.toBeInstanceOf(SlotLostError);
    expect(lostEvents.sort()).toEqual(["a", "b"]);
    expect(pool.stats().slots.lost).toBe(2);
    await pool.release(a);
    await pool.release(b);
    expect(pool.stats().slots.lost).toBe(0);
    // The replacement (same index, new id) joins; the lost slots are never handed out again.
    await until(() => pool.stats().containers.ready === 2);
    const d = await pool.acquire({ trajectoryId: "d" });
    expect(d.container.index).toBe(0);
    expect(d.container.id).not.toBe(dead.info.id);
    expect(pool.stats().containers.lost).toBe(1);
  });

  it("a call failing to connect confirms the loss and raises SlotLostError", async () => {
    const { pool, provisioner } = makePool({ minContainers: 1, maxContainers: 1 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    // The container dies without the provisioner noticing (yet): the failed call finds out.
    provisioner.running.get(0)!.dead = true;
    const err = await a.execute({ tool: "bash", args: {} }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SlotLostError);
    expect((err as Error).message).toMatch(/stopped accepting connections/);
  });

  it("failing health checks mark a container lost", async () => {
    const { pool, provisioner } = makePool({ minContainers: 1, maxContainers: 1, healthIntervalMs: 20, healthFailuresBeforeLost: 2 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    provisioner.running.get(0)!.unhealthy = true;
    await until(() => a.lost);
    await expect(a.execute({ tool: "bash", args: {} })).rejects.toThrow(/failed 2 health checks/);
  });

  it("without replaceContainer (Nomad), a container that recovers is re-admitted with every slot reset", async () => {
    const { pool, provisioner } = makePool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 1, healthIntervalMs: 20, healthFailuresBeforeLost: 2 });
    (provisioner as { replaceContainer?: unknown }).replaceContainer = undefined;
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    await a.execute({ tool: "write_file", args: { path: "left", content: "x" } });
    const c = provisioner.running.get(0)!;
    c.unhealthy = true;
    await until(() => a.lost);
    expect(pool.stats().slots.total).toBe(0);
    c.unhealthy = false;
    await until(() => pool.stats().slots.free === 2);
    expect(c.resets).toBe(2); // both slots wiped before anyone gets them
    const b = await pool.acquire({ trajectoryId: "b" });
    expect(b.container.id).toBe(a.container.id);
    expect((await b.execute({ tool: "read_file", args: { path: "left" } })).success).toBe(false);
    await expect(a.execute({ tool: "bash", args: {} })).rejects.toBeInstanceOf(SlotLostError);
  });

  it("reclaims a slot whose lease expired, with a warning naming the trajectory", async () => {
    const { pool, provisioner } = makePool({ minContainers: 1, maxContainers: 1, leaseTimeoutMs: 80 });
    await pool.start();
    const reclaimed: string[] = [];
    pool.on("slot-reclaimed", (e) => reclaimed.push(e.trajectoryId));
    const a = await pool.acquire({ trajectoryId: "abandoned" });
    const b = await pool.acquire({ trajectoryId: "busy" });
    await a.execute({ tool: "write_file", args: { path: "f", content: "x" } });
    // b keeps using its slot; a goes quiet.
    const keepAlive = setInterval(() => b.touch(), 20);
    await until(() => reclaimed.length > 0);
    clearInterval(keepAlive);
    expect(reclaimed).toEqual(["abandoned"]);
    await expect(a.execute({ tool: "bash", args: {} })).rejects.toThrow(/abandoned neither used nor released/);
    expect(b.lost).toBe(false);
    await until(() => pool.stats().slots.free === 1);
    expect(provisioner.running.get(0)!.resets).toBe(1);
    const c = await pool.acquire({ trajectoryId: "c" });
    expect((await c.execute({ tool: "read_file", args: { path: "f" } })).success).toBe(false);
  });

  it("retries a failed scale call (Nomad 500) with backoff and still serves the waiters", async () => {
    const { pool, provisioner } = makePool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 3 });
    await pool.start();
    provisioner.failNextScales(2);
    const slots = await Promise.all([0, 1, 2].map((i) => pool.acquire({ trajectoryId: `t${i}`, timeoutMs: 10_000 })));
    expect(slots).toHaveLength(3);
    const log = pool.scaleLog();
    expect(log.filter((e) => !e.ok)).toHaveLength(2);
    expect(log.at(-1)).toMatchObject({ ok: true, to: 3 });
  });

  it("stop() fails waiters and ends leases; executeBatch streams results in order", async () => {
    const { pool } = makePool({ minContainers: 1, maxContainers: 1 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    const seen: number[] = [];
    const results = await a.executeBatch(
      [
        { tool: "write_file", args: { path: "p", content: "v" } },
        { tool: "read_file", args: { path: "p" } },
      ],
      (i) => seen.push(i),
    );
    expect(seen).toEqual([0, 1]);
    expect(results[1]!.output).toBe("v");
    await pool.acquire({ trajectoryId: "b" });
    const waiting = pool.acquire({ trajectoryId: "c" });
    await pool.stop();
    await expect(waiting).rejects.toBeInstanceOf(PoolNotRunningError);
    await expect(a.execute({ tool: "bash", args: {} })).rejects.toThrow(/pool was stopped/);
  });
});
