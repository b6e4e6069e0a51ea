/** The tool room: definitions, registry, toolsets, distributions and Hermes tool-call text. */
export type { OpenAIFunctionTool, OpenAIToolCall, ToolDefinition, ToolKind, ToolOutput } from "./types.js";
export * from "./errors.js";
export * from "./isolation-args.js";
export * from "./definition.js";
export * from "./builtin.js";
export * from "./registry.js";
export * from "./toolsets.js";
export * from "./distributions.js";
export * from "./hermes.js";
