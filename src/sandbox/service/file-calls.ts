import type { ReadFileArgs, WriteFileArgs } from "../../protocol/tool-table.js";
import type { ToolOutcome } from "../core/tool-outcome.js";
import type { Slot } from "../core/slot.js";
import { CallCutOffError, cutOffCause, cutOffMessage, infraMetadata } from "../core/cut-off.js";
import { readFileTool, writeFileTool, type FileToolOptions } from "../tools/files.js";
import { archiveArtifacts, listArtifacts, readArtifact } from "../tools/artifacts.js";
import type { ToolInfraCause } from "../../protocol/infra.js";
import type { PathScope } from "../tools/path-guard.js";

/**
 * The server's host-side calls on a slot's files — `read_file`/`write_file` and the
 * `/artifacts/*` routes — under the one rule for infra failures (protocol/infra.ts): a call
 * the slot's reset from outside or the server's shutdown overtook answers with the marker
 * (`command_killed`, `server_shutdown`), whatever it read or wrote meanwhile, never with a
 * result or an error a reward could take for the agent's ("file not found" on a workspace
 * being emptied). A long archive or read stops at the next chunk once cut off.
 */

/** `read_file` or `write_file` on the slot, marked when cut off. */
export async function fileCall(slot: Slot, tool: "read_file" | "write_file", args: Record<string, unknown>, options: FileToolOptions, scope: PathScope = slot.workspaceDir): Promise<ToolOutcome> {
  // Captured now: a reset replaces the slot's controller, and the answer must read why this one fired.
  const signal = slot.abortSignal;
  const cutOff = (): ToolOutcome | undefined => {
    const cause = cutOffCause(signal);
    return cause ? { success: false, output: "", error: cutOffMessage(tool, cause), metadata: infraMetadata(cause) } : undefined;
  };
  try {
    const outcome = await (tool === "read_file" ? readFileTool(scope, args as ReadFileArgs, options) : writeFileTool(scope, args as WriteFileArgs, options));
    return cutOff() ?? outcome;
  } catch (err) {
    // A workspace taken away under the call (its disk detached at shutdown) is not the call's fault either.
    const cut = cutOff();
    if (cut) return cut;
    throw err;
  }
}

export type ArtifactKind = "read" | "list" | "archive";

/** What each artifact route answers when it did not run (the fields its schema requires). */
function emptyAnswer(kind: ArtifactKind, path: string): Record<string, unknown> {
  if (kind === "read") return { content: "", encoding: "text", truncated: false, bytes: 0, file_size: 0, path, mime: "" };
  if (kind === "list") return { entries: [], truncated: false, path };
  return { content: "", encoding: "base64", format: "tar.gz", bytes: 0, entries: 0, path };
}

/** An artifact route's answer marked as an infra failure of `cause`. */
export function artifactInfraAnswer(kind: ArtifactKind, path: string, cause: ToolInfraCause, error = cutOffMessage(`artifact ${kind}`, cause)): Record<string, unknown> {
  return { success: false, error, ...emptyAnswer(kind, path), metadata: infraMetadata(cause) };
}

/**
 * `/artifacts/read|list|archive` on the slot, in its queue (so it sees the files of every
 * earlier call); refused as `server_shutdown` once the server is shutting down, marked when
 * cut off.
 */
export function artifactCall(slot: Slot, kind: ArtifactKind, req: Record<string, unknown>, shuttingDown: () => boolean, scopeOf: () => PathScope = () => slot.workspaceDir): Promise<unknown> {
  const path = typeof req["path"] === "string" ? req["path"] : ".";
  if (shuttingDown()) return Promise.resolve(artifactInfraAnswer(kind, path, "server_shutdown", "sandbox server is shutting down"));
  return slot.enqueue<unknown>(async () => {
    if (shuttingDown()) return artifactInfraAnswer(kind, path, "server_shutdown", "sandbox server is shutting down");
    const stale = slot.staleFor(typeof req["generation"] === "number" ? req["generation"] : undefined);
    if (stale) return artifactInfraAnswer(kind, path, "command_killed", stale);
    const signal = slot.abortSignal;
    // Read in the queue: a reset queued before this request decides the slot's root.
    const scope = scopeOf();
    try {
      const answer =
        kind === "read"
          ? await readArtifact(scope, req as Parameters<typeof readArtifact>[1], undefined, signal)
          : kind === "list"
            ? await listArtifacts(scope, req as Parameters<typeof listArtifacts>[1], undefined, signal)
            : await archiveArtifacts(scope, req as Parameters<typeof archiveArtifacts>[1], undefined, signal);
      const cause = cutOffCause(signal);
      return cause ? artifactInfraAnswer(kind, path, cause) : answer;
    } catch (err) {
      const cause = err instanceof CallCutOffError ? err.infraCause : cutOffCause(signal);
      if (cause) return artifactInfraAnswer(kind, path, cause);
      throw err;
    }
  });
}
