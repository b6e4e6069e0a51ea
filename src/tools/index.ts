/**
 * The tool room (`slotpool/tools`): tool definitions, the registry, toolsets and
 * distributions, Hermes `<tool_call>` text and OpenAI tool calls. Listed by name (guarded
 * by test/architecture/public-api.test.ts).
 */
export type { OpenAIFunctionTool, OpenAIToolCall, ToolDefinition, ToolKind, ToolOutput } from "./types.js";
export {
  ToolError,
  UnknownToolError,
  ToolArgumentsError,
  DuplicateToolError,
  InvalidToolDefinitionError,
  UnknownToolsetError,
  HermesParseError,
  ToolCallFormatError,
} from "./errors.js";
export { defineTool, toOpenAiTool } from "./definition.js";
export { BUILTIN_TOOLS } from "./builtin.js";
export { ToolRegistry, type ValidatedCall, type CheckedCall } from "./registry.js";
export { Toolsets, BUILTIN_TOOLSETS, type ToolsetDefinition, type ToolsetSelection } from "./toolsets.js";
export { BUILTIN_DISTRIBUTIONS, resolveGroupTools, seededRng, type GroupTools, type GroupToolsOptions, type Rng, type ToolsetDistribution } from "./distributions.js";
export {
  parseHermesToolCalls,
  formatHermesToolCall,
  formatHermesToolResponse,
  toOpenAiToolCalls,
  fromOpenAiToolCalls,
  type HermesParseOptions,
  type HermesParseResult,
} from "./hermes.js";
export { ToolsConfigSchema, type ToolsConfig, type ToolsConfigInput } from "./config.js";
