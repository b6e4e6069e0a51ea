import { percentile } from "../observability/latency-window.js";
import type { MetricsRegistry } from "../observability/metrics.js";
import type { ToolErrorRecord } from "../agent/agent-loop.js";
import { toolLatencyTable, type ToolLatencyRow } from "../report/tool-stats.js";
import type { GroupOutcome, TrajectoryOutcome } from "./scored-group.js";

/** Tool errors kept for the summary (the count goes on past it). */
const TOOL_ERRORS_KEPT = 1000;

/** Running totals of a run, for the progress bar and the summary table. */
export class RunStats {
  groups = 0;
  failedGroups = 0;
  /** Groups collected but not delivered (same scores, token length, size mismatch). */
  filteredGroups = 0;
  /** Groups delivered: sent to the trainer (serve) or written (process). */
  sentGroups = 0;
  trajectories = 0;
  /** Trajectories with a positive score. */
  solved = 0;
  scoreSum = 0;
  toolCalls = 0;
  toolErrors = 0;
  slotLosses = 0;
  retries = 0;
  rewardErrors = 0;
  rewardSkipped = 0;
  /** Model turns that came with token ids, and those whose prompt could not extend the sequence. */
  tokenTurns = 0;
  prefixBreaks = 0;
  /** Trajectories whose every sample is token-exact. */
  tokenExactTrajectories = 0;
  /** Serve mode: broken-off segments kept out of groups (Atropos takes exactly group_size sequences). */
  unsentSegments = 0;
  readonly failures: string[] = [];
  /** The first tool errors, in the order their trajectories finished. */
  readonly toolErrorLog: ToolErrorRecord[] = [];
  private readonly latencies: number[] = [];
  private readonly calls: Array<{ tool: string; success: boolean; durationMs: number }> = [];
  /** Per trajectory: workspace preparation time (template + setupWorkspace), ms. */
  readonly workspaceSetupMs: number[] = [];
  readonly startedAt = Date.now();

  addGroup(outcome: GroupOutcome): void {
    this.groups++;
    if (!outcome.ok) {
      this.failedGroups++;
      this.failures.push(outcome.reason);
      this.slotLosses += outcome.unfinished.slotLosses;
      this.retries += outcome.unfinished.retries;
    }
    for (const t of outcome.trajectories) this.addTrajectory(t);
  }

  /** One trajectory outside a group (evaluation). */
  addTrajectory(t: TrajectoryOutcome): void {
    this.trajectories++;
    this.scoreSum += t.score;
    if (t.score > 0) this.solved++;
    this.toolCalls += t.result.toolCalls.length;
    this.toolErrors += t.result.toolErrors.length;
    this.slotLosses += t.slotLosses.length;
    this.retries += t.attempts - 1;
    if (t.rewardError) this.rewardErrors++;
    if (t.rewardSkipped) this.rewardSkipped++;
    for (const c of t.result.toolCalls) {
      this.latencies.push(c.durationMs);
      this.calls.push({ tool: c.tool, success: c.success, durationMs: c.durationMs });
    }
    for (const e of t.result.toolErrors) if (this.toolErrorLog.length < TOOL_ERRORS_KEPT) this.toolErrorLog.push(e);
    if (t.workspaceSetupMs !== undefined) this.workspaceSetupMs.push(t.workspaceSetupMs);
    const withIds = t.result.turns.filter((r) => r.tokens?.promptTokenIds);
    this.tokenTurns += withIds.length;
    this.prefixBreaks += t.brokenSegments?.length ?? 0;
    if (t.tokens?.tokenExact && (t.brokenSegments ?? []).every((s) => s.tokenExact)) this.tokenExactTrajectories++;
  }

  /** Breaks per model turn with token ids (0 when no turn had ids). */
  get prefixBreakRate(): number {
    return this.tokenTurns ? this.prefixBreaks / this.tokenTurns : 0;
  }

  /** Exposes the token figures as Prometheus gauges, read at scrape time. */
  registerMetrics(registry: MetricsRegistry): void {
    registry.gauge("slotpool_env_token_turns", "Model turns that came with token ids", () => [{ value: this.tokenTurns }]);
    registry.gauge("slotpool_env_prefix_breaks", "Turns whose prompt could not extend the trajectory's token sequence (a new segment started)", () => [{ value: this.prefixBreaks }]);
    registry.gauge("slotpool_env_prefix_break_rate", "Prefix breaks per model turn with token ids", () => [{ value: this.prefixBreakRate }]);
    registry.gauge("slotpool_env_token_exact_trajectories", "Trajectories whose every trained id is as sampled", () => [{ value: this.tokenExactTrajectories }]);
  }

  get meanScore(): number {
    return this.trajectories ? this.scoreSum / this.trajectories : 0;
  }

  get successRate(): number {
    return this.trajectories ? this.solved / this.trajectories : 0;
  }

  latencyPercentile(p: number, of: readonly number[] = this.latencies): number {
    if (of.length === 0) return 0;
    return percentile([...of].sort((a, b) => a - b), p / 100);
  }

  /** Calls, errors and latency per tool, slowest first. */
  toolTable(): ToolLatencyRow[] {
    return toolLatencyTable(this.calls);
  }

  toJSON() {
    return {
      groups: this.groups,
      failed_groups: this.failedGroups,
      filtered_groups: this.filteredGroups,
      sent_groups: this.sentGroups,
      trajectories: this.trajectories,
      success_rate: this.successRate,
      mean_score: this.meanScore,
      tool_calls: this.toolCalls,
      tool_errors: this.toolErrors,
      tool_latency_p50_ms: this.latencyPercentile(50),
      tool_latency_p99_ms: this.latencyPercentile(99),
      workspace_setup_p50_ms: this.latencyPercentile(50, this.workspaceSetupMs),
      workspace_setup_p99_ms: this.latencyPercentile(99, this.workspaceSetupMs),
      slot_losses: this.slotLosses,
      retries: this.retries,
      reward_errors: this.rewardErrors,
      reward_skipped: this.rewardSkipped,
      token_turns: this.tokenTurns,
      prefix_breaks: this.prefixBreaks,
      prefix_break_rate: this.prefixBreakRate,
      token_exact_trajectories: this.tokenExactTrajectories,
      unsent_segments: this.unsentSegments,
      elapsed_s: (Date.now() - this.startedAt) / 1000,
    };
  }
}
