/**
 * The tool room's public contract (implemented in `src/tools/`), read by the executor and
 * the agent loop.
 */
import type { z } from "zod";
import type { IsolationArgName } from "../protocol/tool-table.js";

/**
 * Where a tool runs (the executor's and the env's routing key):
 *  - `sandbox`: in the trajectory's slot (a built-in of the tool table, or an env tool with a `slotCommand`);
 *  - `external`: on the ToolServer, where credentials live;
 *  - `in-process`: in the env's own process, with the trajectory's ToolContext (`run`).
 */
export type ToolKind = "sandbox" | "external" | "in-process";

/** What an in-process tool returns: a string is a successful output; an object may set any result field. */
export type ToolOutput = string | { success?: boolean; output?: string; error?: string; metadata?: Record<string, unknown> };

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
  /** Isolation arguments the tool honours (from the tool table): the executor fills them from its config. */
  isolationArgs?: readonly IsolationArgName[];
  /** The argument holding the call's time limit in seconds, clamped and filled by the executor. */
  timeoutArg?: string;
  /**
   * Env tools run in the slot: the shell command that does the work, built from the parsed
   * arguments. The executor runs it as a `bash` call in the trajectory's slot (with bash's isolation arguments).
   */
  slotCommand?(args: z.output<S>): string;
  /**
   * Env tools run in-process: called with the parsed arguments and the trajectory's context
   * (the env's ToolContext; a method, so env code may type it so). Never reaches the executor.
   */
  run?(args: z.output<S>, ctx: unknown): Promise<ToolOutput> | ToolOutput;
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
