import { formatMs, formatToolErrorLine } from "../../report/tool-stats.js";
import type { RunStats } from "../run-stats.js";

const TOOL_ERROR_LINES = 10;
const SLOWEST_TOOLS = 5;

/**
 * What the report's run panel adds to the figures it computes from the JSONL itself: failed
 * and filtered groups (not in the file), reward errors, elapsed time.
 */
export function runRows(stats: RunStats, extra: Array<[string, string]> = []): Array<[string, string]> {
  return [
    ["groups", `${stats.groups} (${stats.failedGroups} failed, ${stats.filteredGroups} filtered)`],
    ...(stats.rewardErrors ? ([["reward errors", String(stats.rewardErrors)]] as Array<[string, string]>) : []),
    ...extra,
    ["elapsed", `${((Date.now() - stats.startedAt) / 1000).toFixed(1)} s`],
  ];
}

/** The summary's key/value rows: groups, success rate, mean score, tool calls/errors, latency, slot losses. */
export function summaryRows(stats: RunStats, extra: Array<[string, string]> = []): Array<[string, string]> {
  return [
    ["groups", `${stats.groups} (${stats.failedGroups} failed, ${stats.filteredGroups} filtered)`],
    ["trajectories", String(stats.trajectories)],
    ["success rate", `${(stats.successRate * 100).toFixed(1)}%`],
    ["mean score", stats.meanScore.toFixed(3)],
    ["tool calls", String(stats.toolCalls)],
    ["tool errors", String(stats.toolErrors)],
    ["tool latency p50", formatMs(stats.latencyPercentile(50))],
    ["tool latency p99", formatMs(stats.latencyPercentile(99))],
    ["workspace setup p50/p99", `${formatMs(stats.latencyPercentile(50, stats.workspaceSetupMs))} / ${formatMs(stats.latencyPercentile(99, stats.workspaceSetupMs))}`],
    ["slot losses", String(stats.slotLosses)],
    ["retries", String(stats.retries)],
    ...(stats.rewardErrors ? ([["reward errors", String(stats.rewardErrors)]] as Array<[string, string]>) : []),
    ...(stats.tokenTurns
      ? ([
          ["token-exact", `${stats.tokenExactTrajectories} of ${stats.trajectories} trajectories`],
          ["prefix breaks", `${stats.prefixBreaks} of ${stats.tokenTurns} turns (${(stats.prefixBreakRate * 100).toFixed(1)}%)${stats.unsentSegments ? `, ${stats.unsentSegments} broken-off segments not sent` : ""}`],
        ] as Array<[string, string]>)
      : []),
    ...extra,
    ["elapsed", `${((Date.now() - stats.startedAt) / 1000).toFixed(1)} s`],
  ];
}

/**
 * The end-of-run table: the rows above, then the slowest tools, the tool errors per turn in
 * the seeds' format (`[turn N] tool(args) -> error`) and the failed groups.
 */
export function formatSummary(title: string, stats: RunStats, extra: Array<[string, string]> = []): string {
  const rows = summaryRows(stats, extra);
  const w = Math.max(...rows.map(([k]) => k.length));
  const lines = [title, "─".repeat(Math.max(title.length, w + 20)), ...rows.map(([k, v]) => `  ${k.padEnd(w)}  ${v}`)];
  const tools = stats.toolTable().slice(0, SLOWEST_TOOLS);
  if (tools.length > 0) {
    const tw = Math.max(4, ...tools.map((t) => t.tool.length));
    lines.push("", "slowest tools:", `  ${"tool".padEnd(tw)}  ${"calls".padStart(6)}  ${"errors".padStart(6)}  ${"p50".padStart(9)}  ${"p99".padStart(9)}  ${"max".padStart(9)}`);
    for (const t of tools) {
      lines.push(`  ${t.tool.padEnd(tw)}  ${String(t.calls).padStart(6)}  ${String(t.errors).padStart(6)}  ${formatMs(t.p50).padStart(9)}  ${formatMs(t.p99).padStart(9)}  ${formatMs(t.max).padStart(9)}`);
    }
  }
  if (stats.toolErrorLog.length > 0) {
    lines.push("", "tool errors:");
    for (const e of stats.toolErrorLog.slice(0, TOOL_ERROR_LINES)) lines.push(`  ${formatToolErrorLine(e)}`);
    if (stats.toolErrors > TOOL_ERROR_LINES) lines.push(`  … and ${stats.toolErrors - TOOL_ERROR_LINES} more`);
  }
  if (stats.failures.length > 0) {
    lines.push("", "failed groups:");
    for (const f of stats.failures.slice(0, 10)) lines.push(`  - ${f}`);
    if (stats.failures.length > 10) lines.push(`  … and ${stats.failures.length - 10} more`);
  }
  return lines.join("\n") + "\n";
}
