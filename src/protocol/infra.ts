/**
 * The infrastructure marker of a tool result: set when the infrastructure, not the command,
 * decided how a call ended (it could not start, it was cut off, it could not reach a slot).
 * The sandbox server sets it in `metadata.infra`; the executor sets it on the failures it
 * makes itself. Whoever reads a result matches on this field, never on the message text:
 * such a result is not the agent's doing and must never be scored as if it were.
 *
 * - `sandbox_start`: the command could not start (its sandbox did not come up in time, the
 *   process could not be spawned);
 * - `command_killed`: the command was killed by a reset of its slot from outside the call, or
 *   was refused unrun because the slot was reset (or forked into) since the generation its
 *   caller holds (`generation` on the request, `Slot.generation`);
 * - `server_shutdown`: the sandbox server (or the executor) is shutting down: the command was
 *   killed, or refused before it ran;
 * - `sandbox_error`: the sandbox server could not be asked or could not run the call (an HTTP
 *   failure, a slot out of service after a failed reset);
 * - `no_slot`: no slot could be had for the trajectory (acquire timed out, the pool stopped);
 * - `vision_model`: the env's vision model, which answers `browser_vision`, could not be asked
 *   or failed (the agent asked a fair question; the model server is the infrastructure's).
 */
export const TOOL_INFRA_CAUSES = ["sandbox_start", "command_killed", "server_shutdown", "sandbox_error", "no_slot", "vision_model"] as const;
export type ToolInfraCause = (typeof TOOL_INFRA_CAUSES)[number];

/** The metadata key of the marker (`metadata.infra`). */
export const INFRA_MARKER = "infra";

/**
 * The infra cause a result's metadata carries, or undefined for a result the agent owns.
 * A marker this build does not know (a newer server) still counts, as `sandbox_error`.
 */
export function toolInfraCause(metadata: Readonly<Record<string, unknown>> | undefined): ToolInfraCause | undefined {
  const mark = metadata?.[INFRA_MARKER];
  if (typeof mark !== "string" || mark === "") return undefined;
  return (TOOL_INFRA_CAUSES as readonly string[]).includes(mark) ? (mark as ToolInfraCause) : "sandbox_error";
}
