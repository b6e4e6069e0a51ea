/**
 * Custom metrics an env records: per trajectory (`computeReward` returns `{score, metrics}`)
 * or per group (`scoreGroup` returns `{scores, metrics}`). Names to finite numbers; they reach
 * the run summary (mean, min, max), the JSONL line (`slotpool.metrics`, and each trajectory's
 * `metrics`) and the HTML report.
 */
export type Metrics = Record<string, number>;

const NAME = /^[A-Za-z_][A-Za-z0-9_.:/-]{0,63}$/;

/** What is wrong with a metrics object, or undefined (one sentence naming the metric). */
export function metricsProblem(metrics: unknown): string | undefined {
  if (typeof metrics !== "object" || metrics === null || Array.isArray(metrics)) return `metrics must be an object of name → number, got ${Array.isArray(metrics) ? "an array" : typeof metrics}`;
  for (const [name, value] of Object.entries(metrics)) {
    if (!NAME.test(name)) return `metric name '${name}' must start with a letter or _ and hold only letters, digits and _ . : / - (at most 64)`;
    if (typeof value !== "number" || !Number.isFinite(value)) return `metric '${name}' is ${String(value)}, not a finite number`;
  }
  return undefined;
}

/** Running aggregate of one metric over a run. */
export interface MetricTally {
  count: number;
  sum: number;
  min: number;
  max: number;
}

/** Adds `metrics` to the tallies (by name). */
export function tallyMetrics(tallies: Map<string, MetricTally>, metrics: Metrics | undefined): void {
  for (const [name, value] of Object.entries(metrics ?? {})) {
    const t = tallies.get(name);
    if (!t) tallies.set(name, { count: 1, sum: value, min: value, max: value });
    else {
      t.count++;
      t.sum += value;
      t.min = Math.min(t.min, value);
      t.max = Math.max(t.max, value);
    }
  }
}

/** Evaluation's figures of the env's metrics: `metric_<name>` → its mean over the samples that have it. */
export function metricMeans(perSample: ReadonlyArray<Metrics | undefined>): Record<string, number> {
  const tallies = new Map<string, MetricTally>();
  for (const m of perSample) tallyMetrics(tallies, m);
  return Object.fromEntries([...tallies].map(([name, t]) => [`metric_${name}`, t.sum / t.count]));
}

/** `mean 0.5 (min 0 · max 1, 8 trajectories)`. */
export function formatTally(t: MetricTally, unit: "trajectory" | "group"): string {
  const f = (v: number) => (Number.isInteger(v) ? String(v) : v.toFixed(3).replace(/0+$/, ""));
  return `mean ${f(t.sum / t.count)} (min ${f(t.min)} · max ${f(t.max)}, ${t.count} ${t.count === 1 ? unit : unit === "group" ? "groups" : "trajectories"})`;
}
