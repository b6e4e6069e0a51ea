import { MetricsRegistry, type Counter, type Gauge, type Histogram } from "../observability/metrics.js";

/** The executor's Prometheus series. Labels stay low-cardinality: tool name and kind only. */
export class ExecutorMetrics {
  readonly calls: Counter;
  readonly errors: Counter;
  readonly duration: Histogram;
  readonly queued: Gauge;
  readonly inFlight: Gauge;
  readonly trajectories: Gauge;
  readonly slotsLost: Counter;

  constructor(
    readonly registry: MetricsRegistry = new MetricsRegistry(),
    sample: () => { queued: number; inFlight: number; trajectories: number } = () => ({ queued: 0, inFlight: 0, trajectories: 0 }),
  ) {
    this.calls = registry.counter("slotpool_executor_calls_total", "Tool calls finished by the executor, by tool and kind");
    this.errors = registry.counter("slotpool_executor_errors_total", "Tool calls that came back with success=false, by tool and kind");
    this.duration = registry.histogram("slotpool_executor_call_duration_seconds", "Time from execute() to the result, by kind");
    this.slotsLost = registry.counter("slotpool_executor_slots_lost_total", "Trajectories whose slot was lost mid-rollout");
    this.queued = registry.gauge("slotpool_executor_queued_calls", "Calls waiting to be dispatched", () => [{ value: sample().queued }]);
    this.inFlight = registry.gauge("slotpool_executor_in_flight_calls", "Calls dispatched and not yet answered", () => [{ value: sample().inFlight }]);
    this.trajectories = registry.gauge("slotpool_executor_trajectories", "Trajectories with state in the executor", () => [{ value: sample().trajectories }]);
  }
}
