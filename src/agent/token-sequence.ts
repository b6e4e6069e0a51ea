import type { ChatTokenizer } from "./chat-template.js";
import type { ChatMessage, OpenAIFunctionTool } from "./messages.js";

/**
 * Why a trajectory's token sequence could not simply be extended:
 * - `history-rewritten`: the messages before the new ones are not the ones this sequence holds
 *   (the env edited, dropped or summarised history);
 * - `truncated`: the last turn stopped at the token budget (`finish_reason: length`);
 * - `tools-changed`: the tools offered are not those the sequence was rendered with.
 */
export type PrefixBreakReason = "history-rewritten" | "truncated" | "tools-changed";

export interface NextPrompt {
  ids: number[];
  /** Set when this prompt starts a new segment after the sequence had to break. */
  breakReason?: PrefixBreakReason;
}

/**
 * One trajectory's prompt ids, token in, token out: the next prompt is the previous prompt +
 * the ids the model sampled + the bridge (the tokenized tool results or user turn and the
 * generation prompt, cut from the chat template after a stand-in assistant turn so the
 * separator after the end-of-turn token is the template's). Sampled ids are never
 * re-tokenized, so thinking, the model's own tool-call spelling and non-canonical token
 * splits stay as sampled. When the prefix must break, the next prompt is the template's full
 * rendering and a new segment starts.
 */
export class TokenSequence {
  /** Prompt + completion so far, appended in place (copying a 20k-id prompt every turn costs more than the bridge). */
  private ids: number[] = [];
  private started = false;
  private completionLength = 0;
  private lastFinish = "stop";
  /** The messages (by identity) this sequence holds, the last one being the model's own turn. */
  private held: readonly ChatMessage[] = [];
  private toolsKey = "";
  private tools: readonly OpenAIFunctionTool[] | undefined;

  constructor(private readonly tokenizer: ChatTokenizer) {}

  /** An independent copy (a branch of the trajectory continues from here). */
  clone(): TokenSequence {
    const c = new TokenSequence(this.tokenizer);
    c.ids = this.ids.slice();
    c.started = this.started;
    c.completionLength = this.completionLength;
    c.lastFinish = this.lastFinish;
    c.held = this.held;
    c.toolsKey = this.toolsKey;
    c.tools = this.tools;
    return c;
  }

  nextPrompt(messages: readonly ChatMessage[], tools: readonly OpenAIFunctionTool[]): NextPrompt {
    // The agent loop passes the same tools array each turn: compare by identity first.
    const toolsKey = tools === this.tools ? this.toolsKey : JSON.stringify(tools);
    this.tools = tools;
    const reason = this.started ? this.breakReason(messages, toolsKey) : undefined;
    if (!this.started || reason !== undefined) {
      this.ids = this.tokenizer.encode(this.tokenizer.render(messages, { tools, addGenerationPrompt: true }));
      this.start(messages, toolsKey);
      return reason ? { ids: this.ids.slice(), breakReason: reason } : { ids: this.ids.slice() };
    }
    const eot = this.tokenizer.endOfTurnIds;
    const n = this.ids.length;
    // Servers that trim the stop token: the template's end-of-turn goes in as prompt (masked).
    const closed = eot.length > 0 && this.completionLength >= eot.length && eot.every((id, i) => this.ids[n - eot.length + i] === id);
    const bridge = this.tokenizer.encode((closed ? "" : this.tokenizer.endOfTurn) + this.tokenizer.bridge(messages.slice(this.held.length), tools));
    for (const id of bridge) this.ids.push(id);
    this.start(messages, toolsKey);
    return { ids: this.ids.slice() };
  }

  /** The ids the model sampled for the prompt last returned, and the assistant message read from them. */
  recordCompletion(message: ChatMessage, ids: readonly number[], finishReason: string): void {
    for (const id of ids) this.ids.push(id);
    this.completionLength = ids.length;
    this.lastFinish = finishReason;
    this.held = [...this.held, message];
  }

  private start(messages: readonly ChatMessage[], toolsKey: string): void {
    this.started = true;
    this.completionLength = 0;
    this.held = [...messages];
    this.toolsKey = toolsKey;
  }

  private breakReason(messages: readonly ChatMessage[], toolsKey: string): PrefixBreakReason | undefined {
    if (this.lastFinish === "length") return "truncated";
    if (toolsKey !== this.toolsKey) return "tools-changed";
    if (messages.length < this.held.length || this.held.some((m, i) => messages[i] !== m)) return "history-rewritten";
    return undefined;
  }
}
