import { SlotpoolError } from "../protocol/errors.js";

/** An option of the sandbox job that cannot be (a bad value, two that contradict): the message names it and the fix. */
export class SandboxJobOptionError extends SlotpoolError {
  override name = "SandboxJobOptionError";
}
