import { z } from "zod";

/**
 * The shapes every room shares: a tool call as the model (or an env) issues it, and the
 * result that goes back into the conversation. Compatible with the original's
 * `ToolCall` / `ToolResult` JSON.
 */
export const ToolCallSchema = z.object({
  name: z.string().min(1, "tool name must not be empty"),
  arguments: z.record(z.string(), z.unknown()).default({}),
  uniq_id: z.string().optional(),
});
export type ToolCall = z.input<typeof ToolCallSchema>;
export type ParsedToolCall = z.output<typeof ToolCallSchema>;

export const ToolResultSchema = z.object({
  success: z.boolean(),
  output: z.string().default(""),
  error: z.string().default(""),
  metadata: z.record(z.string(), z.unknown()).default({}),
  uniq_id: z.string().nullable().default(null),
});
export type ToolResult = z.output<typeof ToolResultSchema>;
