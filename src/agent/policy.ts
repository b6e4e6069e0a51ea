import type { ChatMessage, OpenAIFunctionTool, TokenUsage, TurnTokens } from "./messages.js";

/** What a policy sees before its turn. */
export interface PolicyTurnInput {
  /** The conversation so far, in OpenAI form (assistant `tool_calls`, `tool` messages). */
  messages: readonly ChatMessage[];
  tools: readonly OpenAIFunctionTool[];
  /** 1-based turn number. */
  turn: number;
  signal?: AbortSignal;
  /** In a branching group, after the branch point: which branch this is (0-based). */
  branch?: number;
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
  /**
   * A policy for branch `branch` of a branching group, continuing from this one's state (a
   * token-exact policy's sequence: the branch's prompts extend the ids so far). Optional: a
   * stateless policy may leave it out (the env then asks `policyFor(item)` again).
   */
  fork?(branch: number): AgentPolicy;
}
