import { SlotpoolError } from "../protocol/errors.js";

/**
 * The error codes of OpenEnv's WebSocket error frames (`WSErrorCode` in OpenEnv's
 * `env_server/types.py`): the `code` of every error this room answers a client with.
 */
export const WS_ERROR_CODES = ["INVALID_JSON", "UNKNOWN_TYPE", "VALIDATION_ERROR", "EXECUTION_ERROR", "CAPACITY_REACHED", "FACTORY_ERROR", "SESSION_ERROR"] as const;
export type WsErrorCode = (typeof WS_ERROR_CODES)[number];

/** An error a client of the OpenEnv server gets as `{"type":"error","data":{message, code}}`. */
export class OpenEnvError extends SlotpoolError {
  override name = "OpenEnvError";
  constructor(
    readonly wireCode: WsErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** One problem of a refused message, laid out as pydantic's `errors()` entries (OpenEnv's VALIDATION_ERROR frames carry them). */
export interface ValidationIssue {
  type: string;
  loc: Array<string | number>;
  msg: string;
}

/** A message that is not what the protocol allows (bad shape, missing field, wrong type). */
export class ActionValidationError extends OpenEnvError {
  override name = "ActionValidationError";
  constructor(
    message: string,
    /** Every problem found, for programs (the message names the first). */
    readonly issues: ValidationIssue[] = [],
  ) {
    super("VALIDATION_ERROR", message);
  }
}

/** A step, state change or tool call needs a running episode and the session has none. */
export class NoEpisodeError extends OpenEnvError {
  override name = "NoEpisodeError";
  constructor(message: string) {
    super("SESSION_ERROR", message);
  }
}

/** No slot became free within the pool's acquire timeout: the server is at capacity. */
export class CapacityReachedError extends OpenEnvError {
  override name = "CapacityReachedError";
  constructor(
    readonly waitedMs: number,
    detail: string,
    /** Slots held by episodes when the reset gave up, and the slots the pool had (OpenEnv's active_sessions / max_sessions). */
    readonly activeSessions?: number,
    readonly maxSessions?: number,
  ) {
    super("CAPACITY_REACHED", `no slot became free within ${waitedMs} ms: every slot of the pool is held by another episode. Retry the reset later, close idle sessions, or start the server with more slots (--slots-per-container, --max-containers). (${detail})`);
  }
}

/** The env has no item for this episode (its data is exhausted, or no item has that seed). */
export class NoItemError extends OpenEnvError {
  override name = "NoItemError";
  constructor(message: string) {
    super("EXECUTION_ERROR", message);
  }
}

/**
 * What the infrastructure did to an episode: its slot was lost, its workspace could not be
 * set up, or its reward could not be computed. The episode has no reward — a zero would be a
 * wrong score the trainer learns from — and is over; the client starts a new one with reset.
 */
export class EpisodeInfraError extends OpenEnvError {
  override name = "EpisodeInfraError";
  constructor(
    /** `slot_lost`, `setup`, `model`, `reward`, `reward_tool`: what failed. */
    readonly failure: string,
    message: string,
  ) {
    super("EXECUTION_ERROR", `infrastructure failure (${failure}), not a result of the agent: ${message}. The episode has no reward and is over; send reset to start a new one.`);
  }
}
