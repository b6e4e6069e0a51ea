import { formatMs, formatToolErrorLine } from "../../report/tool-stats.js";
import { formatCauses } from "../infra-failure.js";
import { isolationRows } from "../isolation.js";
import type { RunStats } from "../run-stats.js";

const TOOL_ERROR_LINES = 10;
const SLOWEST_TOOLS = 5;

/**
 * What the report's run panel adds to the figures it computes from the JSONL itself: failed,
 * dropped and filtered groups and infra failures (not in the file), success by threshold,
 * the slots' isolation, elapsed time.
 */
export function runRows(stats: RunStats, extra: Array<[string, string]> = []): Array<[string, string]> {
  return [
    ["groups", groupsText(stats)],
    ["success rate", successText(stats)],
    ["score distribution", stats.scoreDistribution()],
    ["infra failures", infraText(stats)],
    ...stats.metricRows(),
    ...(stats.stoppedEarly ? ([["stopped early", stats.stoppedEarly]] as Array<[string, string]>) : []),
    ...(stats.isolation ? isolationRows(stats.isolation) : []),
    ...extra,
    ["elapsed", `${((Date.now() - stats.startedAt) / 1000).toFixed(1)} s`],
  ];
}

/** The summary's key/value rows: groups, success rate, mean score, scores, infra failures, tools, latency, slot losses, isolation. */
export function summaryRows(stats: RunStats, extra: Array<[string, string]> = []): Array<[string, string]> {
  return [
    ["groups", groupsText(stats)],
    ["trajectories", `${stats.trajectories} scored`],
    // `.ci/run` reads this line as "success rate  NN.N%": keep the figure first.
    ["success rate", successText(stats)],
    ["mean score", stats.meanScore.toFixed(3)],
    ["score distribution", stats.scoreDistribution()],
    ["infra failures", infraText(stats)],
    ...infraStageRow(stats),
    ...stats.metricRows(),
    ["tool calls", String(stats.toolCalls)],
    ["tool errors", String(stats.toolErrors)],
    ["tool latency p50", formatMs(stats.latencyPercentile(50))],
    ["tool latency p99", formatMs(stats.latencyPercentile(99))],
    ["workspace setup p50/p99", `${formatMs(stats.latencyPercentile(50, stats.workspaceSetupMs))} / ${formatMs(stats.latencyPercentile(99, stats.workspaceSetupMs))}`],
    ["slot losses", String(stats.slotLosses)],
    ["retries", String(stats.retries)],
    ...(stats.tokenTurns
      ? ([
          ["token-exact", `${stats.tokenExactTrajectories} of ${stats.trajectories} trajectories`],
          ["prefix breaks", `${stats.prefixBreaks} of ${stats.tokenTurns} turns (${(stats.prefixBreakRate * 100).toFixed(1)}%)${stats.unsentSegments ? `, ${stats.unsentSegments} broken-off segments not sent` : ""}`],
        ] as Array<[string, string]>)
      : []),
    ...(stats.isolation ? isolationRows(stats.isolation) : []),
    ...(stats.stoppedEarly ? ([["stopped early", stats.stoppedEarly]] as Array<[string, string]>) : []),
    ...extra,
    ["elapsed", `${((Date.now() - stats.startedAt) / 1000).toFixed(1)} s`],
  ];
}

function groupsText(stats: RunStats): string {
  const dropped = stats.droppedGroups ? `, ${stats.droppedGroups} of them dropped for infra failures` : "";
  return `${stats.groups} (${stats.failedGroups} failed${dropped}, ${stats.filteredGroups} filtered)`;
}

function successText(stats: RunStats): string {
  return `${(stats.successRate * 100).toFixed(1)}% (${stats.solved} of ${stats.trajectories} with score ≥ ${stats.successThreshold})`;
}

/** Trajectories that were not scored, by cause; never mixed into the scores. */
function infraText(stats: RunStats): string {
  const n = stats.infraFailureCount;
  if (n === 0) return "0";
  const masked = stats.maskedTrajectories ? ` · ${stats.maskedTrajectories} masked out of their groups` : "";
  return `${n} trajectories not scored (${formatCauses(stats.infraFailures)})${masked}`;
}

/** Where the infra failures happened ("setup 1 · tool 2 · reward 0"), when any had a known place. */
function infraStageRow(stats: RunStats): Array<[string, string]> {
  const by = stats.infraFailuresByStage;
  const stages = Object.keys(by) as Array<keyof typeof by>;
  if (stages.every((s) => by[s] === 0)) return [];
  return [["infra failures in", stages.map((s) => `${s} ${by[s]}`).join(" · ")]];
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
