import type { ExecuteResponse } from "../protocol/sandbox.js";
import type { ToolResult } from "../protocol/tool.js";
import type { SlotLostError } from "../pool/errors.js";
import type { Slot } from "../pool/types.js";

/** Tool results the executor makes itself (errors before or around a sandbox call). */

export function errorResult(message: string, uniqId: string | undefined | null, metadata: Record<string, unknown> = {}): ToolResult {
  return { success: false, output: "", error: message, metadata, uniq_id: uniqId ?? null };
}

export function fromExecuteResponse(res: ExecuteResponse, uniqId: string | undefined | null): ToolResult {
  return { success: res.success, output: res.output, error: res.error, metadata: { ...res.metadata }, uniq_id: uniqId ?? null };
}

/**
 * The result for a call whose slot was lost. `metadata.slot_lost` is the marker the env
 * layer looks for to restart the trajectory on a fresh slot.
 */
export function slotLostResult(err: SlotLostError, slot: Slot | undefined, uniqId: string | undefined | null): ToolResult {
  return errorResult(`workspace lost: ${err.message}`, uniqId, {
    slot_lost: true,
    slot_id: err.slotId,
    allocation_id: err.allocationId,
    slot_key: slot?.key ?? `${err.allocationId}/${err.slotId}`,
    reason: err.reason,
  });
}
