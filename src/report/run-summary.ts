import { percentile } from "../observability/latency-window.js";
import type { ReportModel, ToolCallView, ToolErrorView } from "./model.js";
import { toolLatencyTable, type ToolLatencyRow } from "./tool-stats.js";

export interface HistogramBin {
  label: string;
  /** Smallest and largest score that fell in the bin (the filter's range when it is clicked). */
  min: number;
  max: number;
  count: number;
}

export interface ReportSummary {
  groups: number;
  trajectories: number;
  scored: number;
  successRate: number;
  /** The score at or above which a trajectory counts as solved. */
  successThreshold: number;
  meanScore: number;
  histogram: HistogramBin[];
  toolCalls: number;
  timedCalls: number;
  toolErrors: number;
  latency: { p50: number; p90: number; p99: number; max: number };
  tools: ToolLatencyRow[];
  slotLosses: number;
  retries: number;
  trajectoriesWithErrors: number;
  errors: Array<ToolErrorView & { trajectory: string }>;
  slowest: Array<ToolCallView & { trajectory: string }>;
  /** The env's custom metrics in the file: per trajectory (`per: "trajectory"`) and per group, by name. */
  metrics: MetricSummary[];
}

export interface MetricSummary {
  name: string;
  per: "trajectory" | "group";
  count: number;
  mean: number;
  min: number;
  max: number;
}

const DISTINCT_BINS = 10;
const RANGE_BINS = 10;

/** The header's figures, from the trajectories in the file (slotpool's extras where present). */
export function summarize(model: ReportModel, slowestKept = 10): ReportSummary {
  const scores: number[] = [];
  const calls: Array<ToolCallView & { trajectory: string }> = [];
  const errors: Array<ToolErrorView & { trajectory: string }> = [];
  let trajectories = 0;
  let slotLosses = 0;
  let retries = 0;
  let withErrors = 0;
  const metrics = new Map<string, MetricSummary>();
  const addMetrics = (per: MetricSummary["per"], m: Record<string, number> | undefined) => {
    for (const [name, v] of Object.entries(m ?? {})) {
      const key = `${per}:${name}`;
      const s = metrics.get(key);
      if (!s) metrics.set(key, { name, per, count: 1, mean: v, min: v, max: v });
      else {
        s.mean += (v - s.mean) / ++s.count;
        s.min = Math.min(s.min, v);
        s.max = Math.max(s.max, v);
      }
    }
  };
  for (const g of model.groups) {
    addMetrics("group", g.metrics);
    for (const t of g.trajectories) {
      addMetrics("trajectory", t.metrics);
      trajectories++;
      if (t.score !== null) scores.push(t.score);
      slotLosses += t.slotLosses.length;
      retries += Math.max(0, (t.attempts ?? 1) - 1);
      if (t.toolErrors.length > 0) withErrors++;
      for (const c of t.toolCalls) calls.push({ ...c, trajectory: t.id });
      for (const e of t.toolErrors) errors.push({ ...e, trajectory: t.id });
    }
  }
  const threshold = model.run?.successThreshold ?? 1;
  const timed = calls.filter((c) => c.durationMs !== undefined);
  const ms = timed.map((c) => c.durationMs!).sort((a, b) => a - b);
  return {
    groups: model.groups.length,
    trajectories,
    scored: scores.length,
    successRate: scores.length ? scores.filter((s) => s >= threshold).length / scores.length : 0,
    successThreshold: threshold,
    meanScore: scores.length ? scores.reduce((a, b) => a + b, 0) / scores.length : 0,
    histogram: histogram(scores),
    toolCalls: calls.length,
    timedCalls: timed.length,
    toolErrors: errors.length,
    latency: { p50: percentile(ms, 0.5), p90: percentile(ms, 0.9), p99: percentile(ms, 0.99), max: ms[ms.length - 1] ?? 0 },
    tools: toolLatencyTable(calls),
    slotLosses,
    retries,
    trajectoriesWithErrors: withErrors,
    errors,
    slowest: timed.sort((a, b) => b.durationMs! - a.durationMs!).slice(0, slowestKept),
    metrics: [...metrics.values()].sort((a, b) => (a.per === b.per ? a.name.localeCompare(b.name) : a.per === "trajectory" ? -1 : 1)),
  };
}

/** One bar per distinct score when there are few (0/1 rewards), else ten equal ranges. */
export function histogram(scores: readonly number[]): HistogramBin[] {
  if (scores.length === 0) return [];
  const distinct = [...new Set(scores)].sort((a, b) => a - b);
  if (distinct.length <= DISTINCT_BINS) {
    return distinct.map((v) => ({ label: fmtScore(v), min: v, max: v, count: scores.filter((s) => s === v).length }));
  }
  const lo = distinct[0]!;
  const hi = distinct[distinct.length - 1]!;
  const width = (hi - lo) / RANGE_BINS;
  const bins = Array.from({ length: RANGE_BINS }, (_, i) => ({ from: lo + i * width, min: Infinity, max: -Infinity, count: 0 }));
  for (const s of scores) {
    const b = bins[Math.min(RANGE_BINS - 1, Math.floor((s - lo) / width))]!;
    b.count++;
    b.min = Math.min(b.min, s);
    b.max = Math.max(b.max, s);
  }
  return bins.map((b, i) => ({
    label: `${fmtScore(b.from)}–${fmtScore(i === RANGE_BINS - 1 ? hi : b.from + width)}`,
    min: b.count ? b.min : b.from,
    max: b.count ? b.max : b.from,
    count: b.count,
  }));
}

export function fmtScore(v: number): string {
  return Number.isInteger(v) ? String(v) : v.toFixed(Math.abs(v) < 0.01 ? 4 : 2);
}
