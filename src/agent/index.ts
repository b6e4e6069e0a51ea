/**
 * The agent room (`slotpool/agent`): the agent loop, the chat-completions client, the
 * policies (model, token-exact, oracle) and the model-server check. Listed by name: what a
 * user of this subpath needs (test/architecture/public-api.test.ts guards the list).
 */
export {
  runAgentLoop,
  type AgentLoopOptions,
  type AgentResult,
  type AgentFinishReason,
  type ExecuteTool,
  type ToolCallRecord,
  type ToolErrorRecord,
  type TurnRecord,
} from "./agent-loop.js";
export type { ChatMessage, TokenUsage, TurnTokens, OpenAIFunctionTool, OpenAIToolCall } from "./messages.js";
export { AgentError, ChatRequestError, ChatResponseError, InfraToolError } from "./errors.js";
export { ChatCompletionsClient, type ChatClientOptions, type ChatRequest, type ChatCompletion, type ChatCallOptions, type ChatClientStats } from "./chat-client.js";
export type { AgentPolicy, PolicyTurn, PolicyTurnInput } from "./policy.js";
export { ChatModelPolicy, type ChatModelPolicyOptions, type ToolCallFormat } from "./model-policy.js";
export { OraclePolicy, type OracleScript, type OracleStep } from "./oracle-policy.js";
export { TokenExactPolicy, type TokenExactPolicyOptions } from "./token-exact-policy.js";
export { loadChatTokenizer, ChatTemplateError, type ChatTokenizer } from "./chat-template.js";
export { probeTokenBackend, TemplateMismatchError, type ServerType, type TokenBackend, type ProbedBackend } from "./completions-backends.js";
export { TOOL_CALL_PARSERS, type ToolCallParserName } from "./tool-call-parsers.js";
export { hermesToolsSystemPrompt } from "./hermes-prompt.js";
export { checkModelServer, ModelServerError, type ModelCheckOptions, type ModelCheckResult } from "./model-check.js";
export { ModelConfigSchema, type ModelConfig, type ModelConfigInput } from "./model-config.js";
