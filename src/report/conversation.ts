import type { Entry, ToolCallView, ToolErrorView } from "./model.js";
import type { RolloutExtras, ToolCallExtras } from "./rollout-extras.js";

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * Message content as text. OpenAI-style content may be a list of parts; Atropos's messages
 * may be plain strings; anything else is shown as JSON rather than dropped.
 */
export function contentText(content: unknown): string {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => {
        if (typeof part === "string") return part;
        if (isObject(part) && typeof part["text"] === "string") return part["text"];
        if (isObject(part) && typeof part["type"] === "string") return `[${part["type"]}]`;
        return JSON.stringify(part);
      })
      .join("\n");
  }
  return JSON.stringify(content);
}

/** `<think>…</think>` blocks inside assistant content (hermes-style models), split from the answer. */
function splitThinking(text: string): { thinking: string; answer: string } {
  const thoughts: string[] = [];
  const answer = text.replace(/<think>([\s\S]*?)(<\/think>|$)/g, (_m, inner: string) => {
    thoughts.push(inner.trim());
    return "";
  });
  return { thinking: thoughts.join("\n\n"), answer: thoughts.length ? answer.trim() : text };
}

/**
 * A tool message as slotpool's agent loop writes it (`{"output", "exit_code", "error"}`), or
 * raw text from any other writer.
 */
function readToolResult(content: string): { output: string; exitCode?: number | null; error?: string } {
  if (content.startsWith("{")) {
    try {
      const v = JSON.parse(content) as unknown;
      if (isObject(v) && ("output" in v || "error" in v)) {
        const out: { output: string; exitCode?: number | null; error?: string } = { output: typeof v["output"] === "string" ? v["output"] : v["output"] === undefined ? "" : JSON.stringify(v["output"]) };
        if (typeof v["exit_code"] === "number" || v["exit_code"] === null) out.exitCode = v["exit_code"] as number | null;
        if (typeof v["error"] === "string" && v["error"] !== "") out.error = v["error"];
        return out;
      }
    } catch {
      // not JSON: shown as it is
    }
  }
  return { output: content };
}

export interface Conversation {
  entries: Entry[];
  toolCalls: ToolCallView[];
  toolErrors: ToolErrorView[];
  turns: number;
}

/**
 * Turns a trajectory's messages into entries (turn N = the Nth assistant message), pairing
 * each tool result with its call (by id, else in order) and with the extras' timing and exit
 * code when the line has them. Tool errors are the extras' list when present, else the
 * results that carry an error.
 */
export function buildConversation(messages: unknown, extras: RolloutExtras | undefined): Conversation {
  const entries: Entry[] = [];
  const list: unknown[] = Array.isArray(messages) ? messages : [messages];
  const extraCalls = extras?.tool_calls ?? [];
  const byId = new Map<string, ToolCallExtras>();
  for (const c of extraCalls) if (c.call_id !== undefined) byId.set(c.call_id, c);
  const calls = new Map<string, { tool: string; arguments: string }>();
  const callOrder: Array<{ tool: string; arguments: string; id?: string }> = [];
  let turn = 0;
  let resultIndex = 0;
  const toolCalls: ToolCallView[] = [];
  const derivedErrors: ToolErrorView[] = [];

  for (const m of list) {
    if (!isObject(m)) {
      entries.push({ kind: "text", role: "message", turn, text: contentText(m) });
      continue;
    }
    const role = typeof m["role"] === "string" ? m["role"] : "unknown";
    const text = contentText(m["content"]);
    if (role === "assistant") {
      turn++;
      const { thinking, answer } = splitThinking(text);
      const reasoning = [typeof m["reasoning_content"] === "string" ? m["reasoning_content"] : "", thinking].filter(Boolean).join("\n\n");
      if (reasoning) entries.push({ kind: "thinking", turn, text: reasoning });
      if (answer) entries.push({ kind: "text", role, turn, text: answer });
      const tcs = Array.isArray(m["tool_calls"]) ? m["tool_calls"] : [];
      for (const tc of tcs) {
        if (!isObject(tc)) continue;
        const fn = isObject(tc["function"]) ? tc["function"] : {};
        const tool = typeof fn["name"] === "string" ? fn["name"] : "?";
        const args = typeof fn["arguments"] === "string" ? fn["arguments"] : JSON.stringify(fn["arguments"] ?? {});
        const id = typeof tc["id"] === "string" ? tc["id"] : undefined;
        entries.push({ kind: "call", turn, tool, arguments: args, ...(id !== undefined ? { callId: id } : {}) });
        if (id !== undefined) calls.set(id, { tool, arguments: args });
        callOrder.push({ tool, arguments: args, ...(id !== undefined ? { id } : {}) });
      }
      continue;
    }
    if (role === "tool") {
      const id = typeof m["tool_call_id"] === "string" ? m["tool_call_id"] : undefined;
      const parsed = readToolResult(text);
      // The loop's note about an unparsable tool call answers no call.
      const answersCall = id !== "unparsed";
      const call = id !== undefined && calls.has(id) ? calls.get(id) : answersCall ? callOrder[resultIndex] : undefined;
      const extra = id !== undefined && byId.has(id) ? byId.get(id) : answersCall && byId.size === 0 ? extraCalls[resultIndex] : undefined;
      if (answersCall) resultIndex++;
      const tool = call?.tool ?? (typeof m["name"] === "string" ? m["name"] : "tool");
      const exitCode = extra?.exit_code !== undefined ? extra.exit_code : parsed.exitCode;
      const entry: Entry = { kind: "result", turn, tool, output: parsed.output };
      if (id !== undefined) entry.callId = id;
      if (exitCode !== undefined) entry.exitCode = exitCode;
      if (parsed.error !== undefined) entry.error = parsed.error;
      if (extra) entry.durationMs = extra.duration_ms;
      entries.push(entry);
      if (answersCall) {
        const args = call?.arguments ?? "";
        const view: ToolCallView = { turn, tool, arguments: args, success: extra ? extra.success : parsed.error === undefined };
        if (entry.durationMs !== undefined) view.durationMs = entry.durationMs;
        if (exitCode !== undefined) view.exitCode = exitCode;
        toolCalls.push(view);
      }
      if (parsed.error !== undefined) derivedErrors.push({ turn, tool: answersCall ? tool : "(unparsed tool call)", arguments: call?.arguments ?? "", error: parsed.error });
      continue;
    }
    entries.push({ kind: "text", role, turn, text });
  }
  return { entries, toolCalls, toolErrors: extras?.tool_errors ?? derivedErrors, turns: turn };
}
