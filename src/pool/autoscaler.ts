import type { Logger } from "pino";
import type { SlotPoolConfig } from "./config.js";
import type { Provisioner } from "./provisioner.js";
import type { ContainerRecord } from "./records.js";

export interface ScaleEvent {
  at: number;
  from: number;
  to: number;
  reason: string;
  ok: boolean;
  error?: string;
}

/** What the autoscaler reads from and tells the pool. */
export interface AutoscalerHost {
  readonly config: Pick<SlotPoolConfig, "minContainers" | "maxContainers" | "slotsPerContainer" | "headroomSlots" | "maxStartingContainers" | "idleTimeoutMs">;
  readonly provisioner: Pick<Provisioner, "setTargetCount">;
  readonly logger: Logger;
  isRunning(): boolean;
  /** Slots held (or being reset) and acquire() calls waiting. */
  demand(): { held: number; waiting: number };
  /** Live and checking containers, lowest index first. */
  containers(): readonly ContainerRecord[];
  containerDraining(container: ContainerRecord): void;
  containerUndrained(container: ContainerRecord): void;
  /** Some containers were un-drained: their free slots can serve waiters. */
  slotsReopened(): void;
  scaled(event: ScaleEvent): void;
}

/**
 * Decides the container count from demand and asks the provisioner for it.
 *
 * - scale up: target = ceil((held + waiting + headroom) / slotsPerContainer) in [min, max],
 *   one provisioner call per change, at most `maxStartingContainers` still starting.
 * - scale down: a surplus lasting `idleTimeoutMs` drains the highest-index containers (no new
 *   slots there); the count drops only below containers whose slots are all free, so a
 *   scale-down never kills a held slot (Nomad and the local provisioner stop the highest indexes).
 * - a failed call leaves the count as it was and is retried with backoff.
 */
export class Autoscaler {
  /** The count last asked of the provisioner (or being asked). */
  target = 0;
  private confirmedTarget = 0;
  private inFlight: Promise<void> | undefined;
  private again = false;
  private scheduled = false;
  private retryTimer: NodeJS.Timeout | undefined;
  private failures = 0;
  /** After a failed scale call, no new one before this time (clock.now()). */
  private blockedUntil = 0;
  /** Containers with an index at or above this are drained (Infinity: none). */
  drainFrom = Number.POSITIVE_INFINITY;
  private surplusSince: number | undefined;
  private readonly history: ScaleEvent[] = [];
  /** Successful scale calls. */
  events = 0;

  constructor(
    private readonly host: AutoscalerHost,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** The count the provisioner starts with. */
  begin(count: number): void {
    this.target = count;
    this.confirmedTarget = count;
  }

  /** Stops retrying and waits for a call in flight. */
  async stop(): Promise<void> {
    clearTimeout(this.retryTimer);
    await this.inFlight?.catch(() => undefined);
  }

  /** Coalesces scale decisions of one burst (many acquires in one tick) into one evaluation. */
  schedule(): void {
    if (this.scheduled || !this.host.isRunning()) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      this.evaluate();
    });
  }

  /** Containers the current demand needs, within [min, max]. */
  desired(): number {
    const { held, waiting } = this.host.demand();
    const c = this.host.config;
    const n = Math.ceil((held + waiting + c.headroomSlots) / c.slotsPerContainer);
    return Math.min(c.maxContainers, Math.max(c.minContainers, n));
  }

  evaluate(): void {
    if (!this.host.isRunning()) return;
    if (this.inFlight) {
      this.again = true;
      return;
    }
    const desired = this.desired();
    const now = this.now();
    if (now < this.blockedUntil) return;

    if (desired > this.drainFrom || desired >= this.target) this.setDrainFrom(desired >= this.target ? Number.POSITIVE_INFINITY : desired);

    const config = this.host.config;
    const containers = this.host.containers();
    if (desired > this.target) {
      this.surplusSince = undefined;
      // Admission control: never more than maxStartingContainers on their way up at once.
      const allowed = Math.min(desired, containers.length + config.maxStartingContainers);
      if (allowed > this.target) {
        const { held, waiting } = this.host.demand();
        this.requestTarget(allowed, `demand: ${held} held + ${waiting} waiting + ${config.headroomSlots} headroom slots`);
      }
      return;
    }
    if (desired === this.target) {
      this.surplusSince = undefined;
      return;
    }
    // Surplus: wait idleTimeoutMs, then drain the highest indexes; lower the count below the busy ones only.
    this.surplusSince ??= now;
    if (now - this.surplusSince < config.idleTimeoutMs) return;
    this.setDrainFrom(desired);
    let lowest = desired;
    for (const c of containers) {
      if (c.index >= desired && (c.busy > 0 || c.state === "ready")) lowest = Math.max(lowest, c.index + 1);
    }
    if (lowest < this.target) {
      const { held, waiting } = this.host.demand();
      this.requestTarget(lowest, `idle for ${Math.round(now - this.surplusSince)} ms: ${held} held, ${waiting} waiting`);
    }
  }

  /** A container becoming ready starts drained when it is above the drain line or retiring. */
  opensDrained(container: ContainerRecord): boolean {
    return container.index >= this.drainFrom || container.retiring;
  }

  /** The last scale calls (up to 100), oldest first. */
  log(): readonly ScaleEvent[] {
    return this.history;
  }

  private setDrainFrom(value: number): void {
    if (value === this.drainFrom) return;
    this.drainFrom = value;
    let undrained = false;
    for (const c of this.host.containers()) {
      if (c.state === "ready" && c.index >= value) {
        c.state = "draining";
        this.host.logger.info({ container: c.info.id, index: c.index }, "draining container");
        this.host.containerDraining(c);
      } else if (c.state === "draining" && c.index < value && !c.retiring) {
        c.state = "ready";
        undrained = true;
        this.host.containerUndrained(c);
      }
    }
    if (undrained) this.host.slotsReopened();
  }

  private requestTarget(count: number, reason: string): void {
    const from = this.target;
    this.target = count;
    // Containers above a lowered count are being stopped: they must not be un-drained and
    // lent out again if demand comes back before they are gone.
    const retiring: ContainerRecord[] = [];
    if (count < from) {
      for (const c of this.host.containers()) {
        if (c.index >= count && !c.retiring) {
          c.retiring = true;
          retiring.push(c);
        }
      }
    }
    const at = Date.now();
    this.host.logger.info({ from, to: count, reason }, "scaling containers");
    this.inFlight = this.host.provisioner
      .setTargetCount(count, reason)
      .then(
        () => {
          this.confirmedTarget = count;
          this.failures = 0;
          this.events++;
          this.record({ at, from, to: count, reason, ok: true });
        },
        (err: unknown) => {
          // The count did not change: retry with backoff on the next evaluation.
          this.target = this.confirmedTarget;
          for (const c of retiring) c.retiring = false;
          this.failures++;
          const error = err instanceof Error ? err.message : String(err);
          this.record({ at, from, to: count, reason, ok: false, error });
          this.host.logger.warn({ from, to: count, err: error, failures: this.failures }, "scale call failed; retrying");
          const delay = Math.min(30_000, 250 * 2 ** Math.min(this.failures, 7));
          this.blockedUntil = this.now() + delay;
          clearTimeout(this.retryTimer);
          this.retryTimer = setTimeout(() => this.schedule(), delay);
          this.retryTimer.unref();
        },
      )
      .finally(() => {
        this.inFlight = undefined;
        if (this.again) {
          this.again = false;
          this.schedule();
        }
      });
  }

  private record(event: ScaleEvent): void {
    this.history.push(event);
    if (this.history.length > 100) this.history.shift();
    this.host.scaled(event);
  }
}
