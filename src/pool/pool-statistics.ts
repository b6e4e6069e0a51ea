import { LatencyWindow } from "../observability/latency-window.js";
import type { Counter, Histogram, MetricsRegistry } from "../observability/metrics.js";
import type { ContainerRecord } from "./records.js";
import type { PoolStats } from "./types.js";

/** The pool's counts at one moment, as the pool keeps them. */
export interface PoolCounts {
  containers: readonly ContainerRecord[];
  /** Placed by the provisioner, not reachable yet. */
  placed: number;
  containersLost: number;
  free: number;
  held: number;
  /** Held slots lost with their container and not released yet. */
  lostHeld: number;
  waiting: number;
  target: number;
  scaleEvents: number;
}

/**
 * The pool's statistics: its Prometheus series (acquire latency, scale calls, losses,
 * reclaims; gauges read from the pool when scraped) and the `stats()` snapshot.
 */
export class PoolStatistics {
  private readonly acquireWindow = new LatencyWindow(4096);
  private readonly acquireHistogram: Histogram;
  private readonly scaleCounter: Counter;
  private readonly lostCounter: Counter;
  private readonly reclaimCounter: Counter;

  constructor(
    metrics: MetricsRegistry,
    private readonly counts: () => PoolCounts,
  ) {
    this.acquireHistogram = metrics.histogram("slotpool_pool_acquire_seconds", "Time from acquire() to a slot handed out");
    this.scaleCounter = metrics.counter("slotpool_pool_scale_events_total", "Scale calls made to the provisioner, by result");
    this.lostCounter = metrics.counter("slotpool_pool_slots_lost_total", "Held slots lost with their container");
    this.reclaimCounter = metrics.counter("slotpool_pool_leases_reclaimed_total", "Held slots reclaimed after their lease expired");
    metrics.gauge("slotpool_pool_slots", "Slots by state", () => {
      const s = this.snapshot().slots;
      return [
        { labels: { state: "free" }, value: s.free },
        { labels: { state: "held" }, value: s.held },
        { labels: { state: "lost" }, value: s.lost },
      ];
    });
    metrics.gauge("slotpool_pool_containers", "Containers by state", () => {
      const c = this.snapshot().containers;
      return [
        { labels: { state: "starting" }, value: c.starting },
        { labels: { state: "ready" }, value: c.ready },
        { labels: { state: "draining" }, value: c.draining },
      ];
    });
    metrics.gauge("slotpool_pool_waiting", "acquire() calls waiting for a slot", () => [{ value: this.counts().waiting }]);
    metrics.gauge("slotpool_pool_target_containers", "Container count asked of the provisioner", () => [{ value: this.counts().target }]);
  }

  acquired(waitedMs: number): void {
    this.acquireWindow.record(waitedMs);
    this.acquireHistogram.observe(waitedMs / 1000);
  }

  scaleCall(ok: boolean): void {
    this.scaleCounter.inc({ result: ok ? "ok" : "error" });
  }

  slotLost(): void {
    this.lostCounter.inc();
  }

  leaseReclaimed(): void {
    this.reclaimCounter.inc();
  }

  snapshot(): PoolStats {
    const n = this.counts();
    let checking = 0;
    let ready = 0;
    let draining = 0;
    let total = 0;
    for (const c of n.containers) {
      if (c.state === "checking") checking++;
      else if (c.state === "ready") ready++;
      else if (c.state === "draining") draining++;
      if (c.live) for (const s of c.slots) if (s.state !== "lost") total++;
    }
    const starting = n.placed + checking;
    return {
      containers: { starting, ready, draining, lost: n.containersLost, total: starting + ready + draining },
      slots: { total, free: n.free, held: n.held, lost: n.lostHeld },
      waiting: n.waiting,
      targetContainers: n.target,
      acquireLatencyMs: this.acquireWindow.summary(),
      scaleEvents: n.scaleEvents,
    };
  }
}
