import { randomUUID } from "node:crypto";
import { formatToolResultForModel, type AgentResult } from "../agent/agent-loop.js";
import { emptyUsage, type ChatMessage, type OpenAIFunctionTool } from "../agent/messages.js";
import type { AgentEnv } from "../env/agent-env.js";
import { routeToolCall } from "../env/env-tools.js";
import { scoreRollout } from "../env/rollout-score.js";
import { envToolTimeouts, ToolContext } from "../env/tool-context.js";
import { rewardContext } from "../env/reward-calls.js";
import { requestedTimeoutS } from "../executor/config.js";
import type { Logger } from "../observability/logger.js";
import { isSlotLostError, SlotAcquireTimeoutError } from "../pool/errors.js";
import type { ToolResult } from "../protocol/tool.js";
import { CapacityReachedError, EpisodeInfraError, NoEpisodeError } from "./errors.js";

/** The tool every env served over OpenEnv offers (unless it has its own `submit`): it ends the episode. */
export const SUBMIT_TOOL: OpenAIFunctionTool = {
  type: "function",
  function: {
    name: "submit",
    description: "End the episode: the work in the workspace is scored now and no further tool call runs. Optional `answer`: your final answer as text.",
    parameters: { type: "object", properties: { answer: { type: "string", description: "your final answer, if the task asks for one" } }, additionalProperties: false },
  },
};

/** A tool as OpenEnv's `list_tools` and MCP's `tools/list` give it. */
export interface ListedTool {
  name: string;
  description: string;
  input_schema: Record<string, unknown>;
}

/** The tools of one episode: the env's (toolsets and its own) and `submit`, if the env has none. */
export interface EpisodeTools {
  openai: OpenAIFunctionTool[];
  /** Canonical names the agent may call. */
  names: string[];
  /** Whether `submit` is ours (ends the episode without running anything) or the env's. */
  ownSubmit: boolean;
}

export function episodeTools(env: AgentEnv<unknown>): EpisodeTools {
  const group = env.resolveTools();
  const envHasSubmit = group.names.includes("submit") || env.tools.registry.resolve("submit") !== undefined;
  return envHasSubmit
    ? { openai: group.tools, names: group.names, ownSubmit: false }
    : { openai: [...group.tools, SUBMIT_TOOL], names: [...group.names, "submit"], ownSubmit: true };
}

export function listedTools(tools: readonly OpenAIFunctionTool[]): ListedTool[] {
  return tools.map((t) => ({ name: t.function.name, description: t.function.description ?? "", input_schema: (t.function.parameters as Record<string, unknown>) ?? { type: "object" } }));
}

/** Why a tool call did not reach the tool (OpenEnv's ToolErrorType); the tool's own failures are results. */
export type ToolErrorType = "tool_not_found" | "invalid_args";

/** One call_tool step as the episode answers it. */
export interface ToolStep {
  toolName: string;
  result: ToolResult;
  /** Set when the call never ran (unknown tool, arguments its schema refuses). */
  error?: { error_type: ToolErrorType; message: string };
  done: boolean;
  reward: number | null;
  /** Set when done: the reward's metadata and metrics, why the episode ended, its steps. */
  metadata: Record<string, unknown>;
}

export interface EpisodeOptions {
  log: Logger;
}

/**
 * One OpenEnv episode: one item, in one slot of its own, from reset to `done`. `begin` takes
 * the slot (waiting up to the pool's acquire timeout, else CapacityReachedError), resets it
 * into the item's template and runs `setupWorkspace`; each `callTool` runs in that slot as the
 * agent loop of `process` would (same routing, isolation and timeout) and counts a step; the
 * `submit` tool or the turn limit ends it, and `computeReward` scores it in the slot before
 * the slot is released and reset. An infrastructure failure ends it with EpisodeInfraError,
 * never a reward.
 */
export class Episode<Item = unknown> {
  readonly trajectoryId = randomUUID();
  readonly maxTurns: number;
  stepCount = 0;
  done = false;
  reward: number | null = null;
  private readonly ctx: ToolContext;
  private readonly result: AgentResult;
  private released = false;
  private queue: Promise<unknown> = Promise.resolve();
  /** Aborted when the episode is abandoned: its running call is cancelled (the slot's reset then kills what it started). */
  private readonly stop = new AbortController();

  private constructor(
    readonly env: AgentEnv<Item>,
    readonly item: Item,
    /** The item's number in the env's order (what `seed` selects). */
    readonly itemIndex: number,
    readonly episodeId: string,
    readonly tools: EpisodeTools,
    private readonly options: EpisodeOptions,
  ) {
    this.maxTurns = env.turnsFor(item);
    this.ctx = new ToolContext(this.trajectoryId, env.tools.executor, envToolTimeouts(env.config.executor));
    this.result = { messages: env.initialMessages(item), turnsUsed: 0, finishReason: "max_turns", finalResponse: "", toolCalls: [], toolErrors: [], usage: emptyUsage(), turns: [] };
  }

  static async begin<Item>(env: AgentEnv<Item>, selected: { item: Item; index: number }, episodeId: string | undefined, options: EpisodeOptions): Promise<Episode<Item>> {
    const episode = new Episode(env, selected.item, selected.index, episodeId ?? randomUUID(), episodeTools(env as AgentEnv<unknown>), options);
    try {
      await episode.prepare();
    } catch (err) {
      await episode.release();
      throw err;
    }
    return episode;
  }

  get messages(): readonly ChatMessage[] {
    return this.result.messages;
  }

  /** The reset observation: the task's messages and the tools, with the episode's facts. */
  initialObservation(): Record<string, unknown> {
    const task = [...this.result.messages].reverse().find((m) => m.role === "user")?.content ?? "";
    return {
      episode_id: this.episodeId,
      task,
      messages: this.result.messages,
      // Not `tools`: OpenEnv's MCP client reads an observation with `tools` as a list_tools answer.
      available_tools: listedTools(this.tools.openai),
      max_turns: this.maxTurns,
      item_index: this.itemIndex,
    };
  }

  /**
   * Runs one tool call in the episode's slot; calls of one episode run one at a time, in order.
   * Its timeout: `timeoutMs` (OpenEnv's `timeout_s`, this action's own bound), else the call's
   * `timeout` argument, within the env's bounds (executor.minTimeoutS..maxTimeoutS), else the
   * env's executor.defaultTimeoutS — as the same call gets in `process`.
   */
  callTool(name: string, args: Record<string, unknown>, timeoutMs?: number): Promise<ToolStep> {
    const timeoutS = this.ctx.timeoutFor(timeoutMs !== undefined ? timeoutMs / 1000 : requestedTimeoutS(args));
    const run = this.queue.then(() => this.runCall(name, args, timeoutS * 1000));
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Ends the episode here and scores it (HTTP /step: the one action is the whole episode). */
  finishNow(): Promise<Record<string, unknown>> {
    const run = this.queue.then(() => {
      if (this.done) throw new NoEpisodeError(`episode ${this.episodeId} is over (done)`);
      return this.finish("stop");
    });
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Ends the episode without a reward (reset, close, idle timeout): the slot is reset and released. */
  async abandon(): Promise<void> {
    this.done = true;
    this.interrupt();
    await this.queue;
    await this.release();
  }

  /** Cancels the running call, if any (the episode is being abandoned). */
  interrupt(): void {
    this.stop.abort();
  }

  private async prepare(): Promise<void> {
    const executor = this.env.tools.executor;
    // itemTemplate: an item's task image that cannot exist is the env's error (ItemImageError), not the infrastructure's.
    const template = this.env.itemTemplate(this.item);
    try {
      if (template) {
        if (!executor.prepareWorkspace) throw new EpisodeInfraError("setup", `the env names a workspace template but its executor cannot prepare one`);
        await executor.prepareWorkspace(this.trajectoryId, template);
      } else if (executor.claimSlot) {
        await executor.claimSlot(this.trajectoryId);
      }
    } catch (err) {
      if (err instanceof SlotAcquireTimeoutError) throw new CapacityReachedError(err.timeoutMs, err.message, err.counts.held, err.counts.slots);
      throw this.infra(err, "setup", "the episode's slot could not be prepared");
    }
    try {
      await this.env.setupWorkspace(this.item, this.ctx);
    } catch (err) {
      throw this.infra(err, "setup", "the env's setupWorkspace failed");
    }
  }

  private async runCall(name: string, args: Record<string, unknown>, timeoutMs: number): Promise<ToolStep> {
    if (this.done) throw new NoEpisodeError(`episode ${this.episodeId} is over (done): send reset to start a new one`);
    const turn = ++this.stepCount;
    const callId = `call_${turn}`;
    this.result.turnsUsed = turn;
    this.result.turns.push({ turn, finishReason: "tool_calls", toolCalls: 1 });
    this.result.messages.push({ role: "assistant", content: null, tool_calls: [{ id: callId, type: "function", function: { name, arguments: JSON.stringify(args) } }] });
    const started = performance.now();
    const registry = this.env.tools.registry;
    const def = registry.resolve(name);
    const submit = name === "submit" && this.tools.ownSubmit;
    let result: ToolResult;
    let error: ToolStep["error"];
    if (submit) {
      const answer = typeof args["answer"] === "string" ? args["answer"] : "";
      if (answer) this.result.finalResponse = answer;
      result = { success: true, output: "submitted", error: "", metadata: {}, uniq_id: callId };
    } else if (!def || !this.tools.names.includes(def.name)) {
      const message = `unknown tool '${name}'; available tools: ${[...this.tools.names].sort().join(", ")}`;
      error = { error_type: "tool_not_found", message };
      result = { success: false, output: "", error: message, metadata: {}, uniq_id: callId };
    } else {
      const checked = registry.check(def.name, args);
      if (!checked.ok) error = { error_type: "invalid_args", message: checked.error.message };
      try {
        result = await routeToolCall(registry, { name: def.name, arguments: args, uniq_id: callId }, this.ctx, (call) =>
          this.env.tools.executor.execute(this.trajectoryId, call, { timeoutMs, signal: this.stop.signal }),
        );
        if (this.stop.signal.aborted) throw new NoEpisodeError(`episode ${this.episodeId} was ended while its call '${name}' ran (its session closed): the call was stopped`);
      } catch (err) {
        this.done = true;
        await this.release();
        if (err instanceof NoEpisodeError) throw err;
        throw this.infra(err, "tool", `the tool call '${name}' could not run`);
      }
    }
    const exit = result.metadata["exit_code"];
    this.result.toolCalls.push({ turn, tool: name, arguments: JSON.stringify(args), success: result.success, durationMs: performance.now() - started, callId, ...(typeof exit === "number" || exit === null ? { exitCode: exit as number | null } : {}) });
    if (!result.success) this.result.toolErrors.push({ turn, tool: name, arguments: JSON.stringify(args), error: result.error || "the tool call failed", toolResult: result.output });
    this.result.messages.push({ role: "tool", tool_call_id: callId, name, content: formatToolResultForModel(result) });

    const ends = submit || (name === "submit" && def !== undefined) ? "stop" : turn >= this.maxTurns ? "max_turns" : undefined;
    if (!ends) return { toolName: name, result, ...(error ? { error } : {}), done: false, reward: null, metadata: {} };
    const metadata = await this.finish(ends);
    return { toolName: name, result, ...(error ? { error } : {}), done: true, reward: this.reward, metadata };
  }

  /** Scores the episode in its slot (computeReward), then releases the slot (reset). */
  private async finish(reason: "stop" | "max_turns"): Promise<Record<string, unknown>> {
    this.done = true;
    this.result.finishReason = reason;
    try {
      // The reward's own timeout (rewardTimeoutS), as in `process`.
      const { ctx } = rewardContext(this.trajectoryId, this.env.tools.executor, this.env.config.rewardTimeoutS, this.env.config.executor.minTimeoutS);
      const scored = await scoreRollout(this.result, this.trajectoryId, () => this.env.verifyAndScore(this.item, this.result, ctx), this.options.log);
      if (scored.infraFailure) throw new EpisodeInfraError(scored.infraFailure.cause, scored.infraFailure.message);
      this.reward = scored.score;
      return { finish_reason: reason, steps: this.stepCount, reward_metadata: scored.scoreMetadata, ...(scored.metrics ? { metrics: scored.metrics } : {}) };
    } catch (err) {
      throw this.infra(err, "reward", "the reward could not be computed");
    } finally {
      await this.release();
    }
  }

  private infra(err: unknown, cause: string, what: string): Error {
    if (err instanceof EpisodeInfraError || err instanceof CapacityReachedError) return err;
    const message = err instanceof Error ? err.message : String(err);
    if (isSlotLostError(err)) return new EpisodeInfraError("slot_lost", `the episode's slot was lost: ${message}`);
    return new EpisodeInfraError(cause, `${what}: ${message}`);
  }

  private async release(): Promise<void> {
    if (this.released) return;
    this.released = true;
    await this.env.tools.executor.release(this.trajectoryId, { reset: true }).catch((err: unknown) => {
      this.options.log.warn({ trajectoryId: this.trajectoryId, err: String(err) }, "releasing the episode's slot failed");
    });
  }
}
