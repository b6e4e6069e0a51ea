import type { ChatTokenizer } from "./chat-template.js";
import type { TokenBackend } from "./completions-backends.js";
import { ChatResponseError } from "./errors.js";
import type { AgentPolicy, PolicyTurn, PolicyTurnInput } from "./policy.js";
import { TOOL_CALL_PARSERS, type ToolCallParserName } from "./tool-call-parsers.js";
import { TokenSequence } from "./token-sequence.js";

export interface TokenExactPolicyOptions {
  backend: TokenBackend;
  tokenizer: ChatTokenizer;
  parser: ToolCallParserName;
  model: string;
  temperature: number;
  maxTokens: number;
}

/**
 * A model on a token-in, token-out server (vLLM, SGLang): the prompt is sent as ids built by
 * a TokenSequence, the reply comes back as the sampled ids with their logprobs, and the tool
 * calls are parsed here from the sampled text. One instance per trajectory (it holds the
 * trajectory's sequence).
 */
export class TokenExactPolicy implements AgentPolicy {
  readonly name: string;
  private readonly sequence: TokenSequence;

  constructor(
    private readonly options: TokenExactPolicyOptions,
    sequence?: TokenSequence,
  ) {
    this.sequence = sequence ?? new TokenSequence(options.tokenizer);
    this.name = `${options.model} (token-exact, ${options.parser} tool calls)`;
  }

  /** A branch continuing this trajectory: its prompts extend the ids sampled so far (never re-rendered). */
  fork(_branch: number): TokenExactPolicy {
    return new TokenExactPolicy(this.options, this.sequence.clone());
  }

  async nextTurn(input: PolicyTurnInput): Promise<PolicyTurn> {
    const { tokenizer, backend } = this.options;
    const prompt = this.sequence.nextPrompt(input.messages, input.tools);
    const [sample] = await backend.generate({
      promptIds: prompt.ids,
      n: 1,
      maxTokens: this.options.maxTokens,
      temperature: this.options.temperature,
      ...(input.signal ? { signal: input.signal } : {}),
    });
    if (!sample) throw new ChatResponseError(`${backend.url} returned no completion`);
    let text = tokenizer.decode(sample.ids);
    if (text.endsWith(tokenizer.endOfTurn)) text = text.slice(0, -tokenizer.endOfTurn.length);
    const parsed = TOOL_CALL_PARSERS[this.options.parser](text);
    this.sequence.recordCompletion(parsed.message, sample.ids, sample.finishReason);
    const calls = parsed.message.tool_calls?.length ?? 0;
    const turn: PolicyTurn = {
      message: parsed.message,
      // A cut-off turn stays `length` even when it held a complete call: the next prompt must break.
      finishReason: sample.finishReason === "length" ? "length" : calls > 0 ? "tool_calls" : sample.finishReason,
      usage: { prompt_tokens: prompt.ids.length, completion_tokens: sample.ids.length, total_tokens: prompt.ids.length + sample.ids.length },
      tokens: {
        promptTokenIds: prompt.ids,
        completionTokenIds: sample.ids,
        completionLogprobs: sample.logprobs,
        tokenExact: true,
        ...(prompt.breakReason ? { prefixBreak: prompt.breakReason } : {}),
      },
    };
    if (parsed.parseError) turn.parseError = parsed.parseError;
    return turn;
  }
}
