import { INFRA_MARKER, type ToolInfraCause } from "../../protocol/infra.js";

/**
 * How the infrastructure cut a call off, for the calls that are not a `bash` command (the
 * stateful terminal, file tools, artifact routes, process sessions): one rule with the
 * marker `bash` results carry (protocol/infra.ts). A slot's abort signal fires with the
 * reason `Slot.killRunning` was given: "shutdown" when the server is shutting down, else a
 * reset from outside the call.
 */
export function cutOffCause(signal: AbortSignal): ToolInfraCause | undefined {
  if (!signal.aborted) return undefined;
  return signal.reason === "shutdown" ? "server_shutdown" : "command_killed";
}

/** The error text of a call cut off for `cause` (`what`: the call, e.g. "read_file"). */
export function cutOffMessage(what: string, cause: ToolInfraCause): string {
  switch (cause) {
    case "server_shutdown":
      return `${what} cut off: the sandbox server is shutting down`;
    case "command_killed":
      return `${what} cut off: the slot was reset from outside the call`;
    case "sandbox_start":
      return `${what} could not start: its sandbox did not come up`;
    default:
      return `${what} could not run: the sandbox failed (${cause})`;
  }
}

/** `{ infra: cause }`: the metadata of such an answer. */
export function infraMetadata(cause: ToolInfraCause): Record<string, unknown> {
  return { [INFRA_MARKER]: cause };
}

/** Thrown inside a long host-side call (an archive, a read) when its slot's signal fired: it stops early. */
export class CallCutOffError extends Error {
  override name = "CallCutOffError";
  constructor(readonly infraCause: ToolInfraCause) {
    super(`cut off (${infraCause})`);
  }
}

/** Throws CallCutOffError once `signal` fired (checked between chunks of a long call). */
export function throwIfCutOff(signal: AbortSignal | undefined): void {
  const cause = signal ? cutOffCause(signal) : undefined;
  if (cause) throw new CallCutOffError(cause);
}
