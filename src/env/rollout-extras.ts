import { ROLLOUT_EXTRAS_VERSION, type LineExtras, type RolloutExtras } from "../report/rollout-extras.js";
import type { TrajectoryOutcome } from "./scored-group.js";

const ARGUMENTS_KEPT = 500;

/** The `slotpool` key of a JSONL line: what the report needs that the messages do not say. */
export function lineExtras(trajectories: readonly TrajectoryOutcome[]): LineExtras {
  const tree = trajectories.find((t) => t.branchTree)?.branchTree;
  return { version: ROLLOUT_EXTRAS_VERSION, trajectories: trajectories.map(rolloutExtras), ...(tree ? { tree } : {}) };
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
  return out;
}
