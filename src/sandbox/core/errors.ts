import { HttpError } from "../../http/errors.js";
import { SlotpoolError } from "../../protocol/errors.js";

/** The server cannot start as configured (e.g. slot uids cannot reach the data dir); the message says how to fix it. */
export class SandboxSetupError extends SlotpoolError {
  override name = "SandboxSetupError";
  constructor(
    readonly reason: "data_dir_unreachable" | "sandbox_unavailable",
    message: string,
  ) {
    super(message);
  }
}

/** A reset could not empty the slot (HTTP 500): the slot is out of service until a reset succeeds. */
export class ResetFailedError extends HttpError {
  override name = "ResetFailedError";
  constructor(message: string) {
    super(500, message);
  }
}
