import { randomBytes } from "node:crypto";
import type { OpenAIFunctionTool, OpenAIToolCall } from "./messages.js";

/**
 * Tools described in the prompt, calls read back from raw text: the Hermes function-calling
 * format, for servers that return the model's text without parsing tool calls.
 */
export function hermesToolsSystemPrompt(tools: OpenAIFunctionTool[]): string {
  const sigs = tools.map((t) => JSON.stringify(t)).join("\n");
  return (
    "You are a function calling AI model. You are provided with function signatures within <tools></tools> XML tags. " +
    "You may call one or more functions to assist with the user query. Don't make assumptions about what values to plug into functions. " +
    `Here are the available tools: <tools>\n${sigs}\n</tools>\n` +
    'Use the following pydantic model json schema for each tool call you will make: {"properties": {"arguments": {"title": "Arguments", "type": "object"}, "name": {"title": "Name", "type": "string"}}, "required": ["arguments", "name"], "title": "FunctionCall", "type": "object"}\n' +
    "For each function call return a json object with function name and arguments within <tool_call></tool_call> XML tags as follows:\n" +
    '<tool_call>\n{"arguments": <args-dict>, "name": <function-name>}\n</tool_call>'
  );
}

export interface HermesParse {
  /** Text before the first `<tool_call>` (null when empty), or the whole text when there are no calls. */
  content: string | null;
  calls: OpenAIToolCall[];
  /** Set when the text holds `<tool_call>` tags that do not parse: then `calls` is empty (all or nothing, as vLLM's Hermes parser). */
  error?: string;
}

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";

/** Python `json.dumps` spacing (`{"a": 1, "b": [1, 2]}`), as vLLM's Hermes parser emits arguments. */
export function pythonJsonDumps(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) return `[${value.map(pythonJsonDumps).join(", ")}]`;
  return `{${Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .map(([k, v]) => `${JSON.stringify(k)}: ${pythonJsonDumps(v)}`)
    .join(", ")}}`;
}

/** Reads every closed `<tool_call>…</tool_call>` block, or one final unclosed block running to the end. */
export function parseHermesToolCalls(text: string): HermesParse {
  const first = text.indexOf(OPEN);
  if (first < 0) return { content: text, calls: [] };
  const before = text.slice(0, first).trim();
  const content = before.length > 0 ? before : null;
  const blocks: string[] = [];
  let pos = first;
  while (pos >= 0 && pos < text.length) {
    const start = pos + OPEN.length;
    const end = text.indexOf(CLOSE, start);
    if (end < 0) {
      blocks.push(text.slice(start));
      break;
    }
    blocks.push(text.slice(start, end));
    pos = text.indexOf(OPEN, end + CLOSE.length);
  }
  const calls: OpenAIToolCall[] = [];
  for (const [i, raw] of blocks.entries()) {
    let obj: unknown;
    try {
      obj = JSON.parse(raw.trim());
    } catch (err) {
      return { content: text, calls: [], error: `tool call ${i + 1} is not valid JSON (${(err as Error).message}): ${raw.trim().slice(0, 200)}` };
    }
    const o = obj as { name?: unknown; arguments?: unknown };
    if (!o || typeof o !== "object" || typeof o.name !== "string" || o.arguments === undefined) {
      return { content: text, calls: [], error: `tool call ${i + 1} needs "name" (string) and "arguments": ${raw.trim().slice(0, 200)}` };
    }
    const args = typeof o.arguments === "string" ? o.arguments : pythonJsonDumps(o.arguments);
    calls.push({ id: `chatcmpl-tool-${randomBytes(16).toString("hex")}`, type: "function", function: { name: o.name, arguments: args } });
  }
  return { content, calls };
}

/** The text form of an assistant's tool calls, for prompts of servers that take raw text. */
export function renderHermesToolCalls(calls: OpenAIToolCall[]): string {
  return calls
    .map((c) => {
      let args: unknown = c.function.arguments;
      try {
        args = JSON.parse(c.function.arguments);
      } catch {
        // keep the raw string: the model wrote it that way
      }
      return `${OPEN}\n${JSON.stringify({ name: c.function.name, arguments: args })}\n${CLOSE}`;
    })
    .join("\n");
}

/** A tool result as Hermes models expect it back. */
export function renderHermesToolResponse(name: string, content: string): string {
  return `<tool_response>\n${JSON.stringify({ name, content })}\n</tool_response>`;
}
