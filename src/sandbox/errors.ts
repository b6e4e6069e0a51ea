import { SlotpoolError } from "../protocol/errors.js";

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
