import { basename } from "node:path";
import { formatMs, formatToolErrorLine } from "../../report/tool-stats.js";
import { countRepeats, withCount } from "../../report/repeats.js";
import { formatCauses } from "../infra-failure.js";
import { isolationRows } from "../isolation.js";
import type { RunStats } from "../run-stats.js";

const TOOL_ERROR_LINES = 10;
const SLOWEST_TOOLS = 5;

/**
 * What the report's run panel adds to the figures it computes from the JSONL itself: what
 * was not written (failed, dropped and filtered groups, infra failures, dropped attempts,
 * model retries), the slots' isolation, elapsed time. Its headline figures are the summary's,
 * which count the written trajectories only, so they equal the report's tiles.
 */
export function runRows(stats: RunStats, extra: Array<[string, string]> = []): Array<[string, string]> {
  return [
    ["groups", groupsText(stats)],
    ["trajectories", trajectoriesText(stats)],
    ["success rate", successText(stats)],
    ["score distribution", stats.scoreDistribution()],
    ["infra failures", infraText(stats)],
    ["group attempts dropped", droppedText(stats)],
    ...modelRows(stats),
    // The report's tile counts the calls in the file; this row every call that ran, as the summary.
    ["tool calls", toolCallsText(stats)],
    ["slot-loss restarts", String(stats.retries)],
    ...tokenRows(stats),
    ...stats.metricRows(),
    ...(stats.stoppedEarly ? ([["stopped early", stats.stoppedEarly]] as Array<[string, string]>) : []),
    ...(stats.isolation ? isolationRows(stats.isolation, stats.imagesSource?.()) : []),
    ...extra,
    ["elapsed", `${((Date.now() - stats.startedAt) / 1000).toFixed(1)} s`],
  ];
}

/**
 * The summary's key/value rows. The headline (trajectories, success rate, mean score, score
 * distribution) counts exactly what was written or sent; what was not has its own rows:
 * groups failed, dropped or filtered, infra failures, dropped group attempts, model calls
 * retried or failed, slot-loss restarts.
 */
export function summaryRows(stats: RunStats, extra: Array<[string, string]> = []): Array<[string, string]> {
  return [
    ["groups", groupsText(stats)],
    ["trajectories", trajectoriesText(stats)],
    // `.ci/run` reads this line as "success rate  NN.N%": keep the figure first.
    ["success rate", successText(stats)],
    ["mean score", `${stats.meanScore.toFixed(3)} (of the ${stats.trajectories} ${stats.delivered})`],
    ["score distribution", stats.scoreDistribution()],
    ["infra failures", infraText(stats)],
    ...infraStageRow(stats),
    ["group attempts dropped", droppedText(stats)],
    ...modelRows(stats),
    ...stats.metricRows(),
    ["tool calls", toolCallsText(stats)],
    ["tool errors", String(stats.toolErrors)],
    // n/a, as the report says, when nothing was timed: "0.0 ms" would be a measurement.
    ["tool latency p50", stats.timedToolCalls ? formatMs(stats.latencyPercentile(50)) : "n/a (no tool call finished)"],
    ["tool latency p99", stats.timedToolCalls ? formatMs(stats.latencyPercentile(99)) : "n/a (no tool call finished)"],
    ["workspace setup p50/p99", stats.workspaceSetupMs.length ? `${formatMs(stats.latencyPercentile(50, stats.workspaceSetupMs))} / ${formatMs(stats.latencyPercentile(99, stats.workspaceSetupMs))}` : "n/a (no workspace was set up)"],
    ["slot losses", String(stats.slotLosses)],
    ["slot-loss restarts", `${stats.retries} trajectories restarted on a new slot`],
    ...tokenRows(stats),
    ...(stats.isolation ? isolationRows(stats.isolation, stats.imagesSource?.()) : []),
    ...(stats.stoppedEarly ? ([["stopped early", stats.stoppedEarly]] as Array<[string, string]>) : []),
    ...unscoredRow(stats),
    ...extra,
    ["elapsed", `${((Date.now() - stats.startedAt) / 1000).toFixed(1)} s`],
  ];
}

/** Where the unscored trajectories' transcripts went (never the training data). */
function unscoredRow(stats: RunStats): Array<[string, string]> {
  if (!stats.failedSidecar) return [];
  return [["unscored", `${stats.failedTrajectories} trajectories → ${stats.failedSidecar} (why, stacks, transcripts, reward calls; not training data)`]];
}

/** The report's tiles for what the run made and did not write (its other tiles count the file). */
export function notWritten(stats: RunStats): { failedGroups: number; infraFailures: number; filteredGroups: number } {
  return { failedGroups: stats.failedGroups, infraFailures: stats.infraFailureCount, filteredGroups: stats.filteredGroups };
}

/** The report's view of the unscored trajectories: the stacks of the env's code that threw, and the sidecar, linked by its name (it lies beside the report). */
export function failedInfo(stats: RunStats): { failedStacks?: Array<{ stack: string; count: number }>; failedSidecar?: { href: string; trajectories: number } } {
  return {
    ...(stats.failureStacks.size ? { failedStacks: [...stats.failureStacks].map(([stack, count]) => ({ stack, count })) } : {}),
    ...(stats.failedSidecar ? { failedSidecar: { href: basename(stats.failedSidecar), trajectories: stats.failedTrajectories } } : {}),
  };
}

/** What `--tokenizer` would change: said whenever a written trajectory has no token ids. */
export const NO_TOKEN_IDS_HINT =
  "tokens and masks are empty: the data is good for supervised fine-tuning, not for RL training; pass --tokenizer path/to/tokenizer.json (or a server that returns token ids: --server-type vllm|sglang)";

function tokenRows(stats: RunStats): Array<[string, string]> {
  const rows: Array<[string, string]> = [];
  if (stats.trajectoriesWithoutTokens > 0) rows.push(["token ids", `none for ${stats.trajectoriesWithoutTokens} of ${stats.trajectories} ${stats.delivered} trajectories: ${NO_TOKEN_IDS_HINT}`]);
  if (stats.tokenTurns) {
    rows.push(["token-exact", `${stats.tokenExactTrajectories} of ${stats.trajectories} ${stats.delivered} trajectories`]);
    rows.push(["prefix breaks", `${stats.prefixBreaks} of ${stats.tokenTurns} turns (${(stats.prefixBreakRate * 100).toFixed(1)}%)${stats.unsentSegments ? `, ${stats.unsentSegments} broken-off segments not sent` : ""}`]);
  }
  return rows;
}

/** Model calls: how many completed, were retried or failed, and their latency (none for an oracle policy). */
function modelRows(stats: RunStats): Array<[string, string]> {
  const m = stats.modelCalls;
  if (!m) return [];
  return [
    ["model calls", `${m.completed} completed · ${m.retriedCalls} retried (${m.retries} retries in all) · ${m.failed} failed after retries`],
    ["model latency p50/p99", m.completed ? `${formatMs(m.latencyP50Ms)} / ${formatMs(m.latencyP99Ms)} (completed calls, retries included)` : "n/a (no model call completed)"],
  ];
}

function groupsText(stats: RunStats): string {
  const dropped = stats.droppedGroups ? `, ${stats.droppedGroups} of them dropped for infra failures` : "";
  const cut = stats.interruptedGroups ? `; ${stats.interruptedGroups} more cut by ${stopWord(stats)}` : "";
  return `${stats.groups} made: ${stats.sentGroups} ${stats.delivered}, ${stats.failedGroups} failed${dropped}, ${stats.filteredGroups} filtered${cut}`;
}

function trajectoriesText(stats: RunStats): string {
  const where = stats.interruptedGroups ? "failed, filtered or interrupted" : "failed or filtered";
  const unwritten = stats.unwrittenTrajectories ? ` · ${stats.unwrittenTrajectories} more finished in ${where} groups, not ${stats.delivered} nor counted below` : "";
  const cut = stats.interruptedTrajectories ? ` · ${stats.interruptedTrajectories} cut by ${stopWord(stats)} before they finished` : "";
  return `${stats.trajectories} ${stats.delivered}${unwritten}${cut}`;
}

function toolCallsText(stats: RunStats): string {
  if (!stats.interruptedGroups) return `${stats.toolCalls} (every call that ran: ${stats.delivered} or not, dropped tries included)`;
  return `${stats.toolCalls} ran (every trajectory, ${stats.delivered} or not, those cut by ${stopWord(stats)} included) · ${stats.toolCallsCut} cut by ${stopWord(stats)} while running`;
}

/** What cut the groups in flight: Ctrl-C, or the run stopping itself (its model breaker). */
function stopWord(stats: RunStats): string {
  return stats.stoppedEarly && stats.stoppedEarly !== "interrupted" ? "the stop" : "the interrupt";
}

function successText(stats: RunStats): string {
  return `${(stats.successRate * 100).toFixed(1)}% (${stats.solved} of ${stats.trajectories} ${stats.delivered} with score ≥ ${stats.successThreshold})`;
}

/** Tries of a group dropped for an infra failure, by the cause of the first failure in each. */
function droppedText(stats: RunStats): string {
  if (stats.droppedAttempts === 0) return "0";
  return `${stats.droppedAttempts} (${formatCauses(stats.droppedAttemptCauses)}): their items were tried again or their groups dropped`;
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
    // Each distinct reason once, with its count: a dead model server fails every group alike.
    const reasons = countRepeats(stats.failures);
    lines.push("", "failed groups:");
    for (const f of reasons.slice(0, 10)) lines.push(`  - ${withCount(f)}`);
    if (reasons.length > 10) lines.push(`  … and ${reasons.length - 10} more reasons (${reasons.slice(10).reduce((n, r) => n + r.count, 0)} groups)`);
  }
  return lines.join("\n") + "\n";
}
