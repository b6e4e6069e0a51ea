import { SlotLostError } from "../pool/errors.js";
import type { ToolResult } from "../protocol/tool.js";

/** True when the executor reports that the trajectory's slot (and its workspace) is gone. */
export function isSlotLostResult(result: ToolResult): boolean {
  return result.metadata["slot_lost"] === true;
}

/** The executor's `slot_lost` result as the pool's error, so the trajectory can be restarted. */
export function slotLostErrorFrom(result: ToolResult, trajectoryId: string): SlotLostError {
  const m = result.metadata;
  return new SlotLostError(
    typeof m["slot_id"] === "string" ? m["slot_id"] : "(unknown slot)",
    typeof m["allocation_id"] === "string" ? m["allocation_id"] : "(unknown allocation)",
    typeof m["reason"] === "string" ? m["reason"] : result.error || "the container is gone",
    trajectoryId,
  );
}
