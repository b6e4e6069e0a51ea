import { percentile } from "../observability/latency-window.js";
import type { MetricsRegistry } from "../observability/metrics.js";
import type { ToolErrorRecord } from "../agent/agent-loop.js";
import type { ChatCallSummary } from "../agent/chat-client.js";
import { toolLatencyTable, type ToolLatencyRow } from "../report/tool-stats.js";
import type { GroupOutcome, TrajectoryOutcome } from "./scored-group.js";
import type { GroupInterruption } from "./interruption.js";
import { INFRA_CAUSES, INFRA_STAGES, countByCause, countByStage, type FailedTrajectory, type InfraCause, type InfraFailure, type InfraStage } from "./infra-failure.js";
import type { ImagesUsed, IsolationSummary } from "./isolation.js";
import { formatTally, tallyMetrics, type MetricTally } from "./metrics.js";

/** The model client's counts over a run (ChatCompletionsClient.summary()). */
export type ModelCallStats = ChatCallSummary;

/** Tool errors kept for the summary (the count goes on past it). */
const TOOL_ERRORS_KEPT = 1000;

/** Running totals of a run, for the progress bar and the summary table. */
export class RunStats {
  groups = 0;
  /** Groups not delivered because a trajectory failed: infra failures (dropped) and other errors. */
  failedGroups = 0;
  /** Of failedGroups: dropped for infrastructure failures (after their item's retries). */
  droppedGroups = 0;
  /** Trajectories left out of their group under infraFailurePolicy "mask". */
  maskedTrajectories = 0;
  /** Infrastructure failures, each a trajectory that was not scored, by cause. */
  readonly infraFailures: Record<InfraCause, number> = countByCause([]);
  /** The same failures by where they happened (setupWorkspace, the agent's tool calls, the reward), where known. */
  readonly infraFailuresByStage: Record<InfraStage, number> = countByStage([]);
  /** What the run's slots were isolated by (from the sandbox servers' /health), once known. */
  isolation: IsolationSummary | undefined;
  /** Why the run stopped early (interrupted, infraFailurePolicy "fail"), if it did. */
  stoppedEarly: string | undefined;
  /** A trajectory counts as solved when its score is at least this. */
  readonly successThreshold: number;
  private readonly scores: number[] = [];
  /** Groups collected but not delivered (same scores, token length, size mismatch). */
  filteredGroups = 0;
  /** Groups delivered: sent to the trainer (serve) or written (process). */
  sentGroups = 0;
  /** Trajectories written (process), sent (serve) or evaluated (evaluate): the headline figures count these only. */
  trajectories = 0;
  /** Trajectories that finished but were not written: in failed or filtered groups. */
  unwrittenTrajectories = 0;
  /** Tries of a group dropped for an infra failure (its item then tried again, or the group dropped), by the cause of its first failure. */
  droppedAttempts = 0;
  readonly droppedAttemptCauses: Record<InfraCause, number> = countByCause([]);
  /** Written trajectories without token ids (empty tokens and masks: good for SFT, not for RL). */
  trajectoriesWithoutTokens = 0;
  /** Where the model client's figures come from (set by the run mode). */
  modelSource: (() => ModelCallStats | undefined) | undefined;
  /** The task images the run's slots ran (the summary's isolation rows), asked when the summary is written. */
  imagesSource: (() => ImagesUsed | undefined) | undefined;
  /** Written trajectories with a score ≥ successThreshold. */
  solved = 0;
  scoreSum = 0;
  toolCalls = 0;
  /** Tool calls the run's signal ended (or left running) in the trajectories it cut. */
  toolCallsCut = 0;
  /** Groups and trajectories the run's signal cut before they finished (never written). */
  interruptedGroups = 0;
  interruptedTrajectories = 0;
  toolErrors = 0;
  slotLosses = 0;
  /** Trajectory restarts after a slot loss (not model call retries: see modelCalls). */
  retries = 0;
  /** Model turns that came with token ids, and those whose prompt could not extend the sequence. */
  tokenTurns = 0;
  prefixBreaks = 0;
  /** Trajectories whose every sample is token-exact. */
  tokenExactTrajectories = 0;
  /** Serve mode: broken-off segments kept out of groups (Atropos takes exactly group_size sequences). */
  unsentSegments = 0;
  readonly failures: string[] = [];
  /** Unscored trajectories recorded in the run's sidecar (`<out>.failed.jsonl`), and its path. */
  failedTrajectories = 0;
  failedSidecar: string | undefined;
  /** Where the env's code threw (a reward or hook): each distinct stack, with how often (stacks that differ only below the env's frames are one). */
  readonly failureStacks = new Map<string, number>();
  private readonly stackKeys = new Map<string, string>();
  /** The first tool errors, in the order their trajectories finished. */
  readonly toolErrorLog: ToolErrorRecord[] = [];
  private readonly latencies: number[] = [];
  private readonly calls: Array<{ tool: string; success: boolean; durationMs: number }> = [];
  /** Per trajectory: workspace preparation time (template + setupWorkspace), ms. */
  readonly workspaceSetupMs: number[] = [];
  readonly startedAt = Date.now();
  /** The env's custom metrics over the scored trajectories, and over the delivered groups, by name. */
  readonly trajectoryMetrics = new Map<string, MetricTally>();
  readonly groupMetrics = new Map<string, MetricTally>();

  /** What a delivered trajectory is called in the summary: written (process), sent (serve), evaluated. */
  delivered: "written" | "sent" | "evaluated" = "written";

  constructor(options: { successThreshold?: number } = {}) {
    this.successThreshold = options.successThreshold ?? 1.0;
  }

  /**
   * A group as it came back: made, failed or not, with its infra failures, dropped attempts
   * and the work its trajectories did (tool calls, slot losses). Its scores are not counted
   * here: only what is written or sent is (addDelivered), so the headline figures match the
   * JSONL.
   */
  addGroup(outcome: GroupOutcome): void {
    this.groups++;
    for (const f of outcome.infraFailures) this.addInfraFailure(f);
    const dropped = outcome.droppedAttemptCauses ?? [];
    this.droppedAttempts += dropped.length;
    for (const c of dropped) this.droppedAttemptCauses[c]++;
    if (!outcome.ok) {
      this.failedGroups++;
      if (outcome.kind === "infra") this.droppedGroups++;
      this.failures.push(outcome.reason);
      this.slotLosses += outcome.unfinished.slotLosses;
      this.retries += outcome.unfinished.retries;
      this.unwrittenTrajectories += outcome.trajectories.length;
    } else {
      this.maskedTrajectories += outcome.masked;
    }
    for (const t of outcome.trajectories) this.addRun(t);
    // Every call that ran: also those of dropped tries and of trajectories that failed.
    this.toolCalls += outcome.unscoredToolCalls ?? 0;
  }

  /**
   * A group the run's signal cut: its infra failures and dropped tries count, and so does the
   * work of its trajectories, finished or cut (nothing of it is written).
   */
  addInterrupted(i: GroupInterruption): void {
    this.interruptedGroups++;
    for (const f of i.infraFailures) this.addInfraFailure(f);
    this.droppedAttempts += i.droppedAttemptCauses.length;
    for (const c of i.droppedAttemptCauses) this.droppedAttemptCauses[c]++;
    for (const t of i.finished) this.addRun(t);
    this.unwrittenTrajectories += i.finished.length;
    this.interruptedTrajectories += i.cut;
    this.toolCalls += i.toolCallsRan;
    this.toolCallsCut += i.toolCallsCut;
  }

  /** Unscored trajectories written to the sidecar: counted, and the stacks of the env's code that threw kept (the first 20 distinct ones). */
  addFailedTrajectories(failed: readonly FailedTrajectory[]): void {
    this.failedTrajectories += failed.length;
    for (const f of failed) {
      if (!f.stack) continue;
      // The message and the env's own frames say where; slotpool's async frames below them vary.
      const key = f.stack.split("\n    … then ")[0]!;
      const shown = this.stackKeys.get(key);
      if (shown !== undefined) this.failureStacks.set(shown, this.failureStacks.get(shown)! + 1);
      else if (this.failureStacks.size < 20) {
        this.stackKeys.set(key, f.stack);
        this.failureStacks.set(f.stack, 1);
      }
    }
  }

  /** A made group that is not delivered (same scores, size, token length, refused by the trainer). */
  addFiltered(outcome: GroupOutcome): void {
    this.filteredGroups++;
    this.unwrittenTrajectories += outcome.trajectories.length;
  }

  /** A group written (process) or sent (serve): its trajectories' scores and metrics count. */
  addDelivered(outcome: GroupOutcome): void {
    if (!outcome.ok) return;
    this.sentGroups++;
    tallyMetrics(this.groupMetrics, outcome.metrics);
    for (const t of outcome.trajectories) if (!t.infraFailure) this.addScored(t);
  }

  /** One infrastructure failure (a trajectory with no score). */
  addInfraFailure(f: InfraFailure): void {
    this.infraFailures[f.cause]++;
    if (f.stage) this.infraFailuresByStage[f.stage]++;
  }

  get infraFailureCount(): number {
    return INFRA_CAUSES.reduce((n, c) => n + this.infraFailures[c], 0);
  }

  /**
   * One trajectory outside a group (evaluation, where every scored sample is written). An
   * infra failure counts by its cause only: it has no score, so it is neither a low score
   * nor a success.
   */
  addTrajectory(t: TrajectoryOutcome): void {
    if (t.infraFailure) {
      this.addInfraFailure(t.infraFailure);
      return;
    }
    this.addRun(t);
    this.addScored(t);
  }

  /** The work a finished trajectory did, written or not: tool calls, latency, slot losses, restarts, token turns. */
  private addRun(t: TrajectoryOutcome): void {
    this.toolCalls += t.result.toolCalls.length;
    this.toolErrors += t.result.toolErrors.length;
    this.slotLosses += t.slotLosses.length;
    this.retries += t.attempts - 1;
    for (const c of t.result.toolCalls) {
      this.latencies.push(c.durationMs);
      this.calls.push({ tool: c.tool, success: c.success, durationMs: c.durationMs });
    }
    for (const e of t.result.toolErrors) if (this.toolErrorLog.length < TOOL_ERRORS_KEPT) this.toolErrorLog.push(e);
    if (t.workspaceSetupMs !== undefined) this.workspaceSetupMs.push(t.workspaceSetupMs);
    const withIds = t.result.turns.filter((r) => r.tokens?.promptTokenIds);
    this.tokenTurns += withIds.length;
    this.prefixBreaks += t.brokenSegments?.length ?? 0;
  }

  /** A written (or sent) trajectory's score: the headline figures. */
  private addScored(t: TrajectoryOutcome): void {
    this.trajectories++;
    this.scoreSum += t.score;
    this.scores.push(t.score);
    if (t.score >= this.successThreshold) this.solved++;
    tallyMetrics(this.trajectoryMetrics, t.metrics);
    if (t.tokens === null) this.trajectoriesWithoutTokens++;
    if (t.tokens?.tokenExact && (t.brokenSegments ?? []).every((s) => s.tokenExact)) this.tokenExactTrajectories++;
  }

  /** The model client's figures (retried and failed calls, latency), when the run has a model. */
  get modelCalls(): ModelCallStats | undefined {
    return this.modelSource?.();
  }

  /** Breaks per model turn with token ids (0 when no turn had ids). */
  get prefixBreakRate(): number {
    return this.tokenTurns ? this.prefixBreaks / this.tokenTurns : 0;
  }

  /**
   * The scores' distribution, for the summary: each distinct score with its count when
   * there are few (rewards are often 0/1 or a handful of partial credits), else quartiles.
   */
  scoreDistribution(): string {
    if (this.scores.length === 0) return "no scored trajectories";
    const counts = new Map<number, number>();
    for (const s of this.scores) counts.set(s, (counts.get(s) ?? 0) + 1);
    if (counts.size <= 6) {
      return [...counts.entries()]
        .sort((a, b) => a[0] - b[0])
        .map(([v, n]) => `${formatScore(v)}: ${n}`)
        .join(" · ");
    }
    const sorted = [...this.scores].sort((a, b) => a - b);
    const q = (p: number) => formatScore(percentile(sorted, p));
    return `min ${q(0)} · p25 ${q(0.25)} · median ${q(0.5)} · p75 ${q(0.75)} · max ${q(1)}`;
  }

  /** Exposes the run's figures as Prometheus gauges, read at scrape time. */
  registerMetrics(registry: MetricsRegistry): void {
    registry.gauge("slotpool_env_infra_failures", `Trajectories not scored because of an infrastructure failure, by cause (${INFRA_CAUSES.join(", ")})`, () =>
      INFRA_CAUSES.map((cause) => ({ labels: { cause }, value: this.infraFailures[cause] })),
    );
    registry.gauge("slotpool_env_infra_failures_by_stage", `The same failures by where they happened (${INFRA_STAGES.join(", ")}), where known`, () =>
      INFRA_STAGES.map((stage) => ({ labels: { stage }, value: this.infraFailuresByStage[stage] })),
    );
    registry.gauge("slotpool_env_groups", "Groups by outcome: delivered (written or sent), filtered, dropped (infra failures), failed (other errors)", () => [
      { labels: { outcome: "delivered" }, value: this.sentGroups },
      { labels: { outcome: "filtered" }, value: this.filteredGroups },
      { labels: { outcome: "dropped" }, value: this.droppedGroups },
      { labels: { outcome: "failed" }, value: this.failedGroups - this.droppedGroups },
    ]);
    registry.gauge("slotpool_env_scored_trajectories", "Trajectories written (process) or sent (serve) with their score; failed and filtered groups' trajectories excluded", () => [{ value: this.trajectories }]);
    registry.gauge("slotpool_env_unwritten_trajectories", "Trajectories that finished in a failed or filtered group, so were not written or sent", () => [{ value: this.unwrittenTrajectories }]);
    registry.gauge("slotpool_env_solved_trajectories", "Written or sent trajectories with a score at or above successThreshold", () => [{ value: this.solved }]);
    registry.gauge("slotpool_env_mean_score", "Mean score of the written or sent trajectories", () => [{ value: this.meanScore }]);
    registry.gauge("slotpool_env_dropped_group_attempts", "Tries of a group dropped for an infrastructure failure, by the cause of its first failure", () =>
      INFRA_CAUSES.map((cause) => ({ labels: { cause }, value: this.droppedAttemptCauses[cause] })),
    );
    registry.gauge("slotpool_env_trajectory_restarts", "Trajectories restarted on a new slot after a slot loss", () => [{ value: this.retries }]);
    registry.gauge("slotpool_env_model_calls", "Model calls by outcome: completed, retried (needed at least one retry), failed (gave up)", () => {
      const m = this.modelCalls;
      return m ? [{ labels: { outcome: "completed" }, value: m.completed }, { labels: { outcome: "retried" }, value: m.retriedCalls }, { labels: { outcome: "failed" }, value: m.failed }] : [];
    });
    registry.gauge("slotpool_env_model_latency_ms", "Latency of completed model calls, retries included (quantile 0.5 and 0.99 of the last 4096), ms", () => {
      const m = this.modelCalls;
      return m ? [{ labels: { quantile: "0.5" }, value: m.latencyP50Ms }, { labels: { quantile: "0.99" }, value: m.latencyP99Ms }] : [];
    });
    registry.gauge("slotpool_env_token_turns", "Model turns that came with token ids", () => [{ value: this.tokenTurns }]);
    registry.gauge("slotpool_env_prefix_breaks", "Turns whose prompt could not extend the trajectory's token sequence (a new segment started)", () => [{ value: this.prefixBreaks }]);
    registry.gauge("slotpool_env_prefix_break_rate", "Prefix breaks per model turn with token ids", () => [{ value: this.prefixBreakRate }]);
    registry.gauge("slotpool_env_metric_mean", "The env's custom metrics: mean over scored trajectories (per=trajectory) or delivered groups (per=group), by name", () => [
      ...[...this.trajectoryMetrics].map(([name, t]) => ({ labels: { name, per: "trajectory" }, value: t.sum / t.count })),
      ...[...this.groupMetrics].map(([name, t]) => ({ labels: { name, per: "group" }, value: t.sum / t.count })),
    ]);
    registry.gauge("slotpool_env_token_exact_trajectories", "Trajectories whose every trained id is as sampled", () => [{ value: this.tokenExactTrajectories }]);
  }

  get meanScore(): number {
    return this.trajectories ? this.scoreSum / this.trajectories : 0;
  }

  get successRate(): number {
    return this.trajectories ? this.solved / this.trajectories : 0;
  }

  /** Tool calls with a duration (the latency figures are n/a without one). */
  get timedToolCalls(): number {
    return this.latencies.length;
  }

  latencyPercentile(p: number, of: readonly number[] = this.latencies): number {
    if (of.length === 0) return 0;
    return percentile([...of].sort((a, b) => a - b), p / 100);
  }

  /** Calls, errors and latency per tool, slowest first. */
  toolTable(): ToolLatencyRow[] {
    return toolLatencyTable(this.calls);
  }

  /** Summary rows of the env's metrics: `metric NAME` per trajectory, `group metric NAME` per group. */
  metricRows(): Array<[string, string]> {
    return [
      ...[...this.trajectoryMetrics].map(([name, t]): [string, string] => [`metric ${name}`, formatTally(t, "trajectory")]),
      ...[...this.groupMetrics].map(([name, t]): [string, string] => [`group metric ${name}`, formatTally(t, "group")]),
    ];
  }

  toJSON() {
    return {
      groups: this.groups,
      failed_groups: this.failedGroups,
      filtered_groups: this.filteredGroups,
      sent_groups: this.sentGroups,
      trajectories: this.trajectories,
      success_rate: this.successRate,
      success_threshold: this.successThreshold,
      mean_score: this.meanScore,
      dropped_groups: this.droppedGroups,
      masked_trajectories: this.maskedTrajectories,
      infra_failures: { ...this.infraFailures },
      infra_failures_by_stage: { ...this.infraFailuresByStage },
      tool_calls: this.toolCalls,
      tool_errors: this.toolErrors,
      tool_latency_p50_ms: this.latencyPercentile(50),
      tool_latency_p99_ms: this.latencyPercentile(99),
      workspace_setup_p50_ms: this.latencyPercentile(50, this.workspaceSetupMs),
      workspace_setup_p99_ms: this.latencyPercentile(99, this.workspaceSetupMs),
      unwritten_trajectories: this.unwrittenTrajectories,
      dropped_attempts: this.droppedAttempts,
      dropped_attempt_causes: { ...this.droppedAttemptCauses },
      trajectories_without_tokens: this.trajectoriesWithoutTokens,
      model_calls: this.modelCalls ?? null,
      slot_losses: this.slotLosses,
      trajectory_restarts: this.retries,
      token_turns: this.tokenTurns,
      prefix_breaks: this.prefixBreaks,
      prefix_break_rate: this.prefixBreakRate,
      token_exact_trajectories: this.tokenExactTrajectories,
      unsent_segments: this.unsentSegments,
      metrics: Object.fromEntries([...this.trajectoryMetrics].map(([n, t]) => [n, { mean: t.sum / t.count, min: t.min, max: t.max, count: t.count }])),
      group_metrics: Object.fromEntries([...this.groupMetrics].map(([n, t]) => [n, { mean: t.sum / t.count, min: t.min, max: t.max, count: t.count }])),
      elapsed_s: (Date.now() - this.startedAt) / 1000,
    };
  }
}

function formatScore(v: number): string {
  return Number.isInteger(v) ? String(v) : v.toFixed(3).replace(/0+$/, "");
}
