import type { ExecuteResponse } from "../protocol/sandbox.js";
import type { ToolResult } from "../protocol/tool.js";

/** Tool results the executor makes itself (errors before or around a sandbox call). */

export function errorResult(message: string, uniqId: string | undefined | null, metadata: Record<string, unknown> = {}): ToolResult {
  return { success: false, output: "", error: message, metadata, uniq_id: uniqId ?? null };
}

export function fromExecuteResponse(res: ExecuteResponse, uniqId: string | undefined | null): ToolResult {
  return { success: res.success, output: res.output, error: res.error, metadata: { ...res.metadata }, uniq_id: uniqId ?? null };
}
