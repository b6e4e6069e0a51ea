import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { LatencyWindow, percentile } from "../../src/observability/latency-window.js";
import { silentLogger } from "../../src/observability/logger.js";
import { Autoscaler, type AutoscalerHost, type ScaleEvent } from "../../src/pool/autoscaler.js";
import { HealthMonitor, type HealthHost } from "../../src/pool/health-monitor.js";
import { ContainerRecord } from "../../src/pool/records.js";
import type { SandboxClientLike } from "../../src/pool/sandbox-client.js";
import type { ContainerInfo } from "../../src/pool/types.js";
import { WaiterQueue, type Waiter } from "../../src/pool/waiter-queue.js";

/** The SlotPool's parts, each alone, with a fake clock. */

function info(index: number, slots = 2): ContainerInfo {
  return { id: `c${index}`, index, url: `http://127.0.0.1:${9000 + index}`, slots } as ContainerInfo;
}

/** A client whose /health answers as `healthy()` says. */
function fakeClient(healthy: () => boolean, slots = 2, generations?: number[]): SandboxClientLike {
  return {
    health: async () => {
      if (!healthy()) throw Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
      return generations ? { slots, slot_generations: generations } : { slots };
    },
    reset: async () => ({ success: true, output: "", error: "" }),
    close: async () => undefined,
  } as unknown as SandboxClientLike;
}

function ready(index: number, busy = 0): ContainerRecord {
  const c = new ContainerRecord(info(index), fakeClient(() => true));
  c.initSlots(2);
  c.state = "ready";
  c.busy = busy;
  return c;
}

describe("WaiterQueue", () => {
  const waiter = (id: string, log: string[]): Waiter => ({
    trajectoryId: id,
    startedAt: 0,
    resolve: () => log.push(`ok ${id}`),
    reject: (e) => log.push(`fail ${id}: ${(e as Error).message}`),
    done: false,
    cleanup: () => log.push(`cleanup ${id}`),
  });

  it("serves first come first served, skipping dropped waiters", () => {
    const log: string[] = [];
    const q = new WaiterQueue();
    const [a, b, c] = [waiter("a", log), waiter("b", log), waiter("c", log)];
    q.push(a);
    q.push(b);
    q.push(c);
    q.drop(a);
    expect(q.size).toBe(2);
    expect(q.take()).toBe(b);
    expect(q.peek()).toBe(c);
    q.failAll(new Error("stopped"));
    expect(q.size).toBe(0);
    expect(q.peek()).toBeUndefined();
    expect(log).toEqual(["cleanup a", "cleanup b", "cleanup c", "fail c: stopped"]);
  });

  it("dropping twice counts once", () => {
    const q = new WaiterQueue();
    const w = waiter("a", []);
    q.push(w);
    q.drop(w);
    q.drop(w);
    expect(q.size).toBe(0);
  });
});

describe("LatencyWindow", () => {
  it("keeps the last `size` values and takes nearest-rank percentiles", () => {
    const w = new LatencyWindow(4);
    expect(w.summary()).toEqual({ p50: 0, p99: 0, count: 0 });
    for (const v of [100, 1, 2, 3, 4]) w.record(v);
    // 100 fell out of the window; the count still has it.
    expect(w.summary()).toEqual({ p50: 2, p99: 4, count: 5 });
    expect(percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9)).toBe(9);
    expect(() => new LatencyWindow(0)).toThrow(RangeError);
  });
});

describe("Autoscaler", () => {
  let now = 0;
  let containers: ContainerRecord[];
  let demand: { held: number; waiting: number };
  let calls: number[];
  let events: ScaleEvent[];
  let failNext = false;

  const host = (): AutoscalerHost => ({
    config: { minContainers: 1, maxContainers: 4, slotsPerContainer: 2, headroomSlots: 0, maxStartingContainers: 1, idleTimeoutMs: 1_000 },
    provisioner: {
      setTargetCount: async (n: number) => {
        calls.push(n);
        if (failNext) {
          failNext = false;
          throw new Error("nomad says no");
        }
      },
    },
    logger: silentLogger(),
    isRunning: () => true,
    demand: () => demand,
    containers: () => containers,
    containerDraining: () => undefined,
    containerUndrained: () => undefined,
    slotsReopened: () => undefined,
    scaled: (e) => events.push(e),
  });

  beforeEach(() => {
    vi.useFakeTimers();
    now = 0;
    containers = [ready(0, 2)];
    demand = { held: 2, waiting: 3 };
    calls = [];
    events = [];
  });
  afterEach(() => vi.useRealTimers());

  it("scales up to demand, at most maxStartingContainers ahead of those up", async () => {
    const s = new Autoscaler(host(), () => now);
    s.begin(1);
    expect(s.desired()).toBe(3); // ceil((2 + 3) / 2)
    s.evaluate();
    await vi.runAllTimersAsync();
    expect(calls).toEqual([2]); // 1 up + 1 starting allowed
    expect(events).toMatchObject([{ from: 1, to: 2, ok: true }]);
    expect(s.target).toBe(2);
  });

  it("drains a surplus only after idleTimeoutMs, never below a busy container", async () => {
    containers = [ready(0, 1), ready(1, 0), ready(2, 1)];
    demand = { held: 2, waiting: 0 };
    const s = new Autoscaler(host(), () => now);
    s.begin(3);
    s.evaluate();
    expect(calls).toEqual([]);
    now = 1_500;
    s.evaluate();
    await vi.runAllTimersAsync();
    // desired 1, but container 2 holds a slot: the count stays 3 and 1..2 drain.
    expect(calls).toEqual([]);
    expect(containers.map((c) => c.state)).toEqual(["ready", "draining", "draining"]);
    containers[2]!.busy = 0;
    s.evaluate();
    await vi.runAllTimersAsync();
    expect(calls).toEqual([1]);
    expect(containers[1]!.retiring && containers[2]!.retiring).toBe(true);
  });

  it("backs off after a failed call and keeps the old count", async () => {
    const s = new Autoscaler(host(), () => now);
    s.begin(1);
    failNext = true;
    s.evaluate();
    await vi.advanceTimersByTimeAsync(0);
    expect(s.target).toBe(1);
    expect(events).toMatchObject([{ ok: false, error: "nomad says no" }]);
    s.evaluate(); // blocked: the retry waits 500 ms
    await vi.advanceTimersByTimeAsync(0);
    expect(calls).toEqual([2]);
    now = 600;
    await vi.advanceTimersByTimeAsync(600);
    expect(calls).toEqual([2, 2]);
    expect(s.target).toBe(2);
  });
});

describe("HealthMonitor", () => {
  let now = 0;
  let lost: string[];
  let replaced: string[];
  let rejoined: string[];
  let containers: ContainerRecord[];

  const host = (replace: boolean, healthy: () => boolean): HealthHost => ({
    config: { containerHealthTimeoutMs: 1_000, healthIntervalMs: 100, healthFailuresBeforeLost: 2 },
    provisioner: replace ? { replaceContainer: async (id: string) => void replaced.push(id) } : {},
    logger: silentLogger(),
    isRunning: () => true,
    containers: () => containers,
    createClient: () => fakeClient(healthy),
    markLost: (c, reason) => {
      c.state = "lost";
      lost.push(`${c.info.id}: ${reason}`);
    },
    rejoin: (i) => rejoined.push(i.id),
  });

  beforeEach(() => {
    vi.useFakeTimers();
    now = 0;
    lost = [];
    replaced = [];
    rejoined = [];
    containers = [];
  });
  afterEach(() => vi.useRealTimers());

  it("admits a container once /health answers, with the slot count it reports", async () => {
    let up = false;
    const m = new HealthMonitor(host(true, () => up), () => now);
    const c = new ContainerRecord(info(0, 3), fakeClient(() => up, 3));
    const admitted = m.admit(c);
    await vi.advanceTimersByTimeAsync(300);
    up = true;
    now = 300;
    await vi.advanceTimersByTimeAsync(500);
    expect(await admitted).toEqual({ slots: 3 });
  });

  it("takes the slots' generations from /health when the server reports one per slot (a pool joining a running container)", async () => {
    const m = new HealthMonitor(host(true, () => true), () => now);
    const reported = m.admit(new ContainerRecord(info(0, 3), fakeClient(() => true, 3, [4, 0, 7])));
    await vi.advanceTimersByTimeAsync(10);
    expect(await reported).toEqual({ slots: 3, generations: [4, 0, 7] });
    const c = new ContainerRecord(info(1, 3), fakeClient(() => true, 3));
    c.initSlots(3, [4, 0, 7]);
    expect(c.slots.map((s) => s.generation)).toEqual([4, 0, 7]);
    // A count that does not match the slots is not trusted: no generation is sent then.
    const odd = m.admit(new ContainerRecord(info(2, 3), fakeClient(() => true, 3, [1])));
    await vi.advanceTimersByTimeAsync(10);
    expect(await odd).toEqual({ slots: 3 });
  });

  it("gives up a container that never answers within containerHealthTimeoutMs and asks for a replacement", async () => {
    const m = new HealthMonitor(host(true, () => false), () => now);
    const c = new ContainerRecord(info(0), fakeClient(() => false));
    const admitted = m.admit(c);
    now = 2_000;
    await vi.advanceTimersByTimeAsync(200);
    expect(await admitted).toBeUndefined();
    expect(lost).toEqual([expect.stringMatching(/^c0: .*did not answer \/health within 1000 ms/)]);
    expect(replaced).toEqual(["c0"]);
  });

  it("quarantines what the provisioner cannot replace, and lets it rejoin after two good answers", async () => {
    let up = false;
    const c = ready(0);
    containers = [c];
    const m = new HealthMonitor(host(false, () => up), () => now);
    c.state = "ready";
    (c as { client: SandboxClientLike }).client = fakeClient(() => up);
    m.checkAll();
    await vi.advanceTimersByTimeAsync(0);
    m.checkAll();
    await vi.advanceTimersByTimeAsync(0);
    expect(lost).toEqual([expect.stringMatching(/failed 2 health checks in a row/)]);
    up = true;
    m.checkAll();
    await vi.advanceTimersByTimeAsync(0);
    expect(rejoined).toEqual([]);
    m.checkAll();
    await vi.advanceTimersByTimeAsync(0);
    expect(rejoined).toEqual(["c0"]);
  });
});
