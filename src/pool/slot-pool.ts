// Longer than 500 lines on purpose: what is left is the slot bookkeeping (acquire, release,
// reset, loss) over one set of counters; waiters, placement, preparation, autoscaler, health and statistics are apart.
import { EventEmitter } from "node:events";
import type { Logger } from "pino";
import { silentLogger } from "../observability/logger.js";
import { MetricsRegistry } from "../observability/metrics.js";
import { Autoscaler, type ScaleEvent } from "./autoscaler.js";
import { poolConfigWith, poolNetwork, type SlotPoolConfig, type SlotPoolConfigInput } from "./config.js";
import { ImageReferenceError, PoolNotRunningError, refusedScale, SlotAcquireTimeoutError, PoolError } from "./errors.js";
import { ProvisionerError, type ContainerGone, type Provisioner, type ProvisionerEvents } from "./provisioner.js";
import { HealthMonitor } from "./health-monitor.js";
import { ContainerAdmission, insertByIndex } from "./container-admission.js";
import { ForkLeases } from "./fork-leases.js";
import { NodeAvoidance } from "./node-avoidance.js";
import { PoolStatistics } from "./pool-statistics.js";
import { ContainerRecord, type SlotRecord } from "./records.js";
import { sandboxClientFor, type SandboxClientLike } from "./sandbox-client.js";
import { SlotLease, type LeaseHost } from "./slot-lease.js";
import type { AcquireOptions, ContainerInfo, ForkableSlot, ForkOptions, PoolStats, ReleaseOptions, LeasedSlot, SlotPoolLike } from "./types.js";
import { WaiterQueue, type Waiter } from "./waiter-queue.js";
import { gone, resetReleasedSlot } from "./release-reset.js";
import { TemplateAffinity, type TemplateSpec } from "./template-affinity.js";
import { ImageAffinity } from "./image-affinity.js";
import { plainWish, SlotPlacement, type PlacementWish } from "./slot-placement.js";
import { WorkspacePreparation } from "./workspace-preparation.js";
import type { ResetResponse } from "../protocol/sandbox.js";
import { askContainerHealth, startTimeoutError, type ContainerHealth } from "./pool-reports.js";

export type { ScaleEvent };

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
  "slot-lost": [{ key: string; trajectoryId: string; containerId: string; reason: string }];
  "slot-reclaimed": [{ key: string; trajectoryId: string; idleMs: number }];
  scale: [ScaleEvent];
  problem: [ProvisionerError];
  /** The pool can hand out no more slots (its Nomad job is gone or was taken over); stop() it. */
  failed: [ProvisionerError];
}

export interface SlotPoolOptions extends SlotPoolConfigInput {
  provisioner: Provisioner;
  logger?: Logger;
  /** Registry for the pool's Prometheus metrics (default: a private one, see `metrics`). */
  metrics?: MetricsRegistry;
  /** Makes the HTTP client of a container (tests substitute an in-memory one). */
  createClient?: (info: ContainerInfo, hooks: { onConnectionFailure: (error: Error) => void; maxConcurrency: number }) => SandboxClientLike;
  /**
   * Settings parsed already at the edge (createToolBackend passes its `pool` section): used as
   * they are, and the fields above are not given. Without it the fields are validated here.
   */
  parsedConfig?: SlotPoolConfig;
  /**
   * Calls that do not set `allow_network` get this (default: the provisioner's, else false:
   * loopback only, as the executor's `allowNetwork`). Given once: a provisioner that has a
   * setting (LocalProvisioner) and a different one here are refused.
   */
  allowNetwork?: boolean;
}

type PoolState = "new" | "starting" | "running" | "failed" | "stopping" | "stopped";

/** How long a node that lost a container is served last. */
const SUSPECT_NODE_MS = 30_000;

/** Provisioner problems after which no container can come: the pool fails (see `fail`). */
const FATAL_PROBLEMS = new Set(["job-gone", "job-taken"]);

/**
 * Turns containers into slots and hands them to trajectories.
 *
 * - acquire: free slots of the lowest-index ready container first; otherwise FIFO waiters.
 *   Within a container, a slot just reset goes last: its sandbox namespace is being rebuilt
 *   in the background, the container's other free slots are warm (first call ≈ 2 ms, not a
 *   namespace start-up). Packing across containers, and so scale-down, is unchanged.
 * - scaling: the Autoscaler (autoscaler.ts) sets the container count from demand.
 * - loss: a container reported gone (provisioner) or failing /health (HealthMonitor,
 *   health-monitor.ts) drops its free slots and marks held ones lost; their leases raise
 *   SlotLostError from then on.
 * - leases: a held slot unused for `leaseTimeoutMs` is reset and returned.
 * - waiters (waiter-queue.ts) and statistics (pool-statistics.ts) are parts of their own.
 */
export class SlotPool extends EventEmitter<SlotPoolEvents> implements SlotPoolLike, LeaseHost {
  readonly config: SlotPoolConfig;
  /** The network setting of calls that do not name one (see `SlotPoolOptions.allowNetwork`). */
  readonly allowNetwork: boolean;
  readonly metrics: MetricsRegistry;
  /** Which containers hold which workspace templates (affinity, one build per container). */
  readonly templates = new TemplateAffinity();
  /** Which containers hold which task images (image routing), and what the images cost. */
  readonly images = new ImageAffinity();
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

  private readonly waiters = new WaiterQueue();
  private readonly scaler: Autoscaler;
  private readonly health: HealthMonitor;
  private readonly statistics: PoolStatistics;
  private readonly forks: ForkLeases;
  private readonly admission: ContainerAdmission;
  private readonly placement: SlotPlacement;
  private readonly preparation: WorkspacePreparation;
  /** Nodes that lost the pool's containers, kept out of new placements for a while. */
  private readonly avoidance: NodeAvoidance;

  private freeCount = 0;
  private busyCount = 0;
  /** Held slots lost with their container whose trajectories have not released them yet. */
  private lostHeld = 0;
  private containersLost = 0;

  private tickTimer: NodeJS.Timeout | undefined;
  private healthTimer: NodeJS.Timeout | undefined;
  private startWaiter: { resolve: () => void; reject: (err: Error) => void } | undefined;
  private lastProblem: ProvisionerError | undefined;
  /** Why the pool failed (state "failed"): every acquire rejects with it. */
  private failure: ProvisionerError | undefined;
  private lastProblemAt = 0;

  constructor(options: SlotPoolOptions) {
    super();
    const { provisioner, logger, metrics, createClient, parsedConfig, allowNetwork, ...config } = options;
    if (!provisioner) throw new PoolError("SlotPool needs a provisioner (LocalProvisioner or NomadProvisioner)");
    this.config = parsedConfig ? poolConfigWith(provisioner, parsedConfig, true) : poolConfigWith(provisioner, config);
    this.allowNetwork = poolNetwork(provisioner, allowNetwork);
    this.provisioner = provisioner;
    this.logger = logger ?? silentLogger();
    this.on("container-lost", ({ container }) => {
      this.templates.forget(container.id);
      this.images.forget(container.id);
    });
    this.placement = new SlotPlacement({ containers: () => this.containers, templates: this.templates, images: this.images }, SUSPECT_NODE_MS);
    this.preparation = new WorkspacePreparation(this.templates, this.images, (id) => this.unpinImages(id));
    this.createClient = createClient ?? sandboxClientFor;
    this.metrics = metrics ?? new MetricsRegistry();
    const isRunning = () => this.state === "running";
    const containers = () => this.containers;
    this.scaler = new Autoscaler({
      config: this.config,
      provisioner,
      logger: this.logger,
      isRunning,
      demand: () => ({ held: this.busyCount, waiting: this.waiters.size }),
      containers,
      containerDraining: (c) => this.emit("container-draining", c.info),
      containerUndrained: (c) => this.emit("container-undrained", c.info),
      slotsReopened: () => this.serveWaiters(),
      scaled: (event) => {
        this.statistics.scaleCall(event.ok);
        this.emit("scale", event);
      },
    });
    this.health = new HealthMonitor({
      config: this.config,
      provisioner,
      logger: this.logger,
      isRunning,
      containers,
      createClient: (info) => this.createClient(info, { maxConcurrency: 4, onConnectionFailure: () => undefined }),
      markLost: (c, reason) => this.markLost(c, reason),
      observed: (c, health) => this.images.observe(c.info.id, health),
      rejoin: (info) => {
        this.retired.delete(info.id);
        this.onContainerUp(info);
      },
    });
    this.avoidance = new NodeAvoidance(
      { provisioner, logger: this.logger, liveNodes: () => this.containers.filter((c) => c.live && c.info.node !== undefined).map((c) => c.info.node!) },
      SUSPECT_NODE_MS,
    );
    this.forks = new ForkLeases({
      config: this.config,
      state: () => this.state,
      freeTaken: (n) => {
        this.freeCount -= n;
      },
      lease: (record, trajectoryId, startedAt) => this.lease(record, trajectoryId, startedAt, false),
      release: (lease, options) => this.release(lease, options),
    });
    this.admission = new ContainerAdmission({
      config: this.config,
      health: this.health,
      accepting: () => this.state !== "stopping" && this.state !== "stopped",
      known: (id) => this.byId.has(id) || this.retired.has(id),
      createClient: (info, hooks) => this.createClient(info, hooks),
      register: (record) => {
        this.byId.set(record.info.id, record);
        insertByIndex(this.containers, record);
      },
      opened: (record, slots, generations) => this.openContainer(record, slots, generations),
    });
    this.statistics = new PoolStatistics(this.metrics, () => ({
      containers: this.containers,
      placed: this.starting.size,
      containersLost: this.containersLost,
      free: this.freeCount,
      held: this.busyCount,
      lostHeld: this.lostHeld,
      waiting: this.waiters.size,
      target: this.scaler.target,
      scaleEvents: this.scaler.events,
    }));
  }

  // ---------------------------------------------------------------- lifecycle

  /** Starts the provisioner and waits for `minContainers` healthy containers. */
  async start(): Promise<void> {
    if (this.state !== "new") throw new PoolError(`SlotPool.start() called twice (pool is ${this.state})`);
    this.state = "starting";
    const events: ProvisionerEvents = {
      containerStarting: (id, index) => this.onContainerStarting(id, index),
      containerUp: (info) => this.onContainerUp(info),
      containerGone: (gone) => this.onContainerGone(gone),
      problem: (error) => this.onProblem(error),
    };
    const min = this.config.minContainers;
    this.scaler.begin(min);
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
    this.healthTimer = setInterval(() => this.health.checkAll(), this.config.healthIntervalMs);
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
    this.avoidance.stop();
    if (wasStarting) this.startWaiter?.reject(new PoolNotRunningError("the pool was stopped while starting"));
    this.closeAll("the pool was stopped");
    await this.scaler.stop();
    try {
      await this.provisioner.stop({ purge: options.purge ?? this.config.purgeOnStop });
    } finally {
      this.state = "stopped";
    }
  }

  private closeAll(reason: string): void {
    this.waiters.failAll(new PoolNotRunningError(`${reason} while waiting for a slot`));
    for (const lease of [...this.leases]) {
      lease.end = { kind: "lost", containerId: lease.container.id, reason };
    }
    this.leases.clear();
    for (const c of this.containers) {
      // A container still being admitted stops being checked now: its admission would poll on
      // (up to containerHealthTimeoutMs) and then report it lost, keeping the process alive.
      if (c.state === "checking") c.state = "lost";
      void c.client.close();
    }
  }

  // ---------------------------------------------------------------- acquire / release

  /** A slot for one trajectory; SlotPool's leases can always fork (`ForkableSlot`). */
  acquire(options: AcquireOptions): Promise<ForkableSlot> {
    if (!options || typeof options.trajectoryId !== "string" || options.trajectoryId.length === 0) {
      return Promise.reject(new PoolError("acquire() needs a non-empty trajectoryId"));
    }
    if (this.failure) return Promise.reject(this.failure);
    if (this.state !== "running") {
      return Promise.reject(new PoolNotRunningError(`cannot acquire a slot: the pool is ${this.state === "new" ? "not started (call start() first)" : this.state}`));
    }
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (options.image !== undefined) {
      // A reference that cannot name an image is the caller's mistake: said now, before any slot.
      try {
        ImageAffinity.key(options.image);
      } catch (err) {
        return Promise.reject(err instanceof ImageReferenceError ? err : new PoolError(String(err)));
      }
    }
    const wish: PlacementWish = { template: options.template, image: options.image };
    const startedAt = performance.now();
    // FIFO: a waiter ahead of this call gets any free slot first.
    if (this.waiters.size > 0) this.serveWaiters();
    const record = this.waiters.size > 0 ? undefined : this.takeFreeSlot(wish);
    if (record) {
      // Fast path: a free slot and nobody waiting.
      const lease = this.lease(record, options.trajectoryId, startedAt, plainWish(wish));
      this.scheduleScale();
      return Promise.resolve(lease);
    }
    const timeoutMs = options.timeoutMs ?? this.config.acquireTimeoutMs;
    const waiting = this.waiters.wait({ trajectoryId: options.trajectoryId, wish, startedAt, timeoutMs, signal }, {
      gaveUp: (waiter) => this.dropWaiter(waiter),
      timeoutError: () => {
        const s = this.stats();
        const counts = { slots: s.slots.total, held: s.slots.held, waiting: this.waiters.size + 1, containers: s.containers.total, maxContainers: this.config.maxContainers };
        return new SlotAcquireTimeoutError(timeoutMs, counts, this.problemHint(), refusedScale(this.scaler.log(), this.provisioner.kind));
      },
    });
    this.scheduleScale();
    return waiting;
  }

  /** Returns a slot; resets its workspace first unless `reset: false`. Never throws for a lost slot. */
  async release(slot: LeasedSlot, options: ReleaseOptions = {}): Promise<void> {
    if (!(slot instanceof SlotLease) || !this.leases.has(slot)) {
      if (slot instanceof SlotLease && slot.end) {
        if (slot.end.kind === "lost" && this.lostHeldLeases.delete(slot)) this.lostHeld--;
        return; // already released, reclaimed or lost: releasing again is harmless
      }
      throw new PoolError(`release(): ${slot?.key ?? String(slot)} is not a slot held from this pool`);
    }
    const reset = options.reset ?? this.config.resetOnRelease;
    this.leases.delete(slot);
    slot.end = { kind: "released" };
    this.emit("slot-released", { key: slot.key, trajectoryId: slot.trajectoryId, reset });
    await this.returnSlot(slot.record, reset, slot.trajectoryId);
  }

  private readonly lostHeldLeases = new Set<SlotLease>();

  // ---------------------------------------------------------------- fork

  /** `lease.fork(n)`: see fork-leases.ts. */
  forkLease(parent: SlotLease, n: number, options: ForkOptions): Promise<SlotLease[]> {
    return this.forks.fork(parent, n, options);
  }

  /** `plain`: the trajectory wants the server's own system (placement.ts: a slot left in an image is reset back at its first call). */
  private lease(record: SlotRecord, trajectoryId: string, startedAt: number, plain: boolean): SlotLease {
    record.state = "held";
    record.container.busy++;
    this.busyCount++;
    const now = performance.now();
    const lease = new SlotLease(record, trajectoryId, this, now, plain);
    this.leases.add(lease);
    const waitedMs = now - startedAt;
    this.statistics.acquired(waitedMs);
    this.emit("slot-acquired", { key: record.key, trajectoryId, waitedMs });
    return lease;
  }

  /**
   * A workspace template or a task image on a slot (workspace-preparation.ts): a template is
   * built on its container unless held there (once per container, whatever the number of
   * trajectories asking); the slot is reset into it, or into the image.
   */
  async useTemplate(slot: LeasedSlot, spec: TemplateSpec, options: { signal?: AbortSignal } = {}): Promise<ResetResponse> {
    if (!(slot instanceof SlotLease) || !this.leases.has(slot)) throw new PoolError(`useTemplate(): ${slot?.key ?? String(slot)} is not a slot held from this pool`);
    return this.preparation.prepare(slot, spec, options.signal);
  }

  /** A container's free slots left in an image (at release) are reset to plain: those images may be evicted now. */
  private async unpinImages(containerId: string): Promise<number> {
    const container = this.byId.get(containerId);
    const pinned = container?.state === "ready" ? container.free.filter((r) => r.root !== undefined) : [];
    for (const r of pinned) {
      container!.free.splice(container!.free.indexOf(r), 1);
      this.freeCount--;
      // Held by the pool itself for a plain reset; returnSlot gives it back.
      r.state = "held";
      r.root = undefined;
      container!.busy++;
      this.busyCount++;
    }
    await Promise.all(pinned.map((r) => this.returnSlot(r, true, "pool:unpin-images")));
    return pinned.length;
  }

  /** The free slot `wish` should get (slot-placement.ts: packing, affinity, suspect nodes last), or undefined. */
  private takeFreeSlot(wish?: PlacementWish): SlotRecord | undefined {
    if (this.freeCount === 0) return undefined;
    const record = this.placement.take(wish);
    if (record) this.freeCount--;
    return record;
  }

  private get stopping(): boolean {
    return this.state === "stopping" || this.state === "stopped";
  }

  private async returnSlot(record: SlotRecord, reset: boolean, trajectoryId: string): Promise<void> {
    const container = record.container;
    if (gone(record)) return;
    // The pool is going away with its containers: a reset would only race their shutdown.
    if (this.stopping) reset = false;
    if (reset) {
      record.state = "resetting";
      const outcome = await resetReleasedSlot(record, (r, err) => this.confirmContainerLoss(r, err));
      if (outcome.kind === "gone") return;
      if (outcome.kind === "failed") {
        const failure = outcome.failure;
        // A workspace we could not clean must not reach another trajectory. A reset cut by a
        // shutdown (the pool's, or the server's own) is expected: said, not warned about.
        if (this.stopping || /shutting down/.test(failure)) this.logger.info({ slot: record.key, trajectoryId, reason: failure }, "slot not reset: its sandbox server is shutting down");
        else this.logger.warn({ slot: record.key, trajectoryId, error: failure }, "slot reset failed; taking the slot out of service");
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
    if (this.forks.waiting) this.forks.serve(container);
    if (container.state === "ready") this.serveWaiters();
    else this.scheduleScale(); // a draining container may have emptied
  }

  private insertFree(container: ContainerRecord, record: SlotRecord, justReset = false): void {
    this.placement.insert(container, record, justReset);
    this.freeCount++;
  }

  private serveWaiters(): void {
    while (this.waiters.size > 0) {
      const waiter = this.waiters.peek();
      if (!waiter) break;
      const record = this.takeFreeSlot(waiter.wish);
      if (!record) break;
      this.waiters.take();
      waiter.resolve(this.lease(record, waiter.trajectoryId, waiter.startedAt, plainWish(waiter.wish ?? {})));
    }
    this.waiters.compact();
  }

  private dropWaiter(waiter: Waiter): void {
    this.waiters.drop(waiter);
    this.scheduleScale();
  }

  // ---------------------------------------------------------------- provisioner events

  private onContainerStarting(id: string, index: number): void {
    if (this.byId.has(id)) return;
    this.starting.set(id, index);
    this.emit("container-starting", { id, index });
  }

  private onContainerUp(info: ContainerInfo): void {
    this.starting.delete(info.id);
    this.admission.containerUp(info);
  }

  /** A new container answered /health: its slots open (drained if the autoscaler is retiring it). */
  private openContainer(record: ContainerRecord, slots: number, generations?: readonly number[]): void {
    record.initSlots(slots, generations);
    record.state = this.scaler.opensDrained(record) ? "draining" : "ready";
    this.freeCount += slots;
    this.logger.info({ container: record.info.id, index: record.index, url: record.info.url, slots }, "container ready");
    this.emit("container-ready", record.info);
    this.serveWaiters();
    if (this.startWaiter && this.readyCount() >= this.config.minContainers) this.startWaiter.resolve();
    this.scheduleScale();
  }

  private onContainerGone(gone: ContainerGone): void {
    this.starting.delete(gone.id);
    this.health.forget(gone.id);
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
    // During start-up the problem is start()'s error, which its caller reports: logged here too it would be said twice.
    if (!(this.state === "starting" && this.startWaiter)) this.logger.warn({ kind: error.kind, err: error.message }, "provisioner problem");
    this.emit("problem", error);
    // During start-up a problem means start() fails now instead of after the timeout.
    if (this.state === "starting" && this.startWaiter) this.startWaiter.reject(error);
    if (FATAL_PROBLEMS.has(error.kind) && this.state === "running") this.fail(error);
  }

  /**
   * The provisioner can give no more containers (its job is gone or another run took it):
   * the pool stops handing out slots, and every waiter and later acquire fails at once with
   * this one error instead of timing out again and again.
   */
  private fail(error: ProvisionerError): void {
    this.failure = error;
    this.state = "failed";
    clearInterval(this.tickTimer);
    clearInterval(this.healthTimer);
    this.avoidance.stop();
    this.waiters.failAll(error);
    this.logger.error({ kind: error.kind, err: error.message }, "slot pool failed: no more slots can be handed out");
    this.emit("failed", error);
  }

  // ---------------------------------------------------------------- loss

  /** Called when a call to the container failed to connect: check now, mark lost if it is gone. */
  async confirmContainerLoss(record: SlotRecord, error: unknown): Promise<void> {
    await this.health.suspect(record.container, error);
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
      lease.end = { kind: "lost", containerId: container.info.id, reason };
      this.lostHeldLeases.add(lease);
      this.lostHeld++;
      heldLost++;
      this.statistics.slotLost();
      this.emit("slot-lost", { key: lease.key, trajectoryId: lease.trajectoryId, containerId: container.info.id, reason });
    }
    this.detach(container);
    this.suspectNode(container);
    const log = wasChecking ? this.logger.warn.bind(this.logger) : this.logger.error.bind(this.logger);
    log({ container: container.info.id, index: container.index, heldSlotsLost: heldLost, reason }, "container lost");
    this.emit("container-lost", { container: container.info, reason });
    this.scheduleScale();
  }

  /** A container was lost: its node's other containers are checked at once, and its node avoided for a while. */
  private suspectNode(container: ContainerRecord): void {
    const node = container.info.node;
    if (node === undefined || this.state !== "running") return;
    this.placement.suspectNode(node);
    for (const c of this.containers) if (c.info.node === node && c.live) this.health.suspectSibling(c, node);
    this.avoidance.containerLost(node);
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

  // ---------------------------------------------------------------- scaling

  private scheduleScale(): void {
    this.scaler.schedule();
  }

  /** Containers the current demand needs, within [min, max]. */
  desiredContainers(): number {
    return this.scaler.desired();
  }

  /** The last scale calls (up to 100), oldest first. */
  scaleLog(): readonly ScaleEvent[] {
    return this.scaler.log();
  }

  // ---------------------------------------------------------------- periodic work

  private tick(): void {
    if (this.state !== "running") return;
    this.scaler.evaluate();
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
      lease.end = { kind: "lost", containerId: lease.container.id, reason };
      this.statistics.leaseReclaimed();
      this.logger.warn({ slot: lease.key, trajectoryId: lease.trajectoryId, idleMs: Math.round(idleMs) }, "reclaiming an abandoned slot: its lease expired");
      this.emit("slot-reclaimed", { key: lease.key, trajectoryId: lease.trajectoryId, idleMs });
      void this.returnSlot(lease.record, true, lease.trajectoryId);
    }
  }

  // ---------------------------------------------------------------- stats

  private readyCount(): number {
    let n = 0;
    for (const c of this.containers) if (c.live) n++;
    return n;
  }

  stats(): PoolStats {
    return this.statistics.snapshot();
  }

  /**
   * Each live container's /health answer (slots, sandbox, limits, network, images), asked now:
   * what isolation the slots have, for a run's summary. A container that does not answer gets
   * its error instead.
   */
  containerHealth(): Promise<ContainerHealth[]> {
    return askContainerHealth(this.containers.filter((c) => c.live));
  }

  /** The containers the pool knows, lowest index first (for status pages and tests). */
  containerList(): Array<ContainerInfo & { state: string; busySlots: number; freeSlots: number }> {
    return this.containers.map((c) => ({ ...c.info, state: c.state, busySlots: c.busy, freeSlots: c.free.length }));
  }

  private startTimeoutError(): Promise<Error> {
    return startTimeoutError(this.provisioner, { ready: this.readyCount(), min: this.config.minContainers, timeoutMs: this.config.startTimeoutMs, lastProblem: this.lastProblem });
  }
}


