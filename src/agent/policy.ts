import type { ChatMessage, OpenAIFunctionTool, TokenUsage, TurnTokens } from "./messages.js";

/** What a policy sees before its turn. */
export interface PolicyTurnInput {
  /** The conversation so far, in OpenAI form (assistant `tool_calls`, `tool` messages). */
  messages: readonly ChatMessage[];
  tools: readonly OpenAIFunctionTool[];
  /** 1-based turn number. */
  turn: number;
  signal?: AbortSignal;
}

/** One assistant turn. */
export interface PolicyTurn {
  /** The assistant message, with `tool_calls` when it calls tools. */
  message: ChatMessage;
  /** As the server reported it: stop, length, tool_calls, ... */
  finishReason: string;
  usage?: TokenUsage;
  /** Token ids/logprobs of this turn, only when the inference server returned them. */
  tokens?: TurnTokens;
  /** The raw text held `<tool_call>` blocks that did not parse (Hermes text mode). */
  parseError?: string;
}

/**
 * Whatever produces assistant turns: a model behind a chat completions endpoint
 * (`ChatModelPolicy`) or a scripted oracle (`OraclePolicy`) so an env runs with no model.
 */
export interface AgentPolicy {
  readonly name: string;
  nextTurn(input: PolicyTurnInput): Promise<PolicyTurn>;
}
