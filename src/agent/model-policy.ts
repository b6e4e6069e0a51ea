import { ChatCompletionsClient, type ChatCompletion, type ChatClientOptions } from "./chat-client.js";
import { formatHermesToolCall, parseHermesToolCalls, toOpenAiToolCalls } from "../tools/hermes.js";
import { hermesToolsSystemPrompt } from "./hermes-prompt.js";
import type { ChatMessage, OpenAIFunctionTool, OpenAIToolCall, TurnTokens } from "./messages.js";
import type { AgentPolicy, PolicyTurn, PolicyTurnInput } from "./policy.js";

/**
 * How tools reach the model:
 * - `native`: `tools=` in the request; the server parses tool calls (vLLM with a tool parser, SGLang, OpenAI, OpenRouter).
 * - `hermes`: tools described in the system prompt, `<tool_call>` blocks parsed from the raw text here
 *   (servers that return plain text).
 */
export type ToolCallFormat = "native" | "hermes";

export interface ChatModelPolicyOptions extends ChatClientOptions {
  model: string;
  toolCallFormat?: ToolCallFormat;
  temperature?: number;
  maxTokens?: number;
  /** Merged into every request body (OpenRouter `provider`, vLLM `return_token_ids`, `logprobs`, ...). */
  extraBody?: Record<string, unknown>;
  /** Reuse a client (connection pool, counters) across policies. */
  client?: ChatCompletionsClient;
}

/** A model behind an OpenAI-compatible chat completions endpoint. */
export class ChatModelPolicy implements AgentPolicy {
  readonly name: string;
  readonly client: ChatCompletionsClient;
  readonly format: ToolCallFormat;

  constructor(private readonly options: ChatModelPolicyOptions) {
    this.client = options.client ?? new ChatCompletionsClient(options);
    this.format = options.toolCallFormat ?? "native";
    this.name = `${options.model} (${this.format} tool calls)`;
  }

  async nextTurn(input: PolicyTurnInput): Promise<PolicyTurn> {
    const native = this.format === "native";
    const messages = native ? input.messages.map(stripForWire) : toHermesText(input.messages, input.tools);
    const completion = await this.client.complete(
      {
        model: this.options.model,
        messages,
        ...(native && input.tools.length > 0 ? { tools: [...input.tools], tool_choice: "auto" as const } : {}),
        ...(this.options.temperature !== undefined ? { temperature: this.options.temperature } : {}),
        ...(this.options.maxTokens !== undefined ? { max_tokens: this.options.maxTokens } : {}),
        ...(this.options.extraBody ? { extra_body: this.options.extraBody } : {}),
      },
      input.signal ? { signal: input.signal } : {},
    );
    return native ? readNative(completion) : readHermes(completion);
  }

  async close(): Promise<void> {
    if (!this.options.client) await this.client.close();
  }
}

function stripForWire(m: ChatMessage): ChatMessage {
  // reasoning_content stays in our record but is not sent back: templates differ on it.
  // A tool message's `name` is ours too: OpenAI's schema for tool messages has no such field.
  const { reasoning_content: _r, ...rest } = m;
  if (rest.role === "tool") delete rest.name;
  return rest;
}

/** The conversation as a raw-text server sees it: tools in the system prompt, calls and results as text. */
function toHermesText(messages: readonly ChatMessage[], tools: readonly OpenAIFunctionTool[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  const toolsPrompt = tools.length > 0 ? hermesToolsSystemPrompt([...tools]) : "";
  const first = messages[0];
  if (first?.role === "system") {
    out.push({ role: "system", content: toolsPrompt ? `${first.content ?? ""}\n\n${toolsPrompt}` : first.content });
  } else if (toolsPrompt) {
    out.push({ role: "system", content: toolsPrompt });
  }
  for (const [i, m] of messages.entries()) {
    if (i === 0 && m.role === "system") continue;
    if (m.role === "assistant") {
      // In hermes mode the assistant content already is the raw text the model wrote.
      const text = m.content ?? (m.tool_calls ?? []).map((c) => formatHermesToolCall({ name: c.function.name, arguments: safeArgs(c.function.arguments) })).join("\n");
      out.push({ role: "assistant", content: text });
    } else if (m.role === "tool") {
      // The content is already the formatted result (output, exit code, error) the loop wrote.
      const response = `<tool_response>\n${JSON.stringify({ name: m.name ?? "tool", content: m.content ?? "" })}\n</tool_response>`;
      const prev = out[out.length - 1];
      // Consecutive results of one turn go back in one user message.
      if (prev && prev.role === "user" && (prev.content ?? "").startsWith("<tool_response>")) prev.content = `${prev.content}\n${response}`;
      else out.push({ role: "user", content: response });
    } else {
      out.push({ role: m.role, content: m.content });
    }
  }
  return out;
}

function safeArgs(raw: string): Record<string, unknown> {
  try {
    const v: unknown = JSON.parse(raw);
    return v && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

function reasoningOf(message: { reasoning_content?: string | null | undefined; reasoning?: string | null | undefined }): string | undefined {
  return message.reasoning_content ?? message.reasoning ?? undefined;
}

function readNative(c: ChatCompletion): PolicyTurn {
  const choice = c.choices[0]!;
  const toolCalls: OpenAIToolCall[] = (choice.message.tool_calls ?? []).map((tc, i) => ({
    id: tc.id ?? `call_${i}`,
    type: "function",
    function: { name: tc.function.name, arguments: typeof tc.function.arguments === "string" ? tc.function.arguments : JSON.stringify(tc.function.arguments ?? {}) },
  }));
  const message: ChatMessage = { role: "assistant", content: choice.message.content ?? null };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  const reasoning = reasoningOf(choice.message);
  if (reasoning) message.reasoning_content = reasoning;
  return withTokens(c, { message, finishReason: choice.finish_reason ?? "stop" });
}

function readHermes(c: ChatCompletion): PolicyTurn {
  const choice = c.choices[0]!;
  const raw = choice.message.content ?? "";
  const parsed = parseHermesToolCalls(raw);
  // Keep the raw text as content: it is exactly what the model wrote and what goes back into the prompt.
  const message: ChatMessage = { role: "assistant", content: raw };
  if (parsed.calls.length > 0) message.tool_calls = toOpenAiToolCalls(parsed.calls);
  const reasoning = reasoningOf(choice.message);
  if (reasoning) message.reasoning_content = reasoning;
  const turn: PolicyTurn = { message, finishReason: parsed.calls.length > 0 ? "tool_calls" : (choice.finish_reason ?? "stop") };
  if (parsed.errors.length > 0) turn.parseError = parsed.errors.map((e) => e.message).join("; ");
  return withTokens(c, turn);
}

const TOKEN_ID_PREFIX = /^token_id:(\d+)$/;

/**
 * Token ids only from what the server returned: NeMo Gym's message fields
 * (`message.generation_token_ids`, `prompt_token_ids`, `generation_log_probs`), `token_ids`
 * (vLLM `return_token_ids`) or `token_id:N` logprob tokens.
 */
function withTokens(c: ChatCompletion, turn: PolicyTurn): PolicyTurn {
  const choice = c.choices[0]!;
  if (c.usage) {
    const u = c.usage;
    turn.usage = { prompt_tokens: u.prompt_tokens ?? 0, completion_tokens: u.completion_tokens ?? 0, total_tokens: u.total_tokens ?? (u.prompt_tokens ?? 0) + (u.completion_tokens ?? 0) };
  }
  const m = choice.message;
  if (m.generation_token_ids) {
    const tokens: TurnTokens = { completionTokenIds: m.generation_token_ids };
    if (m.prompt_token_ids) tokens.promptTokenIds = m.prompt_token_ids;
    if (m.generation_log_probs && m.generation_log_probs.length === m.generation_token_ids.length) tokens.completionLogprobs = m.generation_log_probs;
    turn.tokens = tokens;
    return turn;
  }
  const entries = choice.logprobs?.content ?? null;
  let ids = choice.token_ids ?? null;
  if (!ids && entries && entries.length > 0 && entries.every((e) => e.token !== undefined && TOKEN_ID_PREFIX.test(e.token))) {
    ids = entries.map((e) => Number(TOKEN_ID_PREFIX.exec(e.token!)![1]));
  }
  if (!ids) return turn;
  const tokens: TurnTokens = { completionTokenIds: ids };
  const promptIds = choice.prompt_token_ids ?? c.prompt_token_ids ?? null;
  if (promptIds) tokens.promptTokenIds = promptIds;
  if (entries && entries.length === ids.length && entries.every((e) => typeof e.logprob === "number")) {
    tokens.completionLogprobs = entries.map((e) => e.logprob as number);
  }
  turn.tokens = tokens;
  return turn;
}
