import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { formatHermesToolCall } from "../tools/hermes.js";
import type { TurnRecord } from "../agent/agent-loop.js";
import type { ChatMessage } from "../agent/messages.js";
import { EnvError } from "./errors.js";

/**
 * Tokens of one trajectory for a trainer: `masks` holds -100 at prompt positions (system,
 * user, tool results) and the token id at trained positions (the model's own output), as
 * Atropos expects; `logprobs` holds 1.0 at masked positions.
 */
export interface SequenceTokens {
  tokens: number[];
  masks: number[];
  logprobs?: number[];
  /** Where the ids come from: the inference server's own ids, or a local tokenizer.json. */
  source: "inference-server" | "tokenizer";
  /**
   * Every trained id is what the model sampled, in the context it sampled it in (token-in,
   * token-out generation). False for Phase 1 ids: re-rendered chats, or a local tokenizer.
   */
  tokenExact: boolean;
}

const MASKED = -100;

/**
 * From the ids the inference server returned for each turn, one segment per unbroken run of
 * turns. Each turn's prompt normally extends the previous prompt + completion (token-exact
 * generation builds it so; a chat template that re-renders the same prefix does too); then
 * earlier completions keep their trained mask. When a prompt does not extend it (a template
 * that rewrites history, e.g. dropping thinking; a truncated turn; changed tools), the
 * finished segment is kept as a sample of its own and a new one starts at that turn's
 * prompt, all masked. Returns null unless every turn carries prompt and completion ids.
 */
export function tokenSegmentsFromServer(turns: readonly TurnRecord[]): SequenceTokens[] | null {
  if (turns.length === 0 || !turns.every((t) => t.tokens?.promptTokenIds)) return null;
  const segments: SequenceTokens[] = [];
  let runStart = 0;
  const close = (end: number) => segments.push(segmentOf(turns.slice(runStart, end)));
  let expected: number[] = [];
  for (const [i, t] of turns.entries()) {
    const prompt = t.tokens!.promptTokenIds!;
    const extends_ = i > 0 && prompt.length >= expected.length && expected.every((id, k) => prompt[k] === id);
    if (i > 0 && !extends_) {
      close(i);
      runStart = i;
    }
    expected = [...prompt, ...t.tokens!.completionTokenIds];
  }
  close(turns.length);
  return segments;
}

/** One unbroken run of turns, each prompt extending the last prompt + completion. */
function segmentOf(turns: readonly TurnRecord[]): SequenceTokens {
  const tokens: number[] = [];
  const masks: number[] = [];
  const logprobs: number[] = [];
  const haveLogprobs = turns.every((t) => t.tokens!.completionLogprobs);
  for (const t of turns) {
    const added = t.tokens!.promptTokenIds!.slice(tokens.length);
    tokens.push(...added);
    masks.push(...added.map(() => MASKED));
    logprobs.push(...added.map(() => 1.0));
    const out = t.tokens!.completionTokenIds;
    tokens.push(...out);
    masks.push(...out);
    if (haveLogprobs) logprobs.push(...t.tokens!.completionLogprobs!);
  }
  const seq: SequenceTokens = { tokens, masks, source: "inference-server", tokenExact: turns.every((t) => t.tokens!.tokenExact === true) };
  if (haveLogprobs) seq.logprobs = logprobs;
  return seq;
}

/** The last segment of tokenSegmentsFromServer (the whole trajectory when nothing broke). */
export function tokensFromServer(turns: readonly TurnRecord[]): SequenceTokens | null {
  const segments = tokenSegmentsFromServer(turns);
  return segments ? segments[segments.length - 1]! : null;
}

/** Text → ids, as a HF tokenizer.json defines it. */
export interface TextTokenizer {
  encode(text: string): number[];
  decode(ids: number[]): string;
}

export class TokenizerLoadError extends EnvError {
  override name = "TokenizerLoadError";
}

/**
 * Loads a local Hugging Face `tokenizer.json` (and `tokenizer_config.json` beside it, if
 * present) with @huggingface/tokenizers, offline.
 */
export async function loadTokenizerJson(path: string): Promise<TextTokenizer> {
  let json: unknown;
  try {
    json = JSON.parse(await readFile(path, "utf8"));
  } catch (err) {
    throw new TokenizerLoadError(`cannot read tokenizer ${path}: ${(err as Error).message}. Point tokenizerPath (--tokenizer) at a HF tokenizer.json file.`);
  }
  let config: unknown = {};
  try {
    config = JSON.parse(await readFile(join(dirname(path), "tokenizer_config.json"), "utf8"));
  } catch {
    // optional: the tokenizer works without it
  }
  const { Tokenizer } = await import("@huggingface/tokenizers");
  let tok: InstanceType<typeof Tokenizer>;
  try {
    tok = new Tokenizer(json as object, config as object);
  } catch (err) {
    throw new TokenizerLoadError(`${path} is not a tokenizer this library can load: ${(err as Error).message}`);
  }
  return {
    encode: (text) => tok.encode(text, { add_special_tokens: false }).ids,
    decode: (ids) => tok.decode(ids, { skip_special_tokens: false }),
  };
}

function contentOf(m: ChatMessage): string {
  const calls = (m.tool_calls ?? []).map((c) => {
    let args: Record<string, unknown> = {};
    try {
      args = JSON.parse(c.function.arguments) as Record<string, unknown>;
    } catch {
      // keep {}: the raw text is in content for Hermes-text turns
    }
    return formatHermesToolCall({ name: c.function.name, arguments: args });
  });
  // In Hermes-text mode the content already holds the calls as written.
  if (m.content && calls.length > 0 && m.content.includes("<tool_call>")) return m.content;
  return [m.content ?? "", ...calls].filter(Boolean).join("\n");
}

/**
 * From a local tokenizer, rendering the conversation with the ChatML template
 * (`<|im_start|>role\n…<|im_end|>\n`, the Hermes/Qwen format): assistant contents and their
 * closing `<|im_end|>` are trained, everything else is masked. These are the ids this
 * tokenizer gives for that rendering — right for ChatML models, an approximation for models
 * with another chat template (documented in the README).
 */
export function tokensFromTokenizer(messages: readonly ChatMessage[], tokenizer: TextTokenizer): SequenceTokens {
  const tokens: number[] = [];
  const masks: number[] = [];
  const push = (text: string, trained: boolean) => {
    const ids = tokenizer.encode(text);
    tokens.push(...ids);
    masks.push(...(trained ? ids : ids.map(() => MASKED)));
  };
  for (const m of messages) {
    push(`<|im_start|>${m.role}\n`, false);
    if (m.role === "assistant") {
      push(`${contentOf(m)}<|im_end|>`, true);
      push("\n", false);
    } else {
      push(`${m.content ?? ""}<|im_end|>\n`, false);
    }
  }
  // No logprobs: a tokenizer cannot know what the model's were.
  return { tokens, masks, source: "tokenizer", tokenExact: false };
}
