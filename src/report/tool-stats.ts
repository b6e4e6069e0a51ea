import { percentile } from "../observability/latency-window.js";

/**
 * A tool error as the seeds log it (HermesAgentBaseEnv.wandb_log):
 * `[turn N] tool(args) -> error`, arguments cut to 80 characters and the error to 150.
 */
export function formatToolErrorLine(e: { turn: number; tool: string; arguments: string; error: string }): string {
  const oneLine = (s: string) => s.replace(/\s+/g, " ");
  return `[turn ${e.turn}] ${e.tool}(${oneLine(e.arguments.slice(0, 80))}) -> ${oneLine(e.error.slice(0, 150))}`;
}

export interface ToolLatencyRow {
  tool: string;
  calls: number;
  errors: number;
  p50: number;
  p99: number;
  max: number;
}

/** Calls, errors and latency of each tool, slowest (by p99) first. Calls without a duration count but are not timed. */
export function toolLatencyTable(calls: Iterable<{ tool: string; success: boolean; durationMs?: number | undefined }>): ToolLatencyRow[] {
  const by = new Map<string, { calls: number; errors: number; ms: number[] }>();
  for (const c of calls) {
    let row = by.get(c.tool);
    if (!row) by.set(c.tool, (row = { calls: 0, errors: 0, ms: [] }));
    row.calls++;
    if (!c.success) row.errors++;
    if (c.durationMs !== undefined) row.ms.push(c.durationMs);
  }
  const rows = [...by].map(([tool, r]) => {
    const sorted = r.ms.sort((a, b) => a - b);
    return { tool, calls: r.calls, errors: r.errors, p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), max: sorted[sorted.length - 1] ?? 0 };
  });
  return rows.sort((a, b) => b.p99 - a.p99 || b.calls - a.calls);
}

/** Milliseconds for people: `12.3 ms`, `1.25 s`. */
export function formatMs(v: number): string {
  return v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${v.toFixed(1)} ms`;
}
