import { SlotpoolError } from "../protocol/errors.js";
import type { ToolInfraCause } from "../protocol/infra.js";

/** Errors of the agent loop. Each message says what failed and what to change. */

export class AgentError extends SlotpoolError {
  override name = "AgentError";
}

/** The chat completions endpoint kept failing (after retries) or refused the request. */
export class ChatRequestError extends AgentError {
  override name = "ChatRequestError";
  constructor(
    message: string,
    readonly status?: number,
    readonly attempts = 1,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
  /** 429, 5xx, timeouts and network errors are worth another try; other 4xx are not. */
  get retryable(): boolean {
    return this.status === undefined || this.status === 429 || this.status === 408 || this.status >= 500;
  }
}

/** The server answered 200 but the body is not a chat completion we can read. */
export class ChatResponseError extends AgentError {
  override name = "ChatResponseError";
  /** A body that is not JSON at all (a proxy's HTML error page) is worth another try; a JSON body of the wrong shape is not. */
  readonly retryable: boolean;
  constructor(message: string, options: { retryable?: boolean; cause?: unknown } = {}) {
    super(message, options.cause !== undefined ? { cause: options.cause } : undefined);
    this.retryable = options.retryable ?? false;
  }
}

/**
 * A tool call the infrastructure could not run or cut off (its result carries the infra
 * marker, protocol/infra.ts). The loop throws it instead of showing the result to the policy:
 * the model did nothing wrong, so the trajectory is an infra failure, never a score.
 */
export class InfraToolError extends AgentError {
  override name = "InfraToolError";
  constructor(
    message: string,
    readonly infraCause: ToolInfraCause,
    readonly tool: string,
  ) {
    super(message);
  }
}
