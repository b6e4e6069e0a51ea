import { PoolNotRunningError, SandboxRequestError, SlotForkError } from "./errors.js";
import type { ContainerRecord, SlotRecord } from "./records.js";
import type { SlotLease } from "./slot-lease.js";
import type { ForkOptions } from "./types.js";

/** What forking needs from the pool's bookkeeping. */
export interface ForkHost {
  readonly config: { acquireTimeoutMs: number };
  /** "running" when slots may be handed out. */
  state(): string;
  /** n free slots were taken off a container's free list (the pool's free count drops). */
  freeTaken(n: number): void;
  lease(record: SlotRecord, trajectoryId: string, startedAt: number): SlotLease;
  release(lease: SlotLease, options: { reset: boolean }): Promise<void>;
}

interface ForkWaiter {
  container: ContainerRecord;
  n: number;
  take: (records: SlotRecord[]) => void;
}

/**
 * Forking leases (`lease.fork(n)`, docs/fork.md): n free sibling slots of the parent's
 * container held all at once (waiting for them ahead of plain acquires), the server asked to
 * fork into them, and the children handed out as leases. All or nothing.
 */
export class ForkLeases {
  /** Forks waiting for free slots on one container: served before acquires when slots come back there. */
  private readonly waiters: ForkWaiter[] = [];

  constructor(private readonly host: ForkHost) {}

  get waiting(): boolean {
    return this.waiters.length > 0;
  }

  /**
   * Holds n free slots of the lease's container (waiting up to the timeout), asks the server
   * to fork into them, and hands them out as leases. On any failure the held slots go back
   * (reset only when the server may have touched them) and a SlotForkError says why.
   */
  async fork(parent: SlotLease, n: number, options: ForkOptions): Promise<SlotLease[]> {
    if (!Number.isInteger(n) || n < 1) throw new SlotForkError("invalid", `fork(n): n must be a positive integer, got ${String(n)}`);
    const ids = options.trajectoryIds ?? Array.from({ length: n }, (_, i) => `${parent.trajectoryId}/fork-${i}`);
    if (ids.length !== n) throw new SlotForkError("invalid", `fork(${n}): trajectoryIds names ${ids.length} trajectories, expected ${n}`);
    const state = this.host.state();
    if (state !== "running") throw new PoolNotRunningError(`cannot fork: the pool is ${state}`);
    const container = parent.record.container;
    if (!container.client.fork) throw new SlotForkError("unsupported", `the sandbox client of ${container.info.id} cannot fork (no POST /fork)`);
    const others = container.slots.filter((s) => s !== parent.record && s.state !== "lost").length;
    if (n > others) {
      throw new SlotForkError(
        "capacity",
        `cannot fork ${parent.key} into ${n} slots: its container ${container.info.id} has ${container.slots.length} slots, so at most ${others} siblings; fork into fewer, or start containers with more slots (slotsPerContainer)`,
      );
    }
    const startedAt = performance.now();
    const timeoutMs = options.timeoutMs ?? this.host.config.acquireTimeoutMs;
    const records = await this.takeFromContainer(container, n, timeoutMs, options.signal, parent.key);
    const leases = records.map((r, i) => this.host.lease(r, ids[i]!, startedAt));
    try {
      const res = await parent.forkInto(
        records.map((r) => r.slotId),
        { ...(options.signal ? { signal: options.signal } : {}), ...(options.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}) },
      );
      records.forEach((r, i) => {
        r.generation = res.generations?.[i];
        // A child of an image slot is that image with the parent's changes: its root, not fresh.
        r.root = parent.record.root;
        r.fresh = false;
      });
    } catch (err) {
      // A refusal (4xx) changed nothing on the server; anything else may have touched the children.
      const untouched = err instanceof SandboxRequestError && err.status !== undefined && err.status >= 400 && err.status < 500;
      await Promise.all(leases.map((l) => this.host.release(l, { reset: !untouched })));
      throw new SlotForkError("refused", `fork of ${parent.key} into ${records.map((r) => r.slotId).join(", ")} failed: ${err instanceof Error ? err.message : String(err)}`, { cause: err });
    }
    return leases;
  }

  /** Slots came back on `container`: hand them to the forks waiting there, oldest first. */
  serve(container: ContainerRecord): void {
    for (const w of [...this.waiters]) {
      if (w.container !== container) continue;
      const records = this.takeN(container, w.n);
      if (!records) break;
      w.take(records);
    }
  }

  /** n free slots of `container`, taken together (never some of them), or a SlotForkError after `timeoutMs`. */
  private takeFromContainer(container: ContainerRecord, n: number, timeoutMs: number, signal: AbortSignal | undefined, parentKey: string): Promise<SlotRecord[]> {
    if (signal?.aborted) return Promise.reject(signal.reason);
    const now = this.takeN(container, n);
    if (now) return Promise.resolve(now);
    return new Promise<SlotRecord[]>((resolve, reject) => {
      const entry: ForkWaiter = {
        container,
        n,
        take: (records) => {
          done();
          resolve(records);
        },
      };
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", onAbort);
        const i = this.waiters.indexOf(entry);
        if (i >= 0) this.waiters.splice(i, 1);
      };
      const onAbort = () => {
        done();
        reject(signal!.reason);
      };
      const timer = setTimeout(() => {
        done();
        reject(new SlotForkError("timeout", `cannot fork ${parentKey} into ${n} slots: only ${container.free.length} of its container's slots became free within ${timeoutMs} ms; release sibling slots sooner, fork into fewer, or pass a longer timeoutMs`));
      }, timeoutMs);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(entry);
    });
  }

  private takeN(container: ContainerRecord, n: number): SlotRecord[] | undefined {
    if (container.state !== "ready" || container.free.length < n) return undefined;
    const records = container.free.splice(container.free.length - n, n).reverse();
    this.host.freeTaken(n);
    return records;
  }
}
