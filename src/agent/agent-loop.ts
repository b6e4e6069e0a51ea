import type { ToolCall, ToolResult } from "../protocol/tool.js";
import { toolInfraCause } from "../protocol/infra.js";
import { AgentError, ChatRequestError, ChatResponseError, InfraToolError } from "./errors.js";
import { addUsage, emptyUsage, type ChatMessage, type OpenAIFunctionTool, type TokenUsage, type TurnTokens } from "./messages.js";
import type { AgentPolicy } from "./policy.js";

/** One tool call as the loop ran it. */
export interface ToolCallRecord {
  turn: number;
  tool: string;
  /** The arguments as the model wrote them (a JSON string). */
  arguments: string;
  success: boolean;
  durationMs: number;
  exitCode?: number | null;
  /** The id of the call (pairs it with its tool message). */
  callId?: string;
}

/** A tool call that failed (the seeds' `ToolError`): turn, tool, arguments, error, output. */
export interface ToolErrorRecord {
  turn: number;
  tool: string;
  arguments: string;
  error: string;
  toolResult: string;
}

export interface TurnRecord {
  turn: number;
  finishReason: string;
  toolCalls: number;
  tokens?: TurnTokens;
}

/**
 * - `stop` / `length`: the model answered without calling tools (as the server said).
 * - `max_turns`: it was still calling tools when the turn budget ran out.
 * - `error`: the model server failed (after retries); see `error`.
 */
export type AgentFinishReason = "stop" | "length" | "max_turns" | "error" | (string & {});

export interface AgentResult {
  messages: ChatMessage[];
  turnsUsed: number;
  finishReason: AgentFinishReason;
  /** The last assistant text (empty when there is none). */
  finalResponse: string;
  toolCalls: ToolCallRecord[];
  toolErrors: ToolErrorRecord[];
  usage: TokenUsage;
  turns: TurnRecord[];
  /** Why the rollout stopped early (model server failure). */
  error?: string;
}

/** Runs one tool call of this trajectory (in its slot). Never throws for tool failures. */
export type ExecuteTool = (call: ToolCall, info: { turn: number }) => Promise<ToolResult>;

export interface AgentLoopOptions {
  policy: AgentPolicy;
  tools: OpenAIFunctionTool[];
  /** Initial conversation (system + user). */
  messages: ChatMessage[];
  executeTool: ExecuteTool;
  maxTurns: number;
  /**
   * Whether the model may call this name (defaults to the names in `tools`; pass the registry's
   * `has` to accept aliases such as `terminal`). Others get an error result without running.
   */
  isKnownTool?: (name: string) => boolean;
  signal?: AbortSignal;
  /**
   * Asked before each turn: true ends the loop there with `finishReason: "branch"` (a
   * branching group forks the trajectory at that point, see src/env/branching.ts).
   */
  stopBefore?: (next: { turn: number; result: AgentResult }) => boolean;
  /**
   * Continue this result (a branch point's) instead of starting from `messages`: its
   * messages (the same objects: a token-exact policy extends their ids), tool calls and turns
   * are copied, and turns go on from `resume.turnsUsed + 1`.
   */
  resume?: AgentResult;
}

/** Feeds a tool result back to the model: the output, plus exit code and error when they say something. */
export function formatToolResultForModel(result: ToolResult): string {
  const exit = result.metadata["exit_code"];
  const body: Record<string, unknown> = { output: result.output };
  if (typeof exit === "number") body["exit_code"] = exit;
  if (!result.success || result.error) body["error"] = result.error || "the tool call failed";
  return JSON.stringify(body);
}

/**
 * The agent loop: ask the policy for a turn, run its tool calls in the order given (each in
 * this trajectory's slot), append the results, repeat until the model answers without tools
 * or `maxTurns` is used up. Model-server failures end the rollout with `finishReason: "error"`;
 * exceptions thrown by `executeTool` (a lost slot) propagate so the caller can retry, and a
 * result the infrastructure marked (protocol/infra.ts) throws InfraToolError: the policy
 * never sees it as its own error.
 */
export async function runAgentLoop(options: AgentLoopOptions): Promise<AgentResult> {
  if (!Number.isInteger(options.maxTurns) || options.maxTurns < 1) {
    throw new AgentError(`maxTurns must be a whole number ≥ 1, got ${options.maxTurns}`);
  }
  const offered = options.tools.map((t) => t.function.name);
  const isKnown = options.isKnownTool ?? ((name: string) => offered.includes(name));
  const from = options.resume;
  const result: AgentResult = {
    messages: [...(from?.messages ?? options.messages)],
    turnsUsed: from?.turnsUsed ?? 0,
    finishReason: "max_turns",
    finalResponse: from?.finalResponse ?? "",
    toolCalls: [...(from?.toolCalls ?? [])],
    toolErrors: [...(from?.toolErrors ?? [])],
    usage: from ? { ...from.usage } : emptyUsage(),
    turns: [...(from?.turns ?? [])],
  };

  for (let turn = result.turnsUsed + 1; turn <= options.maxTurns; turn++) {
    options.signal?.throwIfAborted();
    if (options.stopBefore?.({ turn, result })) {
      result.finishReason = "branch";
      return result;
    }
    let step;
    try {
      step = await options.policy.nextTurn({ messages: result.messages, tools: options.tools, turn, ...(options.signal ? { signal: options.signal } : {}) });
    } catch (err) {
      if (err instanceof ChatRequestError || err instanceof ChatResponseError) {
        result.finishReason = "error";
        result.error = err.message;
        return result;
      }
      throw err;
    }
    result.turnsUsed = turn;
    result.messages.push(step.message);
    addUsage(result.usage, step.usage);
    const calls = step.message.tool_calls ?? [];
    const record: TurnRecord = { turn, finishReason: step.finishReason, toolCalls: calls.length };
    if (step.tokens) record.tokens = step.tokens;
    result.turns.push(record);
    if (step.message.content) result.finalResponse = step.message.content;

    if (step.parseError) {
      // The model tried to call tools but wrote them wrong: tell it, and let it try again.
      result.toolErrors.push({ turn, tool: "(unparsed tool call)", arguments: step.message.content ?? "", error: step.parseError, toolResult: "" });
      result.messages.push({ role: "tool", name: "tool_call_parser", tool_call_id: "unparsed", content: JSON.stringify({ error: step.parseError }) });
      if (calls.length === 0) continue;
    }
    if (calls.length === 0) {
      result.finishReason = step.finishReason === "tool_calls" ? "stop" : step.finishReason;
      return result;
    }
    for (const call of calls) {
      const started = performance.now();
      const toolResult = await runOne(call.function.name, call.function.arguments, isKnown, offered, options.executeTool, turn);
      const durationMs = performance.now() - started;
      const infra = toolInfraCause(toolResult.metadata);
      if (infra) throw new InfraToolError(`tool call ${call.function.name} on turn ${turn} was not run to its end by the infrastructure (${infra}): ${toolResult.error || "no reason given"}`, infra, call.function.name);
      const exit = toolResult.metadata["exit_code"];
      result.toolCalls.push({
        turn,
        tool: call.function.name,
        arguments: call.function.arguments,
        success: toolResult.success,
        durationMs,
        callId: call.id,
        ...(typeof exit === "number" || exit === null ? { exitCode: exit as number | null } : {}),
      });
      if (!toolResult.success) {
        result.toolErrors.push({ turn, tool: call.function.name, arguments: call.function.arguments, error: toolResult.error || "the tool call failed", toolResult: toolResult.output });
      }
      result.messages.push({ role: "tool", tool_call_id: call.id, name: call.function.name, content: formatToolResultForModel(toolResult) });
    }
  }
  result.finishReason = "max_turns";
  return result;
}

async function runOne(name: string, rawArgs: string, isKnown: (n: string) => boolean, offered: string[], execute: ExecuteTool, turn: number): Promise<ToolResult> {
  const fail = (error: string): ToolResult => ({ success: false, output: "", error, metadata: {}, uniq_id: null });
  if (!isKnown(name)) {
    return fail(`unknown tool '${name}'; available tools: ${[...offered].sort().join(", ") || "(none)"}`);
  }
  let args: unknown;
  try {
    args = rawArgs.trim() === "" ? {} : JSON.parse(rawArgs);
  } catch (err) {
    return fail(`the arguments of ${name} are not valid JSON (${(err as Error).message})`);
  }
  if (!args || typeof args !== "object" || Array.isArray(args)) {
    return fail(`the arguments of ${name} must be a JSON object`);
  }
  return execute({ name, arguments: args as Record<string, unknown> }, { turn });
}
