import { EventEmitter } from "node:events";
import type { Logger } from "pino";
import { silentLogger } from "../observability/logger.js";
import { MetricsRegistry, type Counter, type Histogram } from "../observability/metrics.js";
import { parseSlotPoolConfig, type SlotPoolConfig, type SlotPoolConfigInput } from "./config.js";
import { PoolNotRunningError, refusedScale, SlotAcquireTimeoutError, SlotPoolError } from "./errors.js";
import { ProvisionerError, type ContainerGone, type Provisioner, type ProvisionerEvents } from "./provisioner.js";
import { ContainerRecord, type SlotRecord } from "./records.js";
import { SandboxClient, isConnectionFailure, type SandboxClientLike } from "./sandbox-client.js";
import { SlotLease, type LeaseHost } from "./slot-lease.js";
import type { AcquireOptions, ContainerInfo, PoolStats, ReleaseOptions, Slot, SlotPoolLike } from "./types.js";

export interface ScaleEvent {
  at: number;
  from: number;
  to: number;
  reason: string;
  ok: boolean;
  error?: string;
}

/** Typed events of the pool, for dashboards, tests and the executor. */
export interface SlotPoolEvents {
  "container-starting": [{ id: string; index: number }];
  "container-ready": [ContainerInfo];
  "container-draining": [ContainerInfo];
  "container-undrained": [ContainerInfo];
  "container-lost": [{ container: ContainerInfo; reason: string }];
  "container-removed": [{ container: ContainerInfo; reason: string }];
  "slot-acquired": [{ key: string; trajectoryId: string; waitedMs: number }];
  "slot-released": [{ key: string; trajectoryId: string; reset: boolean }];
  "slot-lost": [{ key: string; trajectoryId: string; allocationId: string; reason: string }];
  "slot-reclaimed": [{ key: string; trajectoryId: string; idleMs: number }];
  scale: [ScaleEvent];
  problem: [ProvisionerError];
}

export interface SlotPoolOptions extends SlotPoolConfigInput {
  provisioner: Provisioner;
  logger?: Logger;
  /** Registry for the pool's Prometheus metrics (default: a private one, see `metrics`). */
  metrics?: MetricsRegistry;
  /** Makes the HTTP client of a container (tests substitute an in-memory one). */
  createClient?: (info: ContainerInfo, hooks: { onConnectionFailure: (error: Error) => void; maxConcurrency: number }) => SandboxClientLike;
}

interface Waiter {
  trajectoryId: string;
  startedAt: number;
  resolve: (slot: Slot) => void;
  reject: (err: unknown) => void;
  done: boolean;
  cleanup: () => void;
}

type PoolState = "new" | "starting" | "running" | "stopping" | "stopped";

const LATENCY_WINDOW = 4096;

/**
 * Turns containers into slots and hands them to trajectories.
 *
 * - acquire: free slots of the lowest-index ready container first; otherwise FIFO waiters.
 *   Within a container, a slot just reset goes last: its sandbox namespace is being rebuilt
 *   in the background, the container's other free slots are warm (first call ≈ 2 ms, not a
 *   namespace start-up). Packing across containers, and so scale-down, is unchanged.
 * - scale up: target = ceil((held + waiting + headroom) / slotsPerContainer) in [min, max],
 *   one provisioner call per change, at most `maxStartingContainers` still starting.
 * - scale down: a surplus lasting `idleTimeoutMs` drains the highest-index containers (no new
 *   slots there); the count drops only below containers whose slots are all free, so a
 *   scale-down never kills a held slot (Nomad and the local provisioner stop the highest indexes).
 * - loss: a container reported gone (provisioner) or failing /health drops its free slots and
 *   marks held ones lost; their leases raise SlotLostError from then on.
 * - leases: a held slot unused for `leaseTimeoutMs` is reset and returned.
 */
export class SlotPool extends EventEmitter<SlotPoolEvents> implements SlotPoolLike, LeaseHost {
  readonly config: SlotPoolConfig;
  readonly metrics: MetricsRegistry;
  private readonly provisioner: Provisioner;
  private readonly logger: Logger;
  private readonly createClient: NonNullable<SlotPoolOptions["createClient"]>;
  private state: PoolState = "new";

  /** Live and checking containers, sorted by index (packing order). */
  private readonly containers: ContainerRecord[] = [];
  private readonly byId = new Map<string, ContainerRecord>();
  /** Placed by the provisioner, not reachable yet. */
  private readonly starting = new Map<string, number>();
  private readonly leases = new Set<SlotLease>();
  private readonly retired = new Set<string>();
  /** Given up on, but still run by a provisioner that cannot replace it: probed for recovery. */
  private readonly quarantine = new Map<string, { info: ContainerInfo; probing: boolean; healthyChecks: number }>();

  private readonly waiters: Waiter[] = [];
  private waiterHead = 0;
  private waiting = 0;

  private freeCount = 0;
  private busyCount = 0;
  /** Held slots lost with their container whose trajectories have not released them yet. */
  private lostHeld = 0;
  private containersLost = 0;

  /** The count last asked of the provisioner (or being asked). */
  private target = 0;
  private confirmedTarget = 0;
  private scaleInFlight: Promise<void> | undefined;
  private scaleAgain = false;
  private scaleScheduled = false;
  private scaleRetryTimer: NodeJS.Timeout | undefined;
  private scaleFailures = 0;
  /** After a failed scale call, no new one before this time (performance.now()). */
  private scaleBlockedUntil = 0;
  /** Containers with an index at or above this are drained (Infinity: none). */
  private drainFrom = Number.POSITIVE_INFINITY;
  private surplusSince: number | undefined;
  private readonly scaleHistory: ScaleEvent[] = [];
  private scaleEvents = 0;

  private readonly latencies = new Float64Array(LATENCY_WINDOW);
  private latencyCount = 0;
  private readonly acquireHistogram: Histogram;
  private readonly scaleCounter: Counter;
  private readonly lostCounter: Counter;
  private readonly reclaimCounter: Counter;

  private tickTimer: NodeJS.Timeout | undefined;
  private healthTimer: NodeJS.Timeout | undefined;
  private startWaiter: { resolve: () => void; reject: (err: Error) => void } | undefined;
  private lastProblem: ProvisionerError | undefined;
  private lastProblemAt = 0;

  constructor(options: SlotPoolOptions) {
    super();
    const { provisioner, logger, metrics, createClient, ...config } = options;
    if (!provisioner) throw new SlotPoolError("SlotPool needs a provisioner (LocalProvisioner or NomadProvisioner)");
    this.config = parseSlotPoolConfig(config);
    this.provisioner = provisioner;
    this.logger = logger ?? silentLogger();
    this.createClient =
      createClient ??
      ((info, hooks) =>
        new SandboxClient({
          containerId: info.id,
          url: info.url,
          ...(info.token ? { token: info.token } : {}),
          maxConcurrency: hooks.maxConcurrency,
          onConnectionFailure: hooks.onConnectionFailure,
        }));
    this.metrics = metrics ?? new MetricsRegistry();
    this.acquireHistogram = this.metrics.histogram("slotpool_pool_acquire_seconds", "Time from acquire() to a slot handed out");
    this.scaleCounter = this.metrics.counter("slotpool_pool_scale_events_total", "Scale calls made to the provisioner, by result");
    this.lostCounter = this.metrics.counter("slotpool_pool_slots_lost_total", "Held slots lost with their container");
    this.reclaimCounter = this.metrics.counter("slotpool_pool_leases_reclaimed_total", "Held slots reclaimed after their lease expired");
    this.metrics.gauge("slotpool_pool_slots", "Slots by state", () => {
      const s = this.stats().slots;
      return [
        { labels: { state: "free" }, value: s.free },
        { labels: { state: "held" }, value: s.held },
        { labels: { state: "lost" }, value: s.lost },
      ];
    });
    this.metrics.gauge("slotpool_pool_containers", "Containers by state", () => {
      const c = this.stats().containers;
      return [
        { labels: { state: "starting" }, value: c.starting },
        { labels: { state: "ready" }, value: c.ready },
        { labels: { state: "draining" }, value: c.draining },
      ];
    });
    this.metrics.gauge("slotpool_pool_waiting", "acquire() calls waiting for a slot", () => [{ value: this.waiting }]);
    this.metrics.gauge("slotpool_pool_target_containers", "Container count asked of the provisioner", () => [{ value: this.target }]);
  }

  // ---------------------------------------------------------------- lifecycle

  /** Starts the provisioner and waits for `minContainers` healthy containers. */
  async start(): Promise<void> {
    if (this.state !== "new") throw new SlotPoolError(`SlotPool.start() called twice (pool is ${this.state})`);
    this.state = "starting";
    const events: ProvisionerEvents = {
      containerStarting: (id, index) => this.onContainerStarting(id, index),
      containerUp: (info) => this.onContainerUp(info),
      containerGone: (gone) => this.onContainerGone(gone),
      problem: (error) => this.onProblem(error),
    };
    const min = this.config.minContainers;
    this.target = min;
    this.confirmedTarget = min;
    let timer: NodeJS.Timeout | undefined;
    try {
      const ready = new Promise<void>((resolve, reject) => {
        this.startWaiter = { resolve, reject };
        timer = setTimeout(() => {
          void this.startTimeoutError().then(reject, reject);
        }, this.config.startTimeoutMs);
      });
      // start() may fail before `ready` is awaited; keep that rejection from going unhandled.
      ready.catch(() => undefined);
      await this.provisioner.start(events, min);
      if (this.readyCount() >= min) this.startWaiter?.resolve();
      await ready;
    } catch (err) {
      this.startWaiter = undefined;
      clearTimeout(timer);
      this.state = "stopping";
      this.closeAll("the pool failed to start");
      await this.provisioner.stop({ purge: this.config.purgeOnStop }).catch((stopErr: unknown) => {
        this.logger.warn({ err: stopErr }, "stopping the provisioner after a failed start failed");
      });
      this.state = "stopped";
      throw err;
    }
    this.startWaiter = undefined;
    clearTimeout(timer);
    this.state = "running";
    this.tickTimer = setInterval(() => this.tick(), this.config.tickMs);
    this.tickTimer.unref();
    this.healthTimer = setInterval(() => this.checkAllHealth(), this.config.healthIntervalMs);
    this.healthTimer.unref();
    this.logger.info({ provisioner: this.provisioner.kind, containers: this.readyCount(), slots: this.freeCount }, "slot pool started");
    this.scheduleScale();
  }

  /** Stops handing out slots, fails waiters, ends every lease and stops the provisioner. */
  async stop(options: { purge?: boolean } = {}): Promise<void> {
    if (this.state === "stopped" || this.state === "stopping") return;
    const wasStarting = this.state === "starting";
    this.state = "stopping";
    clearInterval(this.tickTimer);
    clearInterval(this.healthTimer);
    clearTimeout(this.scaleRetryTimer);
    if (wasStarting) this.startWaiter?.reject(new PoolNotRunningError("the pool was stopped while starting"));
    this.closeAll("the pool was stopped");
    await this.scaleInFlight?.catch(() => undefined);
    try {
      await this.provisioner.stop({ purge: options.purge ?? this.config.purgeOnStop });
    } finally {
      this.state = "stopped";
    }
  }

  private closeAll(reason: string): void {
    this.failWaiters(new PoolNotRunningError(`${reason} while waiting for a slot`));
    for (const lease of [...this.leases]) {
      lease.end = { kind: "lost", allocationId: lease.container.id, reason };
    }
    this.leases.clear();
    for (const c of this.containers) void c.client.close();
  }

  // ---------------------------------------------------------------- acquire / release

  acquire(options: AcquireOptions): Promise<Slot> {
    if (!options || typeof options.trajectoryId !== "string" || options.trajectoryId.length === 0) {
      return Promise.reject(new SlotPoolError("acquire() needs a non-empty trajectoryId"));
    }
    if (this.state !== "running") {
      return Promise.reject(new PoolNotRunningError(`cannot acquire a slot: the pool is ${this.state === "new" ? "not started (call start() first)" : this.state}`));
    }
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    const startedAt = performance.now();
    // FIFO: a waiter ahead of this call gets any free slot first.
    if (this.waiting > 0) this.serveWaiters();
    const record = this.waiting > 0 ? undefined : this.takeFreeSlot();
    if (record) {
      // Fast path: a free slot and nobody waiting.
      const lease = this.lease(record, options.trajectoryId, startedAt);
      this.scheduleScale();
      return Promise.resolve(lease);
    }
    const timeoutMs = options.timeoutMs ?? this.config.acquireTimeoutMs;
    return new Promise<Slot>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = () => {
        if (waiter.done) return;
        this.dropWaiter(waiter);
        reject(signal!.reason);
      };
      const waiter: Waiter = {
        trajectoryId: options.trajectoryId,
        startedAt,
        resolve,
        reject,
        done: false,
        cleanup: () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
        },
      };
      timer = setTimeout(() => {
        if (waiter.done) return;
        this.dropWaiter(waiter);
        const s = this.stats();
        reject(
          new SlotAcquireTimeoutError(timeoutMs, {
            slots: s.slots.total,
            held: s.slots.held,
            waiting: this.waiting + 1,
            containers: s.containers.total,
            maxContainers: this.config.maxContainers,
          }, this.problemHint(), refusedScale(this.scaleHistory, this.provisioner.kind)),
        );
      }, timeoutMs);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(waiter);
      this.waiting++;
      this.scheduleScale();
    });
  }

  /** Returns a slot; resets its workspace first unless `reset: false`. Never throws for a lost slot. */
  async release(slot: Slot, options: ReleaseOptions = {}): Promise<void> {
    if (!(slot instanceof SlotLease) || !this.leases.has(slot)) {
      if (slot instanceof SlotLease && slot.end) {
        if (slot.end.kind === "lost" && this.lostHeldLeases.delete(slot)) this.lostHeld--;
        return; // already released, reclaimed or lost: releasing again is harmless
      }
      throw new SlotPoolError(`release(): ${slot?.key ?? String(slot)} is not a slot held from this pool`);
    }
    const reset = options.reset ?? this.config.resetOnRelease;
    this.leases.delete(slot);
    slot.end = { kind: "released" };
    this.emit("slot-released", { key: slot.key, trajectoryId: slot.trajectoryId, reset });
    await this.returnSlot(slot.record, reset, slot.trajectoryId);
  }

  private readonly lostHeldLeases = new Set<SlotLease>();

  private lease(record: SlotRecord, trajectoryId: string, startedAt: number): SlotLease {
    record.state = "held";
    record.container.busy++;
    this.busyCount++;
    const now = performance.now();
    const lease = new SlotLease(record, trajectoryId, this, now);
    this.leases.add(lease);
    const waitedMs = now - startedAt;
    this.recordLatency(waitedMs);
    this.emit("slot-acquired", { key: record.key, trajectoryId, waitedMs });
    return lease;
  }

  /** The free slot of the lowest-index ready container (packing), or undefined. */
  private takeFreeSlot(): SlotRecord | undefined {
    if (this.freeCount === 0) return undefined;
    for (const c of this.containers) {
      if (c.state === "ready" && c.free.length > 0) {
        const record = c.free.pop()!;
        this.freeCount--;
        return record;
      }
    }
    return undefined;
  }

  private async returnSlot(record: SlotRecord, reset: boolean, trajectoryId: string): Promise<void> {
    const container = record.container;
    if (slotGone(record)) return;
    if (reset) {
      record.state = "resetting";
      let failure: string | undefined;
      for (let attempt = 0; attempt < 2; attempt++) {
        try {
          const res = await container.client.reset(record.slotId);
          if (res.success) {
            failure = undefined;
            break;
          }
          failure = res.error || res.output || "reset reported failure";
        } catch (err) {
          failure = err instanceof Error ? err.message : String(err);
          if (isConnectionFailure(err)) await this.confirmContainerLoss(record, err);
        }
        if (slotGone(record)) return;
      }
      if (slotGone(record)) return;
      if (failure !== undefined) {
        // A workspace we could not clean must not reach another trajectory.
        this.logger.warn({ slot: record.key, trajectoryId, error: failure }, "slot reset failed; taking the slot out of service");
        record.state = "lost";
        record.lostReason = `reset failed: ${failure}`;
        container.busy--;
        this.busyCount--;
        this.scheduleScale();
        return;
      }
    }
    record.state = "free";
    container.busy--;
    this.busyCount--;
    this.insertFree(container, record, reset);
    if (container.state === "ready") this.serveWaiters();
    else this.scheduleScale(); // a draining container may have emptied
  }

  private insertFree(container: ContainerRecord, record: SlotRecord, justReset = false): void {
    const free = container.free;
    if (justReset && free.length > 0) {
      // Bottom of the stack: handed out after every other free slot of this container.
      free.unshift(record);
      this.freeCount++;
      return;
    }
    // Keep the lowest slot number on top so a container's slots are reused in order.
    const n = Number(record.slotId.slice(5));
    let i = free.length;
    while (i > 0 && Number(free[i - 1]!.slotId.slice(5)) < n) i--;
    free.splice(i, 0, record);
    this.freeCount++;
  }

  private serveWaiters(): void {
    while (this.waiting > 0) {
      const waiter = this.nextWaiter();
      if (!waiter) break;
      const record = this.takeFreeSlot();
      if (!record) break;
      this.shiftWaiter();
      waiter.done = true;
      waiter.cleanup();
      this.waiting--;
      waiter.resolve(this.lease(record, waiter.trajectoryId, waiter.startedAt));
    }
    this.compactWaiters();
  }

  private nextWaiter(): Waiter | undefined {
    while (this.waiterHead < this.waiters.length) {
      const w = this.waiters[this.waiterHead]!;
      if (!w.done) return w;
      this.waiterHead++;
    }
    return undefined;
  }

  private shiftWaiter(): void {
    this.waiterHead++;
  }

  private compactWaiters(): void {
    if (this.waiterHead > 1024 && this.waiterHead * 2 > this.waiters.length) {
      this.waiters.splice(0, this.waiterHead);
      this.waiterHead = 0;
    } else if (this.waiterHead === this.waiters.length) {
      this.waiters.length = 0;
      this.waiterHead = 0;
    }
  }

  private dropWaiter(waiter: Waiter): void {
    waiter.done = true;
    waiter.cleanup();
    this.waiting--;
    this.compactWaiters();
    this.scheduleScale();
  }

  private failWaiters(error: Error): void {
    for (let i = this.waiterHead; i < this.waiters.length; i++) {
      const w = this.waiters[i]!;
      if (w.done) continue;
      w.done = true;
      w.cleanup();
      w.reject(error);
    }
    this.waiters.length = 0;
    this.waiterHead = 0;
    this.waiting = 0;
  }

  // ---------------------------------------------------------------- provisioner events

  private onContainerStarting(id: string, index: number): void {
    if (this.byId.has(id)) return;
    this.starting.set(id, index);
    this.emit("container-starting", { id, index });
  }

  private onContainerUp(info: ContainerInfo): void {
    this.starting.delete(info.id);
    if (this.state === "stopping" || this.state === "stopped") return;
    if (this.byId.has(info.id) || this.retired.has(info.id)) return;
    const maxConcurrency = this.config.maxConcurrencyPerContainer ?? Math.max(info.slots, this.config.slotsPerContainer) * 4;
    let record: ContainerRecord | undefined;
    const client = this.createClient(info, {
      maxConcurrency,
      onConnectionFailure: (error) => {
        if (record) void this.suspectContainer(record, error);
      },
    });
    record = new ContainerRecord(info, client);
    this.byId.set(info.id, record);
    this.insertContainer(record);
    void this.admitContainer(record);
  }

  private insertContainer(record: ContainerRecord): void {
    let lo = 0;
    let hi = this.containers.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.containers[mid]!.index <= record.index) lo = mid + 1;
      else hi = mid;
    }
    this.containers.splice(lo, 0, record);
  }

  /** Health-checks a new container until it answers, then opens its slots. */
  private async admitContainer(record: ContainerRecord): Promise<void> {
    const deadline = performance.now() + this.config.containerHealthTimeoutMs;
    let delay = 100;
    let lastError: unknown;
    while (record.state === "checking") {
      try {
        const health = await record.client.health({ timeoutMs: 5_000 });
        if (record.state !== "checking") return;
        const slots = health.slots;
        if (slots !== record.info.slots) {
          this.logger.warn({ container: record.info.id, expected: record.info.slots, reported: slots }, "container reports a different slot count; using its own");
        }
        if (slots === 0) throw new Error("the sandbox server reports 0 slots");
        record.initSlots(slots);
        record.state = record.index >= this.drainFrom || record.retiring ? "draining" : "ready";
        this.freeCount += slots;
        this.logger.info({ container: record.info.id, index: record.index, url: record.info.url, slots }, "container ready");
        this.emit("container-ready", record.info);
        this.serveWaiters();
        if (this.startWaiter && this.readyCount() >= this.config.minContainers) this.startWaiter.resolve();
        this.scheduleScale();
        return;
      } catch (err) {
        lastError = err;
      }
      if (performance.now() > deadline) break;
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 2_000);
    }
    if (record.state !== "checking") return;
    const reason = `its sandbox server at ${record.info.url} did not answer /health within ${this.config.containerHealthTimeoutMs} ms (${errorMessage(lastError)})`;
    this.giveUp(record, reason);
  }

  private onContainerGone(gone: ContainerGone): void {
    this.starting.delete(gone.id);
    this.quarantine.delete(gone.id);
    const record = this.byId.get(gone.id);
    if (!record) return;
    if (gone.expected && record.busy === 0) {
      this.removeContainer(record, gone.reason);
      return;
    }
    this.markLost(record, gone.reason);
  }

  /** The provisioner's last problem, if recent: why containers may not be coming. */
  private problemHint(): string | undefined {
    if (!this.lastProblem || performance.now() - this.lastProblemAt > 10 * 60_000) return undefined;
    return `The ${this.provisioner.kind} provisioner reported ${Math.round((performance.now() - this.lastProblemAt) / 1000)} s ago: ${this.lastProblem.message}`;
  }

  private onProblem(error: ProvisionerError): void {
    this.lastProblem = error;
    this.lastProblemAt = performance.now();
    this.logger.warn({ kind: error.kind, err: error.message }, "provisioner problem");
    this.emit("problem", error);
    // During start-up a problem means start() fails now instead of after the timeout.
    if (this.state === "starting" && this.startWaiter) this.startWaiter.reject(error);
  }

  // ---------------------------------------------------------------- loss

  /** Called when a call to the container failed to connect: check now, mark lost if it is gone. */
  async confirmContainerLoss(record: SlotRecord, _error: unknown): Promise<void> {
    await this.suspectContainer(record.container, _error);
  }

  private readonly suspicions = new Map<ContainerRecord, Promise<void>>();

  private suspectContainer(container: ContainerRecord, error: unknown): Promise<void> {
    if (container.state === "lost") return Promise.resolve();
    let pending = this.suspicions.get(container);
    if (pending) return pending;
    pending = (async () => {
      // Give the provisioner a moment to report the exit with its reason (exit code, task events).
      await new Promise((r) => setTimeout(r, 200));
      if (container.state === "lost" || container.state === "checking") return;
      try {
        await container.client.health({ timeoutMs: 2_000 });
      } catch (err) {
        if (!isLive(container)) return;
        if (isConnectionFailure(err)) {
          const reason = `its sandbox server at ${container.info.url} stopped accepting connections (${errorMessage(error)})`;
          this.giveUp(container, reason);
        }
      }
    })().finally(() => this.suspicions.delete(container));
    this.suspicions.set(container, pending);
    return pending;
  }

  private markLost(container: ContainerRecord, reason: string): void {
    if (container.state === "lost") return;
    const wasChecking = container.state === "checking";
    container.state = "lost";
    container.lostReason = reason;
    this.containersLost++;
    this.freeCount -= container.free.length;
    container.free.length = 0;
    let heldLost = 0;
    for (const record of container.slots) {
      if (record.state === "held" || record.state === "resetting") {
        this.busyCount--;
        container.busy--;
      }
      record.state = "lost";
      record.lostReason = reason;
    }
    for (const lease of [...this.leases]) {
      if (lease.record.container !== container) continue;
      this.leases.delete(lease);
      lease.end = { kind: "lost", allocationId: container.info.id, reason };
      this.lostHeldLeases.add(lease);
      this.lostHeld++;
      heldLost++;
      this.lostCounter.inc();
      this.emit("slot-lost", { key: lease.key, trajectoryId: lease.trajectoryId, allocationId: container.info.id, reason });
    }
    this.detach(container);
    const log = wasChecking ? this.logger.warn.bind(this.logger) : this.logger.error.bind(this.logger);
    log({ container: container.info.id, index: container.index, heldSlotsLost: heldLost, reason }, "container lost");
    this.emit("container-lost", { container: container.info, reason });
    this.scheduleScale();
  }

  private removeContainer(container: ContainerRecord, reason: string): void {
    this.freeCount -= container.free.length;
    container.free.length = 0;
    container.state = "lost";
    this.detach(container);
    this.logger.info({ container: container.info.id, index: container.index, reason }, "container removed");
    this.emit("container-removed", { container: container.info, reason });
    this.scheduleScale();
  }

  private detach(container: ContainerRecord): void {
    const i = this.containers.indexOf(container);
    if (i >= 0) this.containers.splice(i, 1);
    this.byId.delete(container.info.id);
    // A container the pool gave up on never comes back under the same id.
    this.retired.add(container.info.id);
    void container.client.close();
  }

  // ---------------------------------------------------------------- health

  private checkAllHealth(): void {
    if (this.state !== "running") return;
    for (const c of this.containers) if (c.live) void this.checkHealth(c);
    for (const q of this.quarantine.values()) void this.probeQuarantined(q);
  }

  /**
   * The pool stops using a container that failed its checks. The provisioner replaces it when
   * it can (local: kill and restart); otherwise (Nomad keeps the allocation running) it is
   * quarantined and probed, and re-admitted with every slot reset once it answers again.
   */
  private giveUp(container: ContainerRecord, reason: string): void {
    this.markLost(container, reason);
    if (this.provisioner.replaceContainer) {
      // Nomad stops the allocation and places a new one; if it refuses, probe it instead.
      void this.provisioner.replaceContainer(container.info.id, reason).catch((err: unknown) => {
        this.logger.warn({ container: container.info.id, err: errorMessage(err) }, "could not replace a container that failed its checks; quarantined");
        this.quarantine.set(container.info.id, { info: container.info, probing: false, healthyChecks: 0 });
      });
    } else {
      this.quarantine.set(container.info.id, { info: container.info, probing: false, healthyChecks: 0 });
    }
  }

  private async probeQuarantined(q: { info: ContainerInfo; probing: boolean; healthyChecks: number }): Promise<void> {
    if (q.probing) return;
    q.probing = true;
    const client = this.createClient(q.info, { maxConcurrency: 4, onConnectionFailure: () => undefined });
    try {
      const health = await client.health({ timeoutMs: Math.min(5_000, this.config.healthIntervalMs) });
      // Two good answers in a row, then wipe what the lost trajectories left behind.
      if (++q.healthyChecks < 2) return;
      for (let i = 0; i < health.slots; i++) {
        const res = await client.reset(`slot_${i}`);
        if (!res.success) throw new Error(`reset of slot_${i} failed: ${res.error || res.output}`);
      }
      if (this.quarantine.get(q.info.id) !== q || this.state !== "running") return;
      this.quarantine.delete(q.info.id);
      this.retired.delete(q.info.id);
      this.logger.info({ container: q.info.id, index: q.info.index }, "container answers again; its slots were reset and it rejoins the pool");
      this.onContainerUp(q.info);
    } catch {
      q.healthyChecks = 0;
    } finally {
      q.probing = false;
      await client.close();
    }
  }

  private async checkHealth(container: ContainerRecord): Promise<void> {
    if (container.healthCheckRunning) return;
    container.healthCheckRunning = true;
    try {
      await container.client.health({ timeoutMs: Math.min(5_000, this.config.healthIntervalMs) });
      container.healthFailures = 0;
    } catch (err) {
      if (!isLive(container)) return;
      container.healthFailures++;
      this.logger.warn({ container: container.info.id, failures: container.healthFailures, err: errorMessage(err) }, "container health check failed");
      if (container.healthFailures >= this.config.healthFailuresBeforeLost) {
        const reason = `its sandbox server at ${container.info.url} failed ${container.healthFailures} health checks in a row (last: ${errorMessage(err)})`;
        this.giveUp(container, reason);
      }
    } finally {
      container.healthCheckRunning = false;
    }
  }

  // ---------------------------------------------------------------- scaling

  /** Coalesces scale decisions of one burst (many acquires in one tick) into one evaluation. */
  private scheduleScale(): void {
    if (this.scaleScheduled || this.state !== "running") return;
    this.scaleScheduled = true;
    setImmediate(() => {
      this.scaleScheduled = false;
      this.evaluateScale();
    });
  }

  /** Containers the current demand needs, within [min, max]. */
  desiredContainers(): number {
    const demand = this.busyCount + this.waiting + this.config.headroomSlots;
    const n = Math.ceil(demand / this.config.slotsPerContainer);
    return Math.min(this.config.maxContainers, Math.max(this.config.minContainers, n));
  }

  private evaluateScale(): void {
    if (this.state !== "running") return;
    if (this.scaleInFlight) {
      this.scaleAgain = true;
      return;
    }
    const desired = this.desiredContainers();
    const now = performance.now();
    if (now < this.scaleBlockedUntil) return;

    if (desired > this.drainFrom || desired >= this.target) this.setDrainFrom(desired >= this.target ? Number.POSITIVE_INFINITY : desired);

    if (desired > this.target) {
      this.surplusSince = undefined;
      // Admission control: never more than maxStartingContainers on their way up at once.
      const up = this.containers.length;
      const allowed = Math.min(desired, up + this.config.maxStartingContainers);
      if (allowed > this.target) {
        this.requestTarget(allowed, `demand: ${this.busyCount} held + ${this.waiting} waiting + ${this.config.headroomSlots} headroom slots`);
      }
      return;
    }
    if (desired === this.target) {
      this.surplusSince = undefined;
      return;
    }
    // Surplus: wait idleTimeoutMs, then drain the highest indexes; lower the count below the busy ones only.
    this.surplusSince ??= now;
    if (now - this.surplusSince < this.config.idleTimeoutMs) return;
    this.setDrainFrom(desired);
    let lowest = desired;
    for (const c of this.containers) {
      if (c.index >= desired && (c.busy > 0 || c.state === "ready")) lowest = Math.max(lowest, c.index + 1);
    }
    if (lowest < this.target) this.requestTarget(lowest, `idle for ${Math.round(now - this.surplusSince)} ms: ${this.busyCount} held, ${this.waiting} waiting`);
  }

  private setDrainFrom(value: number): void {
    if (value === this.drainFrom) return;
    this.drainFrom = value;
    let undrained = false;
    for (const c of this.containers) {
      if (c.state === "ready" && c.index >= value) {
        c.state = "draining";
        this.logger.info({ container: c.info.id, index: c.index }, "draining container");
        this.emit("container-draining", c.info);
      } else if (c.state === "draining" && c.index < value && !c.retiring) {
        c.state = "ready";
        undrained = true;
        this.emit("container-undrained", c.info);
      }
    }
    if (undrained) this.serveWaiters();
  }

  private requestTarget(count: number, reason: string): void {
    const from = this.target;
    this.target = count;
    // Containers above a lowered count are being stopped: they must not be un-drained and
    // lent out again if demand comes back before they are gone.
    const retiring: ContainerRecord[] = [];
    if (count < from) {
      for (const c of this.containers) {
        if (c.index >= count && !c.retiring) {
          c.retiring = true;
          retiring.push(c);
        }
      }
    }
    const at = Date.now();
    this.logger.info({ from, to: count, reason }, "scaling containers");
    this.scaleInFlight = this.provisioner
      .setTargetCount(count, reason)
      .then(
        () => {
          this.confirmedTarget = count;
          this.scaleFailures = 0;
          this.scaleEvents++;
          this.scaleCounter.inc({ result: "ok" });
          this.recordScale({ at, from, to: count, reason, ok: true });
        },
        (err: unknown) => {
          // The count did not change: retry with backoff on the next evaluation.
          this.target = this.confirmedTarget;
          for (const c of retiring) c.retiring = false;
          this.scaleFailures++;
          this.scaleCounter.inc({ result: "error" });
          this.recordScale({ at, from, to: count, reason, ok: false, error: errorMessage(err) });
          this.logger.warn({ from, to: count, err: errorMessage(err), failures: this.scaleFailures }, "scale call failed; retrying");
          const delay = Math.min(30_000, 250 * 2 ** Math.min(this.scaleFailures, 7));
          this.scaleBlockedUntil = performance.now() + delay;
          clearTimeout(this.scaleRetryTimer);
          this.scaleRetryTimer = setTimeout(() => this.scheduleScale(), delay);
          this.scaleRetryTimer.unref();
        },
      )
      .finally(() => {
        this.scaleInFlight = undefined;
        if (this.scaleAgain) {
          this.scaleAgain = false;
          this.scheduleScale();
        }
      });
  }

  private recordScale(event: ScaleEvent): void {
    this.scaleHistory.push(event);
    if (this.scaleHistory.length > 100) this.scaleHistory.shift();
    this.emit("scale", event);
  }

  /** The last scale calls (up to 100), oldest first. */
  scaleLog(): readonly ScaleEvent[] {
    return this.scaleHistory;
  }

  // ---------------------------------------------------------------- periodic work

  private tick(): void {
    if (this.state !== "running") return;
    this.evaluateScale();
    this.reclaimExpiredLeases();
  }

  private reclaimExpiredLeases(): void {
    const limit = this.config.leaseTimeoutMs;
    if (limit === 0 || this.leases.size === 0) return;
    const now = performance.now();
    for (const lease of [...this.leases]) {
      if (lease.inFlight > 0) continue;
      const idleMs = now - lease.lastUsed;
      if (idleMs < limit) continue;
      this.leases.delete(lease);
      const reason = `trajectory ${lease.trajectoryId} neither used nor released it for ${Math.round(idleMs)} ms (lease timeout ${limit} ms), so the pool reset and reclaimed it`;
      lease.end = { kind: "lost", allocationId: lease.container.id, reason };
      this.reclaimCounter.inc();
      this.logger.warn({ slot: lease.key, trajectoryId: lease.trajectoryId, idleMs: Math.round(idleMs) }, "reclaiming an abandoned slot: its lease expired");
      this.emit("slot-reclaimed", { key: lease.key, trajectoryId: lease.trajectoryId, idleMs });
      void this.returnSlot(lease.record, true, lease.trajectoryId);
    }
  }

  // ---------------------------------------------------------------- stats

  private recordLatency(ms: number): void {
    this.latencies[this.latencyCount % LATENCY_WINDOW] = ms;
    this.latencyCount++;
    this.acquireHistogram.observe(ms / 1000);
  }

  private readyCount(): number {
    let n = 0;
    for (const c of this.containers) if (c.live) n++;
    return n;
  }

  stats(): PoolStats {
    let checking = 0;
    let ready = 0;
    let draining = 0;
    let total = 0;
    for (const c of this.containers) {
      if (c.state === "checking") checking++;
      else if (c.state === "ready") ready++;
      else if (c.state === "draining") draining++;
      if (c.live) for (const s of c.slots) if (s.state !== "lost") total++;
    }
    const n = Math.min(this.latencyCount, LATENCY_WINDOW);
    let p50 = 0;
    let p99 = 0;
    if (n > 0) {
      const sorted = Array.from(this.latencies.subarray(0, n)).sort((a, b) => a - b);
      p50 = sorted[Math.min(n - 1, Math.floor(n * 0.5))]!;
      p99 = sorted[Math.min(n - 1, Math.floor(n * 0.99))]!;
    }
    const starting = this.starting.size + checking;
    return {
      containers: { starting, ready, draining, lost: this.containersLost, total: starting + ready + draining },
      slots: { total, free: this.freeCount, held: this.busyCount, lost: this.lostHeld },
      waiting: this.waiting,
      targetContainers: this.target,
      acquireLatencyMs: { p50, p99, count: this.latencyCount },
      scaleEvents: this.scaleEvents,
    };
  }

  /** The containers the pool knows, lowest index first (for status pages and tests). */
  containerList(): Array<ContainerInfo & { state: string; busySlots: number; freeSlots: number }> {
    return this.containers.map((c) => ({ ...c.info, state: c.state, busySlots: c.busy, freeSlots: c.free.length }));
  }

  private async startTimeoutError(): Promise<Error> {
    let detail = "";
    try {
      detail = (await this.provisioner.describe?.()) ?? "";
    } catch (err) {
      detail = `(could not describe the containers: ${errorMessage(err)})`;
    }
    const ready = this.readyCount();
    const last = this.lastProblem ? ` Last problem: ${this.lastProblem.message}.` : "";
    return new ProvisionerError(
      `the ${this.provisioner.kind} provisioner brought up ${ready} of ${this.config.minContainers} healthy containers within ${this.config.startTimeoutMs} ms.${last}` +
        (detail ? `\n${detail}` : "") +
        `\nCheck the containers' logs, lower minContainers, or raise startTimeoutMs.`,
      "start-timeout",
    );
  }
}

/** State checks after an await (TypeScript keeps the narrowing from before it). */
function slotGone(record: SlotRecord): boolean {
  return record.state === "lost" || record.container.state === "lost";
}

function isLive(container: ContainerRecord): boolean {
  return container.live;
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
