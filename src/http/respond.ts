import type { ServerResponse } from "node:http";
import { HttpError } from "./errors.js";

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/** The HTTP status an error is answered with (500 for anything but an HttpError). */
export function errorStatus(err: unknown): number {
  return err instanceof HttpError ? err.status : 500;
}

/**
 * Answers a failed request with `{error, field?}`: an HttpError with its status, anything
 * else as a 500 "internal error". When the answer has already started, the connection is
 * cut (a half-sent body must not look complete).
 */
export function sendError(res: ServerResponse, err: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (err instanceof HttpError) {
    sendJson(res, err.status, { error: err.message, ...(err.field ? { field: err.field } : {}), ...err.answerFields });
    return;
  }
  sendJson(res, 500, { error: `internal error: ${(err as Error)?.message ?? String(err)}` });
}
