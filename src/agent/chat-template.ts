import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { AgentError } from "./errors.js";
import type { ChatMessage, OpenAIFunctionTool } from "./messages.js";
import { pieceMemoEncoder } from "./piece-memo-encoder.js";

/** The tokenizer or its chat template cannot be loaded or used. */
export class ChatTemplateError extends AgentError {
  override name = "ChatTemplateError";
}

/** The files a Hugging Face tokenizer directory holds: `tokenizer.json` and (optionally) `tokenizer_config.json`. */
export interface TokenizerFiles {
  tokenizer: object;
  config: Record<string, unknown>;
}

/** Reads `path` (a tokenizer.json) and the tokenizer_config.json beside it, if there is one. */
export async function readTokenizerFiles(path: string): Promise<TokenizerFiles> {
  let tokenizer: object;
  try {
    tokenizer = JSON.parse(await readFile(path, "utf8")) as object;
  } catch (err) {
    throw new ChatTemplateError(`cannot read tokenizer ${path}: ${(err as Error).message}. Point --tokenizer at a HF tokenizer.json file.`);
  }
  let config: Record<string, unknown> = {};
  try {
    config = JSON.parse(await readFile(join(dirname(path), "tokenizer_config.json"), "utf8")) as Record<string, unknown>;
  } catch {
    // optional for plain encoding; renderChat needs its chat_template and says so
  }
  return { tokenizer, config };
}

/** Encodes and renders conversations exactly as the model's own tokenizer and chat template do. */
export interface ChatTokenizer {
  /** Text → ids, special tokens in the text recognised, none added. */
  encode(text: string): number[];
  /** Ids → text, special tokens kept. */
  decode(ids: readonly number[]): string;
  /** The chat template applied to `messages` (and `tools`), as text. */
  render(messages: readonly ChatMessage[], options?: { tools?: readonly OpenAIFunctionTool[]; addGenerationPrompt?: boolean }): string;
  /**
   * The text that follows a finished assistant turn when `next` messages come after it: the
   * template's separator after the end-of-turn token (Qwen3's `\n`), the new messages and
   * the generation prompt. Does not include the end-of-turn token itself.
   */
  bridge(next: readonly ChatMessage[], tools: readonly OpenAIFunctionTool[]): string;
  /** The text the template closes an assistant turn with (Qwen3: `<|im_end|>`). */
  readonly endOfTurn: string;
  /** Its ids. */
  readonly endOfTurnIds: readonly number[];
}

const STAND_IN = "slotpool-stand-in-7f3a";

function specialTokenText(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (v && typeof v === "object" && typeof (v as { content?: unknown }).content === "string") return (v as { content: string }).content;
  return undefined;
}

/**
 * Messages as chat templates expect them (vLLM does the same before rendering): tool-call
 * arguments as objects when they are JSON, `null` contents as "".
 */
function forTemplate(messages: readonly ChatMessage[]): Array<Record<string, unknown>> {
  return messages.map((m) => {
    const out: Record<string, unknown> = { role: m.role, content: m.content ?? "" };
    if (m.reasoning_content !== undefined) out["reasoning_content"] = m.reasoning_content;
    if (m.name !== undefined) out["name"] = m.name;
    if (m.tool_call_id !== undefined) out["tool_call_id"] = m.tool_call_id;
    if (m.tool_calls?.length) {
      out["tool_calls"] = m.tool_calls.map((c) => {
        let args: unknown = c.function.arguments;
        try {
          args = JSON.parse(c.function.arguments);
        } catch {
          // keep the string: the template prints it as written
        }
        return { id: c.id, type: "function", function: { name: c.function.name, arguments: args } };
      });
    }
    return out;
  });
}

/**
 * Loads a tokenizer.json with @huggingface/tokenizers and the chat template of the
 * tokenizer_config.json beside it with @huggingface/jinja, offline.
 */
export async function loadChatTokenizer(path: string): Promise<ChatTokenizer> {
  const files = await readTokenizerFiles(path);
  const { Tokenizer } = await import("@huggingface/tokenizers");
  let tok: InstanceType<typeof Tokenizer>;
  try {
    tok = new Tokenizer(files.tokenizer, files.config);
  } catch (err) {
    throw new ChatTemplateError(`${path} is not a tokenizer this library can load: ${(err as Error).message}`);
  }
  const source = files.config["chat_template"];
  const templateText = typeof source === "string" ? source : Array.isArray(source) ? (source.find((t: { name?: string }) => t.name === "default") as { template?: string } | undefined)?.template : undefined;
  if (!templateText) {
    throw new ChatTemplateError(`${join(dirname(path), "tokenizer_config.json")} has no chat_template: token-exact generation renders the conversation itself and needs the model's template`);
  }
  const { Template } = await import("@huggingface/jinja");
  let template: InstanceType<typeof Template>;
  try {
    template = new Template(templateText);
  } catch (err) {
    throw new ChatTemplateError(`the chat_template in ${dirname(path)}/tokenizer_config.json does not parse: ${(err as Error).message}`);
  }
  const specials: Record<string, string> = {};
  for (const k of ["bos_token", "eos_token", "pad_token", "unk_token"]) {
    const t = specialTokenText(files.config[k]);
    if (t !== undefined) specials[k] = t;
  }
  const render: ChatTokenizer["render"] = (messages, options = {}) => {
    const ctx: Record<string, unknown> = { ...specials, messages: forTemplate(messages), add_generation_prompt: options.addGenerationPrompt ?? false };
    if (options.tools && options.tools.length > 0) ctx["tools"] = options.tools;
    try {
      return template.render(ctx);
    } catch (err) {
      throw new ChatTemplateError(`rendering the chat template failed: ${(err as Error).message}`);
    }
  };
  const libraryEncode = (text: string) => tok.encode(text, { add_special_tokens: false }).ids;
  const encode = pieceMemoEncoder(files.tokenizer, libraryEncode) ?? libraryEncode;

  // A stand-in exchange tells where an assistant turn ends and what the template writes after it.
  const standIn: ChatMessage[] = [
    { role: "user", content: STAND_IN },
    { role: "assistant", content: STAND_IN },
  ];
  const closed = render(standIn);
  const afterContent = closed.slice(closed.lastIndexOf(STAND_IN) + STAND_IN.length);
  const endOfTurn = afterContent.trimEnd();
  if (!endOfTurn) throw new ChatTemplateError(`the chat template in ${dirname(path)} closes assistant turns with no end-of-turn text; token-exact generation cannot find turn boundaries`);

  const bridgeOf = (next: readonly ChatMessage[], tools: readonly OpenAIFunctionTool[]) => {
    const full = render([...standIn, ...next], { tools, addGenerationPrompt: true });
    // The second stand-in is the assistant's content; its end-of-turn text must follow it.
    const at = full.indexOf(STAND_IN, full.indexOf(STAND_IN) + STAND_IN.length) + STAND_IN.length;
    if (at < STAND_IN.length || !full.startsWith(endOfTurn, at)) {
      throw new ChatTemplateError(`the chat template does not close an assistant turn with '${endOfTurn}' when messages follow it; the bridge between turns cannot be cut out of it`);
    }
    return full.slice(at + endOfTurn.length);
  };
  // Most templates write the tools before the first turn (Qwen, Hermes, Llama 3.1), so the
  // bridge does not depend on them and rendering them each turn is wasted; templates that
  // put tools near the last user message (Mistral) keep them.
  const probeTools: OpenAIFunctionTool[] = [{ type: "function", function: { name: "probe_tool", description: "probe", parameters: { type: "object", properties: {} } } }];
  const probeNext: ChatMessage[] = [
    { role: "tool", tool_call_id: "probe", name: "probe_tool", content: "probe output" },
    { role: "user", content: "probe question" },
  ];
  const toolsFree = bridgeOf(probeNext, probeTools) === bridgeOf(probeNext, []) && bridgeOf(probeNext.slice(1), probeTools) === bridgeOf(probeNext.slice(1), []);

  return {
    encode,
    decode: (ids) => tok.decode([...ids], { skip_special_tokens: false }),
    render,
    endOfTurn,
    endOfTurnIds: encode(endOfTurn),
    bridge: (next, tools) => bridgeOf(next, toolsFree ? [] : tools),
  };
}
