import { SlotpoolError } from "../protocol/errors.js";

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
