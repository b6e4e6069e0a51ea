/**
 * Faults on the Nomad path, end to end: ToolExecutor → SlotPool → NomadProvisioner → Nomad
 * API emulator → allocation (a real sandbox server) → tool call. Each scenario asserts a
 * clear error (or a successful retry where retrying makes sense), 0 slots leaked (pool
 * stats), 0 jobs orphaned (the emulator's job list after stop), and no hang: every
 * scenario runs under a deadline.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startNomadEmulator, type NomadEmulator } from "../support/nomad-emulator.js";
import { SlotLostError } from "../../src/pool/errors.js";
import { liveJobs, nomadStack, outcome, runningAllocations, within, type Stack } from "./support.js";

let nomad: NomadEmulator;
const stacks: Stack[] = [];
const extraEmulators: NomadEmulator[] = [];

beforeAll(async () => {
  nomad = await startNomadEmulator({ rescheduleDelayMs: 100 });
});
afterEach(async () => {
  for (const s of stacks.splice(0)) await s.stop();
  for (const e of extraEmulators.splice(0)) await e.stop();
});
afterAll(async () => {
  await nomad?.stop();
});

function track(s: Stack): Stack {
  stacks.push(s);
  return s;
}

async function emulator(options: Parameters<typeof startNomadEmulator>[0] = {}): Promise<NomadEmulator> {
  const e = await startNomadEmulator({ rescheduleDelayMs: 100, ...options });
  extraEmulators.push(e);
  return e;
}

/** After stop(): no slot held, the job purged, no allocation left running. */
async function assertNothingLeaked(s: Stack, emu: NomadEmulator = nomad): Promise<void> {
  const stats = s.pool.stats();
  await s.stop();
  expect(stats.slots.held, `slots still held: ${JSON.stringify(stats)}`).toBe(0);
  expect(await liveJobs(emu.address, s.jobId)).toEqual([]);
  expect(runningAllocations(emu, s.jobId)).toEqual([]);
}

describe("an allocation killed mid-trajectory", () => {
  it("the running call and every later call of the trajectory fail with a clear SlotLostError; others continue on the replacement", async () => {
    const s = track(nomadStack(nomad, { slotsPerContainer: 2, minContainers: 1, maxContainers: 1 }));
    await within(30_000, "pool start", s.pool.start());
    const first = await s.bash("victim", "echo keep > f && cat f");
    expect(first.output.trim()).toBe("keep");
    const allocId = runningAllocations(nomad, s.jobId)[0]!;
    const inFlight = s.bash("victim", "sleep 30; echo never", 60);
    // wait: the call reaching its slot before the allocation dies; lost before it, the answer is the same loss
    await new Promise((r) => setTimeout(r, 500));
    const t0 = Date.now();
    await nomad.killAllocation(allocId);
    const lost = await within(10_000, "in-flight call after the kill", outcome(inFlight));
    const noticedMs = Date.now() - t0;
    console.log(`in-flight call answered ${noticedMs} ms after the allocation was killed`);
    expect(lost, JSON.stringify(lost)).toBeInstanceOf(SlotLostError);
    expect((lost as SlotLostError).message).toMatch(/lost/);
    expect((lost as SlotLostError).containerId).toBe(allocId);
    // Later calls of the same trajectory never land silently on a fresh, empty slot.
    const later = await within(20_000, "later call", outcome(s.bash("victim", "cat f")));
    expect(later).toBeInstanceOf(SlotLostError);
    await within(20_000, "release", s.executor.release("victim"));
    // Another trajectory runs on the replacement allocation.
    const other = await within(30_000, "call on the replacement", s.bash("other", "echo fresh"));
    expect(other.output.trim()).toBe("fresh");
    expect(runningAllocations(nomad, s.jobId)).not.toContain(allocId);
    await s.executor.release("other");
    expect(s.pool.stats().slots.held).toBe(0);
    await assertNothingLeaked(s);
  }, 60_000);
});

describe("the node is lost", () => {
  it("every trajectory on it gets SlotLostError; new trajectories run on replacements on a fresh node; nothing leaks", async () => {
    const emu = await emulator();
    const s = track(nomadStack(emu, { slotsPerContainer: 2, minContainers: 2, maxContainers: 2 }));
    await within(30_000, "start", s.pool.start());
    for (const t of ["n1", "n2", "n3"]) expect((await s.bash(t, `echo ${t}`)).output.trim()).toBe(t);
    const before = runningAllocations(emu, s.jobId);
    const t0 = Date.now();
    await emu.loseNode();
    const after = await within(15_000, "calls after the node was lost", Promise.all(["n1", "n2", "n3"].map((t) => outcome(s.bash(t, "echo again")))));
    console.log(`after loseNode, the 3 trajectories were told within ${Date.now() - t0} ms`);
    for (const r of after) {
      expect(r, JSON.stringify(r)).toBeInstanceOf(SlotLostError);
      expect((r as SlotLostError).message).toMatch(/lost/);
    }
    for (const t of ["n1", "n2", "n3"]) await s.executor.release(t);
    const fresh = await within(30_000, "a new trajectory on a replacement", s.bash("fresh", "echo fresh"));
    expect(fresh.output.trim()).toBe("fresh");
    expect(before).not.toContain(runningAllocations(emu, s.jobId)[0]);
    await s.executor.release("fresh");
    await assertNothingLeaked(s, emu);
  }, 60_000);
});

describe("allocations that take too long to start", () => {
  it("start() gives up after startTimeoutMs with a clear error, and leaves no job", async () => {
    const emu = await emulator();
    emu.delayAllocationStartMs = 60_000;
    const s = track(nomadStack(emu, { startTimeoutMs: 3_000 }));
    const t0 = Date.now();
    const err = await within(20_000, "start with stuck allocations", s.pool.start().then(() => null, (e: unknown) => e as Error));
    console.log(`start() with allocations stuck starting failed after ${Date.now() - t0} ms: ${err?.message.slice(0, 300)}`);
    expect(err).toBeInstanceOf(Error);
    expect(err!.message).toMatch(/3000 ms|within/);
    // bound: it fails by its 3 s start timeout, not after the allocations' 60 s: 15 s is far from both.
    expect(Date.now() - t0).toBeLessThan(15_000);
    emu.delayAllocationStartMs = 0;
    await assertNothingLeaked(s, emu);
  }, 45_000);
});

describe("Nomad failing during start", () => {
  it("500s on job registration are retried, then the pool starts", async () => {
    const emu = await emulator();
    const s = track(nomadStack(emu));
    emu.failNext("POST /v1/jobs", 500, 2, "rpc error: no leader");
    await within(30_000, "start through 500s", s.pool.start());
    expect(emu.requests.filter((r) => r.method === "POST" && r.path === "/v1/jobs").length).toBeGreaterThanOrEqual(3);
    expect((await s.bash("t", "echo up")).output.trim()).toBe("up");
    await s.executor.release("t");
    await assertNothingLeaked(s, emu);
  }, 45_000);

  it("persistent 500s: start() fails with a clear error in bounded time and leaves no job", async () => {
    const emu = await emulator();
    const s = track(nomadStack(emu));
    emu.failNext("POST /v1/jobs", 500, 1_000, "rpc error: no leader");
    const t0 = Date.now();
    const err = await within(30_000, "failing start", s.pool.start().then(() => null, (e: unknown) => e as Error));
    console.log(`start() with persistent 500s failed after ${Date.now() - t0} ms: ${err?.message}`);
    expect(err).toBeInstanceOf(Error);
    expect(err!.message).toMatch(/500|no leader/);
    expect(await liveJobs(emu.address, s.jobId)).toEqual([]);
    await assertNothingLeaked(s, emu);
  }, 45_000);

  it("a registration request that hangs is timed out and retried", async () => {
    const emu = await emulator();
    const s = track(nomadStack(emu));
    emu.failNext("POST /v1/jobs", "hang", 1);
    const t0 = Date.now();
    await within(30_000, "start through a hung request", s.pool.start());
    console.log(`start() through one hung registration took ${Date.now() - t0} ms`);
    expect((await s.bash("t", "echo up")).output.trim()).toBe("up");
    await s.executor.release("t");
    await assertNothingLeaked(s, emu);
  }, 45_000);

  it("a token Nomad denies: start() fails at once naming the token, nothing is registered", async () => {
    const emu = await emulator({ token: "the-right-acl-token" });
    const s = track(nomadStack(emu, {}, "a-wrong-acl-token"));
    const t0 = Date.now();
    const err = await within(15_000, "denied start", s.pool.start().then(() => null, (e: unknown) => e as Error));
    expect(err).toBeInstanceOf(Error);
    expect(err!.message).toMatch(/denied|403|ACL/i);
    expect(err!.message).toMatch(/NOMAD_TOKEN/);
    expect(err!.message).not.toContain("a-wrong-acl-token");
    // bound: the first denied call fails the start, not the pool's 120 s start timeout: 10 s is far from both.
    expect(Date.now() - t0).toBeLessThan(10_000);
    expect(await liveJobs(emu.address, s.jobId).catch(() => [])).toEqual([]);
    expect(emu.allocations(s.jobId)).toEqual([]);
  }, 30_000);
});

describe("Nomad failing during scaling", () => {
  it("500s and a hung scale request: retried, the waiting trajectories get their slots", async () => {
    const emu = await emulator();
    const s = track(nomadStack(emu, { slotsPerContainer: 1, minContainers: 1, maxContainers: 3 }));
    await within(30_000, "start", s.pool.start());
    emu.failNext(`POST /v1/job/${s.jobId}/scale`, 500, 2, "rpc error: leader unavailable");
    emu.failNext(`POST /v1/job/${s.jobId}/scale`, "hang", 1);
    const results = await within(45_000, "three trajectories through failing scale calls", Promise.all(["a", "b", "c"].map((t) => s.bash(t, `echo ${t}`))));
    expect(results.map((r) => r.output.trim())).toEqual(["a", "b", "c"]);
    expect(s.pool.stats().containers.ready).toBe(3);
    for (const t of ["a", "b", "c"]) await s.executor.release(t);
    await assertNothingLeaked(s, emu);
  }, 60_000);

  it("scaling denied for good: calls beyond capacity fail with a clear acquire error, not a hang; held slots keep working", async () => {
    const emu = await emulator();
    const s = track(nomadStack(emu, { slotsPerContainer: 1, minContainers: 1, maxContainers: 2, acquireTimeoutMs: 4_000 }));
    await within(30_000, "start", s.pool.start());
    expect((await s.bash("holder", "echo held")).output.trim()).toBe("held");
    emu.failNext(`POST /v1/job/${s.jobId}/scale`, 403, 1_000, "Permission denied");
    const t0 = Date.now();
    const starved = await within(20_000, "starved call", s.bash("starved", "echo never"));
    console.log(`call without capacity answered after ${Date.now() - t0} ms: ${starved.error}`);
    expect(starved.success).toBe(false);
    expect(starved.error).toMatch(/could not get a sandbox slot|no slot became free/);
    expect((await s.bash("holder", "echo still")).output.trim()).toBe("still");
    await s.executor.release("holder");
    await s.executor.release("starved");
    await assertNothingLeaked(s, emu);
  }, 60_000);
});
