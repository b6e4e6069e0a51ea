import type { OpenAIFunctionTool, OpenAIToolCall } from "../tools/types.js";

/** One chat message as OpenAI-compatible servers take and return it. */
export interface ChatMessage {
  role: "system" | "user" | "assistant" | "tool";
  content: string | null;
  /** Assistant messages that call tools. */
  tool_calls?: OpenAIToolCall[];
  /** Tool messages: the id of the call they answer. */
  tool_call_id?: string;
  /** Tool messages: the tool's name (some servers' chat templates need it). */
  name?: string;
  /** Thinking text returned separately by reasoning parsers (vLLM, SGLang, OpenRouter). */
  reasoning_content?: string;
}

export type { OpenAIFunctionTool, OpenAIToolCall };

export interface TokenUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export function emptyUsage(): TokenUsage {
  return { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 };
}

export function addUsage(into: TokenUsage, more: Partial<TokenUsage> | undefined): void {
  if (!more) return;
  into.prompt_tokens += more.prompt_tokens ?? 0;
  into.completion_tokens += more.completion_tokens ?? 0;
  into.total_tokens += more.total_tokens ?? (more.prompt_tokens ?? 0) + (more.completion_tokens ?? 0);
}

/**
 * Token ids of one model turn, when the inference server returned them (vLLM with
 * `return_token_ids`, SGLang, or `token_id:N` logprob tokens). Never synthesised.
 */
export interface TurnTokens {
  promptTokenIds?: number[];
  completionTokenIds: number[];
  /** Log-probability of each completion token, same length as completionTokenIds. */
  completionLogprobs?: number[];
  /**
   * The prompt was built token in, token out (earlier sampled ids kept, only the bridge
   * tokenized), so every completion id is exactly what the model sampled in that context.
   */
  tokenExact?: boolean;
  /** This turn's prompt started a new segment: why the previous one could not be extended. */
  prefixBreak?: "history-rewritten" | "truncated" | "tools-changed";
}
