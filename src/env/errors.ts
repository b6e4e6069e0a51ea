import { SlotpoolError } from "../protocol/errors.js";
import type { ToolInfraCause } from "../protocol/infra.js";

/** Errors of the env layer. Each message says what happened and what to change. */

export class EnvError extends SlotpoolError {
  override name = "EnvError";
}

/** The config failed validation; the message names every offending field. */
export class EnvConfigError extends EnvError {
  override name = "EnvConfigError";
}

/** A trajectory could not finish: its slot was lost more often than `slotLossRetries` allows, or setup failed. */
export class TrajectoryFailedError extends EnvError {
  override name = "TrajectoryFailedError";
  constructor(
    message: string,
    readonly attempts: number,
    options?: { cause?: unknown },
    /** Set when the failure is the infrastructure's (slots kept being lost), not the env's. */
    readonly slotLost = false,
  ) {
    super(message, options);
  }
}

/** No way to produce assistant turns: neither a model URL nor an oracle policy. */
export class NoPolicyError extends EnvError {
  override name = "NoPolicyError";
}

/** Token ids were needed (serve mode) but the model server returned none and no tokenizer was given. */
export class TokensUnavailableError extends EnvError {
  override name = "TokensUnavailableError";
}

/** Serve mode: trajectories whose ids are not token-exact would reach a trainer without the user's say-so. */
export class TokensInexactError extends EnvError {
  override name = "TokensInexactError";
}

/**
 * A ToolContext call (in `setupWorkspace` or the reward) could not do what it was asked:
 * the tool failed, or the executor could not run it. Thrown instead of a `success: false`
 * result that a reward could mistake for the agent's outcome; a reward that meets it is an
 * infrastructure failure, not a score.
 */
export class ToolContextError extends EnvError {
  override name = "ToolContextError";
  constructor(
    message: string,
    readonly tool: string,
    readonly path?: string,
    options?: { cause?: unknown; code?: string },
  ) {
    super(message, options);
  }
}

/**
 * A ToolContext call the infrastructure could not run or cut off (its result carried the
 * infra marker, protocol/infra.ts): the command never got a fair run, so what the env was
 * doing (setup, reward) becomes an infra failure of cause `infraCause`, never a score.
 */
export class ToolContextInfraError extends ToolContextError {
  override name = "ToolContextInfraError";
  constructor(
    message: string,
    tool: string,
    readonly infraCause: ToolInfraCause,
  ) {
    super(message, tool);
  }
}

/** The sandbox refused a path: the message names the rule ("paths must be inside /workspace"). */
export class PathRefusedError extends ToolContextError {
  override name = "PathRefusedError";
}
