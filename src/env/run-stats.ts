import type { GroupOutcome, TrajectoryOutcome } from "./scored-group.js";

/** Running totals of a run, for the progress bar and the summary table. */
export class RunStats {
  groups = 0;
  failedGroups = 0;
  /** Groups collected but not delivered (same scores, token length, size mismatch). */
  filteredGroups = 0;
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
  readonly failures: string[] = [];
  private readonly latencies: number[] = [];
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
    for (const c of t.result.toolCalls) this.latencies.push(c.durationMs);
    if (t.workspaceSetupMs !== undefined) this.workspaceSetupMs.push(t.workspaceSetupMs);
  }

  get meanScore(): number {
    return this.trajectories ? this.scoreSum / this.trajectories : 0;
  }

  get successRate(): number {
    return this.trajectories ? this.solved / this.trajectories : 0;
  }

  latencyPercentile(p: number, of: readonly number[] = this.latencies): number {
    if (of.length === 0) return 0;
    const sorted = [...of].sort((a, b) => a - b);
    const idx = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
    return sorted[idx]!;
  }

  toJSON() {
    return {
      groups: this.groups,
      failed_groups: this.failedGroups,
      filtered_groups: this.filteredGroups,
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
      elapsed_s: (Date.now() - this.startedAt) / 1000,
    };
  }
}
