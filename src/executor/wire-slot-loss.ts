import type { ArtifactArchiveResponse, ArtifactListResponse, ArtifactReadResponse } from "../protocol/sandbox.js";
import type { ToolResult } from "../protocol/tool.js";
import type { SlotLostError } from "../pool/errors.js";

/**
 * A lost slot as the executor service writes it on the wire. In-process, slot loss has one
 * form, the pool's `SlotLostError`; only the HTTP boundary (executor-server.ts) turns it into
 * these answers, which keep the original's shape: a failed result whose `metadata.slot_lost`
 * is true, plus `slot_id`, `allocation_id`, `slot_key` and `reason`.
 */
export function slotLostToolResult(err: SlotLostError, uniqId: string | undefined | null): ToolResult {
  return {
    success: false,
    output: "",
    error: `workspace lost: ${err.message}`,
    metadata: {
      slot_lost: true,
      slot_id: err.slotId,
      allocation_id: err.containerId,
      slot_key: `${err.containerId}/${err.slotId}`,
      reason: err.reason,
    },
    uniq_id: uniqId ?? null,
  };
}

/** An artifact call on a lost slot: the route's empty answer with `slot_lost: true`. */
export function slotLostArtifactRead(err: SlotLostError, req: { path: string; encoding?: "text" | "base64" }): ArtifactReadResponse & { slot_lost: true } {
  return { success: false, error: `workspace lost: ${err.message}`, slot_lost: true, content: "", encoding: req.encoding ?? "text", truncated: false, bytes: 0, file_size: 0, path: req.path, mime: "" };
}

export function slotLostArtifactList(err: SlotLostError, req: { path?: string }): ArtifactListResponse & { slot_lost: true } {
  return { success: false, error: `workspace lost: ${err.message}`, slot_lost: true, entries: [], truncated: false, path: req.path ?? "." };
}

export function slotLostArtifactArchive(err: SlotLostError, req: { path?: string }): ArtifactArchiveResponse & { slot_lost: true } {
  return { success: false, error: `workspace lost: ${err.message}`, slot_lost: true, content: "", encoding: "base64", format: "tar.gz", bytes: 0, entries: 0, path: req.path ?? "." };
}
