import { SlotpoolError } from "../protocol/errors.js";

/** Errors of the tool room. Each message names the problem and what the caller can do. */

export class ToolError extends SlotpoolError {
  override name = "ToolError";
}

/** A tool name the registry does not know (neither a name nor an alias). */
export class UnknownToolError extends ToolError {
  override name = "UnknownToolError";
  constructor(
    readonly toolName: string,
    readonly available: readonly string[],
  ) {
    super(`unknown tool '${toolName}'; available tools: ${available.length ? available.join(", ") : "(none)"}`);
  }
}

/** The model's arguments do not match the tool's parameter schema. */
export class ToolArgumentsError extends ToolError {
  override name = "ToolArgumentsError";
  constructor(
    readonly toolName: string,
    /** One line per problem: `path: message`. */
    readonly problems: readonly string[],
  ) {
    super(`invalid arguments for tool '${toolName}': ${problems.join("; ")}`);
  }
}

/** Two tools (or a tool and an alias) claim the same name. */
export class DuplicateToolError extends ToolError {
  override name = "DuplicateToolError";
}

/** A tool definition that cannot be offered to a model (bad name, non-object parameters). */
export class InvalidToolDefinitionError extends ToolError {
  override name = "InvalidToolDefinitionError";
}

/** A toolset or distribution name that is not defined. */
export class UnknownToolsetError extends ToolError {
  override name = "UnknownToolsetError";
  constructor(
    readonly kind: "toolset" | "distribution",
    readonly toolsetName: string,
    readonly available: readonly string[],
  ) {
    super(`unknown ${kind} '${toolsetName}'; available ${kind}s: ${available.join(", ")}`);
  }
}

/** Text that looks like a Hermes tool call but cannot be read as one. */
export class HermesParseError extends ToolError {
  override name = "HermesParseError";
  constructor(
    message: string,
    /** The offending block's text (clipped). */
    readonly block: string,
  ) {
    super(message);
  }
}

/** An OpenAI `tool_calls[]` entry whose arguments are not a JSON object. */
export class ToolCallFormatError extends ToolError {
  override name = "ToolCallFormatError";
  constructor(
    message: string,
    readonly toolCallId?: string,
  ) {
    super(message);
  }
}
