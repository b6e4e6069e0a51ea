import { parseHermesToolCalls, toOpenAiToolCalls } from "../tools/hermes.js";
import type { ChatMessage } from "./messages.js";

/**
 * Reads the text a model sampled (special tokens kept, end-of-turn token removed) into the
 * assistant message the agent loop works with. One parser per model family:
 * - `hermes`: `<tool_call>{"name": …, "arguments": …}</tool_call>` blocks (Hermes, many fine-tunes);
 * - `qwen3`: the same blocks, with a leading `<think>…</think>` moved to `reasoning_content`.
 */
export type ToolCallParserName = "hermes" | "qwen3";

export interface ParsedAssistantTurn {
  message: ChatMessage;
  /** Blocks that looked like tool calls but did not parse; the loop tells the model. */
  parseError?: string;
}

export type ToolCallParser = (text: string) => ParsedAssistantTurn;

function hermes(text: string, reasoning?: string): ParsedAssistantTurn {
  const parsed = parseHermesToolCalls(text);
  const message: ChatMessage = { role: "assistant", content: parsed.content === "" && parsed.calls.length > 0 ? null : parsed.content };
  if (parsed.calls.length > 0) message.tool_calls = toOpenAiToolCalls(parsed.calls);
  if (reasoning !== undefined) message.reasoning_content = reasoning;
  const turn: ParsedAssistantTurn = { message };
  if (parsed.errors.length > 0) turn.parseError = parsed.errors.map((e) => e.message).join("; ");
  return turn;
}

const THINK = /^\s*<think>([\s\S]*?)<\/think>\s*/;

function qwen3(text: string): ParsedAssistantTurn {
  const m = THINK.exec(text);
  if (!m) return hermes(text);
  return hermes(text.slice(m[0].length), m[1]!.replace(/^\n+|\n+$/g, ""));
}

export const TOOL_CALL_PARSERS: Record<ToolCallParserName, ToolCallParser> = { hermes: (t) => hermes(t), qwen3 };
