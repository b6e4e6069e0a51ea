import { MetricsRegistry } from "../../observability/metrics.js";
import type { Slot } from "../core/slot.js";

/** The sandbox server's Prometheus metrics (GET /metrics). */
export class SandboxMetrics {
  readonly registry = new MetricsRegistry();
  readonly calls = this.registry.counter("slotpool_sandbox_calls_total", "Tool calls by tool and outcome (ok, error, timeout).");
  readonly errors = this.registry.counter("slotpool_sandbox_errors_total", "Requests answered with an HTTP error, by route and status.");
  readonly latency = this.registry.histogram("slotpool_sandbox_call_duration_seconds", "Tool call duration (queue wait excluded), by tool.");
  readonly resets = this.registry.counter("slotpool_sandbox_resets_total", "Slot resets.");
  readonly slotsGauge;

  constructor(slots: () => Slot[]) {
    this.slotsGauge = this.registry.gauge("slotpool_sandbox_slots", "Slots by state.", () => {
      const counts = { idle: 0, busy: 0, resetting: 0 };
      for (const s of slots()) counts[s.state]++;
      return Object.entries(counts).map(([state, value]) => ({ labels: { state }, value }));
    });
  }

  observeCall(tool: string, outcome: string, seconds: number): void {
    this.calls.inc({ tool, outcome });
    this.latency.observe(seconds, { tool });
  }

  render(): string {
    return this.registry.render();
  }
}
