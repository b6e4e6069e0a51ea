/**
 * The tool room's public contract (implemented in `src/tools/`), read by the executor and
 * the agent loop.
 */
import type { z } from "zod";

/** Where a tool runs: inside the trajectory's slot, or on the external ToolServer. */
export type ToolKind = "sandbox" | "external";

export interface ToolDefinition<S extends z.ZodType = z.ZodType> {
  name: string;
  description: string;
  parameters: S;
  kind: ToolKind;
  /** Other names the model may use for it (Hermes: terminal → bash). */
  aliases?: readonly string[];
  /**
   * The parameters as JSON Schema, when known verbatim (external tools discovered from a
   * ToolServer). Offered to the model instead of the schema derived from `parameters`.
   */
  jsonSchema?: Record<string, unknown>;
}

/** An OpenAI chat-completions `tools[]` entry. */
export interface OpenAIFunctionTool {
  type: "function";
  function: { name: string; description: string; parameters: Record<string, unknown> };
}

/** OpenAI `tool_calls[]` entry of an assistant message. */
export interface OpenAIToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}
