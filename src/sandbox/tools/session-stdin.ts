import { HttpError } from "../../http/errors.js";

/**
 * Stdin bytes a session holds for its program before the program reads them (issue 28: a
 * program that never reads made the server buffer without bound). A write past it waits for
 * room (backpressure on the client's request), at most STDIN_WAIT_MS, then is refused (429).
 */
export const MAX_STDIN_PENDING_BYTES = 8 * 1024 * 1024;
export const STDIN_WAIT_MS = 10_000;

/** A write to a session's stdin found no room in time (429, code STDIN_FULL). */
export class StdinFullError extends HttpError {
  override name = "StdinFullError";
  constructor(pid: number, pending: number, why: string) {
    super(
      429,
      `process ${pid} is not reading its stdin: ${pending} bytes already wait for it (the bound is ${MAX_STDIN_PENDING_BYTES} bytes) and ${why}; send more once it reads, or close its stdin`,
      "data",
    );
  }
}

/** One write larger than the whole stdin bound (413, code STDIN_TOO_LARGE). */
export class StdinTooLargeError extends HttpError {
  override name = "StdinTooLargeError";
  constructor(pid: number, bytes: number) {
    super(413, `${bytes} bytes for the stdin of process ${pid} in one write; at most ${MAX_STDIN_PENDING_BYTES} bytes per write: split the data`, "data");
  }
}
