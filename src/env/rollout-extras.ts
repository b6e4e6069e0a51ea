import { ROLLOUT_EXTRAS_VERSION, type LineExtras, type RolloutExtras } from "../report/rollout-extras.js";
import { countByCause, type InfraFailure } from "./infra-failure.js";
import type { Metrics } from "./metrics.js";
import type { TrajectoryOutcome } from "./scored-group.js";

const ARGUMENTS_KEPT = 500;

/**
 * The `slotpool` key of a JSONL line: what the report needs that the messages do not say,
 * the group's infra failures by cause (never among its scores), and a branching group's tree.
 */
export function lineExtras(trajectories: readonly TrajectoryOutcome[], group?: { infraFailures: readonly InfraFailure[]; masked: number; droppedAttempts: number; metrics?: Metrics }): LineExtras {
  const out: LineExtras = { version: ROLLOUT_EXTRAS_VERSION, trajectories: trajectories.map(rolloutExtras) };
  const tree = trajectories.find((t) => t.branchTree)?.branchTree;
  if (tree) out.tree = tree;
  if (group) {
    out.infra_failures = countByCause(group.infraFailures);
    out.masked = group.masked;
    out.dropped_attempts = group.droppedAttempts;
    if (group.metrics) out.metrics = group.metrics;
  }
  return out;
}

export function rolloutExtras(t: TrajectoryOutcome): RolloutExtras {
  const r = t.result;
  const out: RolloutExtras = {
    trajectory_id: t.trajectoryId,
    finish_reason: r.finishReason,
    turns_used: r.turnsUsed,
    attempts: t.attempts,
    slot_losses: t.slotLosses,
    reward_skipped: t.rewardSkipped,
    tool_calls: r.toolCalls.map((c) => ({
      turn: c.turn,
      tool: c.tool,
      ...(c.callId !== undefined ? { call_id: c.callId } : {}),
      duration_ms: Math.round(c.durationMs * 10) / 10,
      success: c.success,
      ...(c.exitCode !== undefined ? { exit_code: c.exitCode } : {}),
    })),
    tool_errors: r.toolErrors.map((e) => ({ turn: e.turn, tool: e.tool, arguments: e.arguments.slice(0, ARGUMENTS_KEPT), error: e.error })),
  };
  if (t.durationMs !== undefined) out.duration_ms = Math.round(t.durationMs);
  if (t.rewardError !== undefined) out.reward_error = t.rewardError;
  if (r.error !== undefined) out.error = r.error;
  if (Object.keys(t.scoreMetadata).length > 0) out.score_metadata = t.scoreMetadata;
  if (t.metrics) out.metrics = t.metrics;
  if (t.ownScore !== undefined) out.own_score = t.ownScore;
  if (t.rewardCalls && t.rewardCalls.length > 0) out.reward_calls = t.rewardCalls;
  return out;
}
