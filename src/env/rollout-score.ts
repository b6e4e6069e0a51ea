import type { AgentResult } from "../agent/agent-loop.js";
import type { Logger } from "../observability/logger.js";
import { isSlotLostError } from "../pool/errors.js";
import { ToolContextError } from "./errors.js";
import { infraFailureOf, type InfraFailure } from "./infra-failure.js";
import { metricsProblem, type Metrics } from "./metrics.js";
import { envFramesFirst } from "./env-stack.js";

/**
 * What `computeReward` may return instead of a bare number (and what `verifyAndScore`
 * returns): the score, anything worth keeping about how it was reached, and the env's own
 * metrics of the trajectory (names to finite numbers, for the summary, JSONL and report).
 */
export interface ScoreResult {
  score: number;
  metadata?: Record<string, unknown>;
  metrics?: Metrics;
}

export interface RolloutScore {
  score: number;
  rewardError?: string;
  scoreMetadata: Record<string, unknown>;
  metrics?: Metrics;
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
  reward: () => Promise<ScoreResult>,
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
    // A bad metric is the reward code's bug, as a NaN score is: the trajectory is not scored.
    const problem = scored.metrics === undefined ? undefined : metricsProblem(scored.metrics);
    if (problem) return { score: 0, rewardError: problem, scoreMetadata: {}, infraFailure: { cause: "reward", message: problem, trajectoryId } };
    const out: RolloutScore = { score: scored.score, scoreMetadata: scored.metadata ?? {} };
    if (scored.metrics && Object.keys(scored.metrics).length > 0) out.metrics = { ...scored.metrics };
    return out;
  } catch (err) {
    if (isSlotLostError(err)) throw err;
    const message = err instanceof Error ? err.message : String(err);
    // A tool call the infrastructure cut off counts under its own cause (sandbox_start, ...).
    const infra = infraFailureOf(err, "reward", trajectoryId);
    if (infra) {
      log.warn({ trajectoryId, cause: infra.cause }, "a tool call of the reward was cut off by the infrastructure; the trajectory is not scored");
      return { score: 0, rewardError: message, scoreMetadata: {}, infraFailure: infra };
    }
    const cause = err instanceof ToolContextError ? "reward_tool" : "reward";
    const stack = envFramesFirst(err);
    log.warn({ trajectoryId, cause, err: message, ...(stack ? { stack } : {}) }, "the reward failed; the trajectory is not scored");
    return { score: 0, rewardError: message, scoreMetadata: {}, infraFailure: { cause, message, trajectoryId, stage: "reward", ...(stack ? { stack } : {}) } };
  }
}
