import type { ExecuteResponse } from "../protocol/sandbox.js";
import type { ToolResult } from "../protocol/tool.js";
import { INFRA_MARKER, type ToolInfraCause } from "../protocol/infra.js";
import { SandboxRequestError } from "../pool/errors.js";

/** Tool results the executor makes itself (errors before or around a sandbox call). */

export function errorResult(message: string, uniqId: string | undefined | null, metadata: Record<string, unknown> = {}): ToolResult {
  return { success: false, output: "", error: message, metadata, uniq_id: uniqId ?? null };
}

export function fromExecuteResponse(res: ExecuteResponse, uniqId: string | undefined | null): ToolResult {
  return { success: res.success, output: res.output, error: res.error, metadata: { ...res.metadata }, uniq_id: uniqId ?? null };
}

/**
 * A failure the infrastructure caused, not the call (protocol/infra.ts): marked so the env
 * makes the trajectory an infra failure instead of showing it to the policy or scoring it.
 */
export function infraResult(message: string, uniqId: string | undefined | null, cause: ToolInfraCause, metadata: Record<string, unknown> = {}): ToolResult {
  return errorResult(message, uniqId, { ...metadata, [INFRA_MARKER]: cause });
}

/**
 * The metadata of an artifact call that failed on its way to the sandbox server: the
 * infrastructure's (`sandbox_error`), as a tool call's HTTP failure is, unless the server
 * refused the request itself (4xx: the request's own fault, e.g. a bad path).
 */
export function artifactFailureMetadata(err: unknown): Record<string, unknown> {
  const refused = err instanceof SandboxRequestError && err.status !== undefined && err.status >= 400 && err.status < 500;
  return refused ? {} : { [INFRA_MARKER]: "sandbox_error" };
}
