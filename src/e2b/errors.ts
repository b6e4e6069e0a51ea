import { HttpError } from "../http/errors.js";
import { SlotpoolError } from "../protocol/errors.js";

/**
 * A refused E2B request. Answered as E2B's API does, `{"code": status, "message": …}` with
 * the same HTTP status, so the `e2b` SDK raises its own error classes (401 →
 * AuthenticationError, 404 → NotFoundError / SandboxNotFoundError, 400 → InvalidArgumentError …).
 */
export class E2bApiError extends HttpError {
  override name = "E2bApiError";
}

/** What an E2B feature slotpool does not offer answers: HTTP 501 / Connect `unimplemented`. */
export class E2bUnsupportedError extends SlotpoolError {
  override name = "E2bUnsupportedError";
}

/**
 * The JSON body E2B's API answers errors with: `code` is the HTTP status (E2B's), and
 * slotpool's stable code of the failure, when it has one, is `errorCode` (match on it, not on
 * the message): an E2bApiError's own (`new E2bApiError(status, message, field, { errorCode })`),
 * or the code of any other slotpool error (`E2B_UNSUPPORTED`, `SLOT_ACQUIRE_TIMEOUT`, …).
 */
export function e2bErrorBody(status: number, message: string, err?: unknown): { code: number; message: string; errorCode?: string } {
  const errorCode = err instanceof HttpError ? err.answerFields?.["errorCode"] : err instanceof SlotpoolError ? err.code : undefined;
  return { code: status, message, ...(typeof errorCode === "string" ? { errorCode } : {}) };
}
