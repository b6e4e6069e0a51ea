import { SlotpoolError } from "../protocol/errors.js";

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
