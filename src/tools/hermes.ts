import { randomUUID } from "node:crypto";
import type { ParsedToolCall, ToolResult } from "../protocol/tool.js";
import { HermesParseError, ToolCallFormatError } from "./errors.js";
import type { OpenAIToolCall } from "./types.js";

/**
 * Hermes tool-call text format: the model writes
 *   <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call>
 * (or the shorter `<tool_call>bash{"command": "ls"}</tool_call>`), one block per call.
 * These helpers read such text into tool calls and convert them to and from OpenAI
 * `tool_calls`, so the same agent loop works with raw-completion and chat endpoints.
 */

const OPEN = "<tool_call>";
const CLOSE = "</tool_call>";
const NAME_JSON = /^([A-Za-z0-9_-]{1,64})\s*(\{[\s\S]*\})$/;
const CLIP = 200;

export interface HermesParseResult {
  /** The text outside the tool-call blocks, trimmed (the assistant's visible content). */
  content: string;
  /** The calls that parsed, in order; each has a `uniq_id`. */
  calls: ParsedToolCall[];
  /** One error per block that did not parse; give each back to the model as an error result. */
  errors: HermesParseError[];
}

export interface HermesParseOptions {
  /** Makes ids for calls (default `call_<uuid>`). */
  newId?: () => string;
}

/** Reads every `<tool_call>` block of `text`. Never throws: bad blocks land in `errors`. */
export function parseHermesToolCalls(text: string, options: HermesParseOptions = {}): HermesParseResult {
  const newId = options.newId ?? (() => `call_${randomUUID()}`);
  const calls: ParsedToolCall[] = [];
  const errors: HermesParseError[] = [];
  const outside: string[] = [];
  let pos = 0;
  for (;;) {
    const start = text.indexOf(OPEN, pos);
    if (start < 0) {
      outside.push(text.slice(pos));
      break;
    }
    outside.push(text.slice(pos, start));
    const bodyStart = start + OPEN.length;
    const end = text.indexOf(CLOSE, bodyStart);
    const nextOpen = text.indexOf(OPEN, bodyStart);
    let body: string;
    if (end < 0 || (nextOpen >= 0 && nextOpen < end)) {
      // A block cut short. At the very end of the text it is usually a stop sequence
      // that swallowed the closing tag: accept it if its body is complete.
      const stop = nextOpen >= 0 ? nextOpen : text.length;
      body = text.slice(bodyStart, stop);
      pos = stop;
      if (nextOpen >= 0) {
        errors.push(new HermesParseError(`a <tool_call> block is not closed with </tool_call> before the next one begins`, clip(body)));
        continue;
      }
    } else {
      body = text.slice(bodyStart, end);
      pos = end + CLOSE.length;
    }
    const parsed = parseBlock(body);
    if (parsed instanceof HermesParseError) errors.push(parsed);
    else calls.push({ name: parsed.name, arguments: parsed.arguments, uniq_id: newId() });
  }
  return { content: outside.join("").trim(), calls, errors };
}

/** Like parseHermesToolCalls, but throws the first block's error. */
export function parseHermesToolCallsStrict(text: string, options: HermesParseOptions = {}): { content: string; calls: ParsedToolCall[] } {
  const r = parseHermesToolCalls(text, options);
  if (r.errors.length) throw r.errors[0]!;
  return { content: r.content, calls: r.calls };
}

function parseBlock(raw: string): { name: string; arguments: Record<string, unknown> } | HermesParseError {
  const body = raw.trim();
  if (!body) return new HermesParseError(`empty <tool_call> block: write {"name": ..., "arguments": {...}} inside it`, raw);
  if (body.startsWith("{")) {
    let value: unknown;
    try {
      value = JSON.parse(body);
    } catch (err) {
      return new HermesParseError(`the <tool_call> block is not valid JSON (${(err as Error).message}): ${clip(body)}`, clip(body));
    }
    if (!isObject(value)) return new HermesParseError(`the <tool_call> block must hold a JSON object, got ${describe(value)}`, clip(body));
    const name = value["name"];
    if (typeof name !== "string" || !name.trim()) {
      return new HermesParseError(`the <tool_call> block has no "name" string: ${clip(body)}`, clip(body));
    }
    const args = value["arguments"] ?? value["parameters"] ?? {};
    const decoded = decodeArguments(args);
    if (typeof decoded === "string") return new HermesParseError(`tool call '${name}': ${decoded}`, clip(body));
    return { name: name.trim(), arguments: decoded };
  }
  const m = NAME_JSON.exec(body);
  if (!m) {
    return new HermesParseError(
      `cannot read the <tool_call> block: expected {"name": ..., "arguments": {...}} or name{...}, got: ${clip(body)}`,
      clip(body),
    );
  }
  let value: unknown;
  try {
    value = JSON.parse(m[2]!);
  } catch (err) {
    return new HermesParseError(`tool call '${m[1]}': the arguments are not valid JSON (${(err as Error).message})`, clip(body));
  }
  if (!isObject(value)) return new HermesParseError(`tool call '${m[1]}': the arguments must be a JSON object`, clip(body));
  return { name: m[1]!, arguments: value };
}

/** Arguments as an object; a JSON string holding an object is accepted too. Returns an error text otherwise. */
function decodeArguments(args: unknown): Record<string, unknown> | string {
  if (isObject(args)) return args;
  if (typeof args === "string") {
    if (!args.trim()) return {};
    try {
      const v: unknown = JSON.parse(args);
      if (isObject(v)) return v;
      return `"arguments" must be a JSON object, got a string holding ${describe(v)}`;
    } catch {
      return `"arguments" must be a JSON object, got a string that is not JSON`;
    }
  }
  return `"arguments" must be a JSON object, got ${describe(args)}`;
}

/** The Hermes text of one call: what the model would have written. */
export function formatHermesToolCall(call: { name: string; arguments?: Record<string, unknown> }): string {
  return `${OPEN}\n${JSON.stringify({ name: call.name, arguments: call.arguments ?? {} })}\n${CLOSE}`;
}

/** The Hermes text of a tool's result, as fed back to the model in a tool/user turn. */
export function formatHermesToolResponse(name: string, result: Pick<ToolResult, "success" | "output" | "error">): string {
  const content = result.success ? result.output : result.error || result.output;
  return `<tool_response>\n${JSON.stringify({ name, content })}\n</tool_response>`;
}

/** Calls → OpenAI `tool_calls[]` (ids from `uniq_id`, or made). */
export function toOpenAiToolCalls(calls: ReadonlyArray<{ name: string; arguments?: Record<string, unknown>; uniq_id?: string }>): OpenAIToolCall[] {
  return calls.map((c) => ({
    id: c.uniq_id ?? `call_${randomUUID()}`,
    type: "function",
    function: { name: c.name, arguments: JSON.stringify(c.arguments ?? {}) },
  }));
}

/** OpenAI `tool_calls[]` → calls (`uniq_id` = the OpenAI id). Throws ToolCallFormatError for arguments that are not a JSON object. */
export function fromOpenAiToolCalls(toolCalls: ReadonlyArray<OpenAIToolCall>): ParsedToolCall[] {
  return toolCalls.map((tc) => fromOpenAiToolCall(tc));
}

export function fromOpenAiToolCall(tc: OpenAIToolCall): ParsedToolCall {
  const name = tc.function?.name;
  if (typeof name !== "string" || !name) throw new ToolCallFormatError(`tool call ${tc.id ?? "(no id)"} has no function name`, tc.id);
  const raw = tc.function.arguments as unknown;
  const decoded = decodeArguments(raw ?? {});
  if (typeof decoded === "string") throw new ToolCallFormatError(`tool call ${tc.id} (${name}): ${decoded}`, tc.id);
  return { name, arguments: decoded, uniq_id: tc.id };
}

/** The error result a model gets for a call it wrote badly (so it can correct itself). */
export function invalidToolCallResult(error: Error, uniqId: string | null = null): ToolResult {
  return { success: false, output: "", error: error.message, metadata: { invalid_tool_call: true }, uniq_id: uniqId };
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  return `a ${typeof v}`;
}

function clip(s: string): string {
  return s.length > CLIP ? `${s.slice(0, CLIP)}…` : s;
}
