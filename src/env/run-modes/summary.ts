import type { RunStats } from "../run-stats.js";

const ms = (v: number) => (v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${v.toFixed(1)} ms`);

/** The end-of-run table: groups, success rate, mean score, tool calls/errors, latency, slot losses. */
export function formatSummary(title: string, stats: RunStats, extra: Array<[string, string]> = []): string {
  const rows: Array<[string, string]> = [
    ["groups", `${stats.groups} (${stats.failedGroups} failed, ${stats.filteredGroups} filtered)`],
    ["trajectories", String(stats.trajectories)],
    ["success rate", `${(stats.successRate * 100).toFixed(1)}%`],
    ["mean score", stats.meanScore.toFixed(3)],
    ["tool calls", String(stats.toolCalls)],
    ["tool errors", String(stats.toolErrors)],
    ["tool latency p50", ms(stats.latencyPercentile(50))],
    ["tool latency p99", ms(stats.latencyPercentile(99))],
    ["workspace setup p50/p99", `${ms(stats.latencyPercentile(50, stats.workspaceSetupMs))} / ${ms(stats.latencyPercentile(99, stats.workspaceSetupMs))}`],
    ["slot losses", String(stats.slotLosses)],
    ["retries", String(stats.retries)],
    ...(stats.rewardErrors ? ([["reward errors", String(stats.rewardErrors)]] as Array<[string, string]>) : []),
    ...extra,
    ["elapsed", `${((Date.now() - stats.startedAt) / 1000).toFixed(1)} s`],
  ];
  const w = Math.max(...rows.map(([k]) => k.length));
  const lines = [title, "─".repeat(Math.max(title.length, w + 20)), ...rows.map(([k, v]) => `  ${k.padEnd(w)}  ${v}`)];
  if (stats.failures.length > 0) {
    lines.push("", "failed groups:");
    for (const f of stats.failures.slice(0, 10)) lines.push(`  - ${f}`);
    if (stats.failures.length > 10) lines.push(`  … and ${stats.failures.length - 10} more`);
  }
  return lines.join("\n") + "\n";
}
