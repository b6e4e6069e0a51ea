import type { AgentResult } from "../agent/agent-loop.js";
import type { Logger } from "../observability/logger.js";
import { isSlotLostError } from "../pool/errors.js";
import { ToolContextError } from "./errors.js";
import type { InfraFailure } from "./infra-failure.js";

export interface RolloutScore {
  score: number;
  rewardError?: string;
  scoreMetadata: Record<string, unknown>;
  infraFailure?: InfraFailure;
}

/**
 * The reward of a finished rollout, or the infra failure that means it has none: the model
 * server failed (the rollout is not the model's answer), or the reward code or one of its
 * tool calls failed (the score would be a guess). A lost slot propagates so the trajectory is
 * restarted. One rule for plain and branching groups.
 */
export async function scoreRollout(
  result: AgentResult,
  trajectoryId: string,
  reward: () => Promise<{ score: number; metadata?: Record<string, unknown> }>,
  log: Logger,
): Promise<RolloutScore> {
  if (result.finishReason === "error") {
    const message = `the model server failed on turn ${result.turnsUsed + 1}: ${result.error ?? "no reason given"}`;
    log.warn({ trajectoryId, turns: result.turnsUsed, error: result.error }, "model call failed; the trajectory is not scored");
    return { score: 0, scoreMetadata: {}, infraFailure: { cause: "model", message, trajectoryId } };
  }
  try {
    const scored = await reward();
    if (!Number.isFinite(scored.score)) {
      // NaN/Infinity would reach the trainer as null (422) or poison its statistics.
      const message = `reward is ${scored.score}, not a finite number`;
      return { score: 0, rewardError: message, scoreMetadata: {}, infraFailure: { cause: "reward", message, trajectoryId } };
    }
    return { score: scored.score, scoreMetadata: scored.metadata ?? {} };
  } catch (err) {
    if (isSlotLostError(err)) throw err;
    const message = err instanceof Error ? err.message : String(err);
    const cause = err instanceof ToolContextError ? "reward_tool" : "reward";
    log.warn({ trajectoryId, cause, err: message }, "the reward failed; the trajectory is not scored");
    return { score: 0, rewardError: message, scoreMetadata: {}, infraFailure: { cause, message, trajectoryId } };
  }
}
