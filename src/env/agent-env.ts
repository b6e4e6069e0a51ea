import { randomUUID } from "node:crypto";
import pLimit from "p-limit";
import type { z } from "zod";
import { runAgentLoop, type AgentResult } from "../agent/agent-loop.js";
import { chatClientFor, type ChatCallSummary, type ChatCompletionsClient } from "../agent/chat-client.js";
import { checkModelServer } from "../agent/model-check.js";
import { loadChatTokenizer, type ChatTokenizer } from "../agent/chat-template.js";
import { probeTokenBackend, type TokenBackend } from "../agent/completions-backends.js";
import { TokenExactPolicy } from "../agent/token-exact-policy.js";
import type { ChatMessage } from "../agent/messages.js";
import { ChatModelPolicy } from "../agent/model-policy.js";
import { OraclePolicy, type OracleScript } from "../agent/oracle-policy.js";
import type { AgentPolicy } from "../agent/policy.js";
import { createLogger, type Logger } from "../observability/logger.js";
import type { TemplateSpec } from "../pool/template-affinity.js";
import { resolveGroupTools, type GroupTools } from "../tools/distributions.js";
import type { ToolBackend, ToolBackendFactory } from "./backend.js";
import { AgentEnvConfigSchema, parseEnvConfig, type AgentEnvConfig } from "./config.js";
import { EnvConfigError, EnvError, NoPolicyError, TrajectoryFailedError } from "./errors.js";
import { checkedTemplate } from "./item-image.js";
import { summarizeIsolation, type IsolationSummary } from "./isolation.js";
import { applyGroupScore, type GroupMember, type GroupScore } from "./group-score.js";
import { evalItemHandlers, evalResult, type EvalResult, type EvaluateOptions } from "./evaluation.js";
import { scoreRollout, type ScoreResult } from "./rollout-score.js";
import { trajectoryTokens, type GroupOutcome, type TrajectoryOutcome } from "./scored-group.js";
import { collectGroup } from "./group-collector.js";
import { collectBranchingGroup, type BranchPoint } from "./branching.js";
import { isSlotLostError } from "../pool/errors.js";
import { envToolTimeouts, ToolContext } from "./tool-context.js";
import { requestedTimeoutS } from "../executor/config.js";
import { throwIfInfraFailure, type InfraStage } from "./infra-failure.js";
import type { CollectOptions } from "./collect-options.js";
import { linkedSignal } from "./linked-signal.js";
import { CallTally, TrajectoryInterruptedError } from "./interruption.js";
import { rewardContext } from "./reward-calls.js";
import { ModelBreaker } from "./model-breaker.js";
import { registerEnvTools, routeToolCall } from "./env-tools.js";
import type { ToolDefinition } from "../tools/types.js";
import { loadTokenizerJson, type TextTokenizer } from "./tokens.js";

export type { ScoreResult } from "./rollout-score.js";
export type { CollectOptions } from "./collect-options.js";
export type { EvalSample, EvalResult, EvaluateOptions } from "./evaluation.js";

/** How an env instance gets its tools backend, model and logger (all optional). */
export interface AgentEnvRuntime {
  /** A ready backend, or a factory; default: SlotPool + ToolExecutor built from the config. */
  backend?: ToolBackend | ToolBackendFactory;
  /** Overrides the model/oracle choice for every item. */
  policy?: AgentPolicy;
  logger?: Logger;
}

type EnvClass = { configSchema: z.ZodType; envName?: string; name: string };

/**
 * The base class of an env (the seeds' HermesAgentBaseEnv / AgentEnv). Subclass it and
 * write the hooks:
 *
 * - `setup()`: load data, once.
 * - `getNextItem()`: the next item, or null when there are no more.
 * - `buildTask(item)`: the user message (or the whole initial conversation).
 * - `setupWorkspace(item, ctx)`: optional; prepare the trajectory's slot before the agent starts.
 * - `computeReward(item, result, ctx)` (abstract: every env writes it): score the rollout,
 *   running commands in the trajectory's own slot through `ctx` before it is reset; a number,
 *   or `{score, metadata, metrics}`.
 * - `scoreGroup(item, members)`: optional; score the whole group at once (relative or
 *   pairwise rewards), after each trajectory's own score.
 * - `maxTurnsFor(item)`: optional; the item's own turn limit (default: config `maxTurns`).
 * - `oracle(item)`: optional; a scripted policy so the env runs without a model.
 * - `evaluate()`: optional; by default runs `getEvalItems()` once each.
 *
 * `collectTrajectories(item)` runs `groupSize` trajectories concurrently, each in its own
 * slot, restarting a trajectory whose slot was lost (up to `slotLossRetries`), and returns
 * the scored group, or the reason it failed.
 */
export abstract class AgentEnv<Item = unknown, Config extends AgentEnvConfig = AgentEnvConfig> {
  /** Subclasses with extra settings set this to `AgentEnvConfigSchema.extend({...})`. */
  static configSchema: z.ZodType = AgentEnvConfigSchema;
  /** The env's name when the config gives none (default: the class name). */
  static envName?: string;

  readonly config: Config;
  protected readonly log: Logger;
  private backend: ToolBackend | undefined;
  private readonly runtime: AgentEnvRuntime;
  private modelClient: ChatCompletionsClient | undefined;
  private tokenizer: TextTokenizer | undefined;
  /** Token-exact servers (serverType vllm/sglang): the model's template and the probed endpoint. */
  private chatTokenizer: ChatTokenizer | undefined;
  private tokenBackend: TokenBackend | undefined;
  private started = false;
  /** The model server answered checkModel() (start() then does not ask again). */
  private modelChecked = false;
  private ownTools: readonly ToolDefinition[] = [];
  private removeOwnTools: (() => void) | undefined;

  constructor(config: Record<string, unknown> = {}, runtime: AgentEnvRuntime = {}) {
    const cls = this.constructor as unknown as EnvClass;
    this.config = parseEnvConfig(cls.configSchema, config, cls.envName ?? cls.name) as Config;
    this.runtime = runtime;
    this.log = runtime.logger ?? createLogger({ name: `env:${this.name}` });
  }

  get name(): string {
    const cls = this.constructor as unknown as EnvClass;
    return this.config.name ?? cls.envName ?? cls.name;
  }

  // ---------------------------------------------------------------- hooks

  /**
   * Branching groups (docs/fork.md): where the item's group forks one trajectory into
   * `groupSize` branches (`{afterTurn: n}` or `{afterTool: name}`); undefined (the default)
   * runs `groupSize` independent trajectories.
   */
  branchPoint(_item: Item): BranchPoint | undefined {
    return undefined;
  }

  /** Load datasets, build state. Called once by `start()` after the backend is up. */
  async setup(): Promise<void> {}

  /** The next item to roll out, or null when the data is exhausted. */
  abstract getNextItem(): Promise<Item | null> | Item | null;

  /** The user message for the agent, or the full initial conversation. */
  abstract buildTask(item: Item): string | ChatMessage[];

  /**
   * The item's workspace template, if any: a name and how to build it (setup commands, files).
   * The trajectory's slot is reset into a copy-on-write view of it before `setupWorkspace`;
   * it is built once per container (items that share a template share the build) and
   * containers that hold it are preferred. See docs/templates.md.
   */
  workspaceTemplate(_item: Item): TemplateSpec | undefined {
    return undefined;
  }

  /** `workspaceTemplate(item)` with its task image checked: ItemImageError for a reference that cannot name an image (docs/images.md). */
  itemTemplate(item: Item): TemplateSpec | undefined { return checkedTemplate(this.workspaceTemplate(item), this.name); }

  /** Prepare the trajectory's slot (write fixtures, clone a repo) before the agent starts. */
  async setupWorkspace(_item: Item, _ctx: ToolContext): Promise<void> {}

  /**
   * Score a rollout; `ctx` runs tools in the trajectory's own slot, which still holds the
   * agent's work. Abstract, so an env that forgets it does not compile. Returns the score, or
   * `{score, metadata?, metrics?}` to keep facts and metrics beside it.
   */
  abstract computeReward(item: Item, result: AgentResult, ctx: ToolContext): Promise<number | ScoreResult> | number | ScoreResult;

  /** The score as `{score, metadata, metrics}`. Default: computeReward's answer in that form. */
  async verifyAndScore(item: Item, result: AgentResult, ctx: ToolContext): Promise<ScoreResult> {
    const r = await this.computeReward(item, result, ctx);
    return typeof r === "number" ? { score: r } : r;
  }

  /**
   * Group-level scoring after every trajectory's own (slots already reset): new scores in the
   * members' order, `{scores?, metrics?}`, or nothing. Infra-failed trajectories are never
   * members; a hook that fails makes the members infra failures (see applyGroupScore).
   */
  scoreGroup(_item: Item, _members: readonly GroupMember[]): GroupScore | Promise<GroupScore> {
    return undefined;
  }

  /** The item's own turn limit, or undefined for the config's `maxTurns` (a hard item may get more turns). */
  maxTurnsFor(_item: Item): number | undefined {
    return undefined;
  }

  /** The turn limit of one item: `maxTurnsFor(item)`, else the config's `maxTurns`. */
  turnsFor(item: Item): number {
    const own = this.maxTurnsFor(item);
    if (own === undefined) return this.config.maxTurns;
    if (!Number.isInteger(own) || own < 1) throw new EnvError(`env ${this.name}: maxTurnsFor(item) must be a positive integer or undefined, got ${String(own)}`);
    return own;
  }

  /** A scripted policy for this item (known-correct tool calls), used when no model URL is set. */
  oracle(_item: Item): OracleScript | undefined {
    return undefined;
  }

  /** Items of the evaluation set (default: none). */
  async getEvalItems(): Promise<Item[]> {
    return [];
  }

  /**
   * Periodic evaluation. Default: one trajectory per eval item; mean score and solve rate
   * (score ≥ successThreshold). A trajectory that failed (infra failure, setup error) is
   * counted in `eval_failed` and has no sample: it is not a zero.
   */
  async evaluate(options: EvaluateOptions = {}): Promise<EvalResult> {
    const items = await this.getEvalItems();
    for (const item of items) this.itemTemplate(item); // a task image that cannot exist stops the evaluation before any item runs
    const limit = pLimit(this.config.groupConcurrency * this.config.groupSize);
    const signal = options.signal;
    const results = await Promise.all(
      items.map((item) => limit(async () => (signal?.aborted ? undefined : this.collectTrajectory(item, this.resolveTools(), signal ? { signal } : {}))).then(...evalItemHandlers(item, options))),
    );
    return evalResult(items.length, results, this.config.successThreshold);
  }

  /** Serve mode: called when the trainer's step crosses a multiple of its checkpoint interval. Default: nothing to save. */
  async saveCheckpoint(_step: number, _checkpointDir: string): Promise<void> {}

  // ---------------------------------------------------------------- lifecycle

  /** Starts the tools backend (slot pool + executor), loads the tokenizer, then calls `setup()`. */
  async start(): Promise<void> {
    if (this.started) return;
    // Before the pool: a dead or wrong model server fails the run in seconds, not as empty rollouts.
    if (this.config.model.url && this.config.model.name && !this.runtime.policy && !this.modelChecked) await this.checkModel();
    const b = this.runtime.backend;
    if (b && typeof b !== "function") this.backend = b;
    else {
      const factory: ToolBackendFactory = b ?? (await import("./default-backend.js")).createDefaultBackend;
      this.backend = await factory(this.config, this.log);
    }
    if (this.config.model.serverType !== "openai" && this.config.model.url && !this.runtime.policy) await this.startTokenExact();
    else if (this.config.model.tokenizerPath) this.tokenizer = await loadTokenizerJson(this.config.model.tokenizerPath);
    this.ownTools = this.envTools();
    this.removeOwnTools = registerEnvTools(this.backend.registry, this.ownTools);
    this.started = true;
    await this.setup();
  }

  /** The model server answers and serves `model.name` (see checkModelServer). */
  async checkModel(): Promise<void> {
    const model = this.config.model;
    const apiKey = process.env[model.apiKeyEnv];
    const checked = await checkModelServer({
      baseUrl: model.url!,
      model: model.name!,
      apiKeyEnv: model.apiKeyEnv,
      ...(apiKey ? { apiKey } : {}),
    });
    if (!checked.served) this.log.warn({ url: checked.url }, `the model server has no model list (404); cannot check that it serves '${model.name}'`);
    this.modelChecked = true;
  }

  /**
   * The run's breaker for a dead model server (see ModelBreaker), or undefined when no model
   * server plays the policy (the oracle, a runtime policy) or `modelBreakerFailures` is 0.
   */
  modelBreaker(): ModelBreaker | undefined {
    const { url, name } = this.config.model;
    if (!url || !name || this.runtime.policy || this.config.modelBreakerFailures === 0) return undefined;
    return new ModelBreaker({ failures: this.config.modelBreakerFailures, probe: () => this.checkModel(), url, log: this.log });
  }

  /** What the run's slots are isolated by, from each sandbox server's /health; undefined when the backend cannot say. */
  async isolation(): Promise<IsolationSummary | undefined> {
    const health = await this.tools.containerHealth?.();
    return health ? summarizeIsolation(health, { allowNetwork: this.config.executor.allowNetwork }) : undefined;
  }

  private async startTokenExact(): Promise<void> {
    const model = this.config.model;
    const { serverType, tokenizerPath, url: modelUrl, name: modelName } = model;
    if (!tokenizerPath) {
      throw new EnvConfigError(`serverType ${serverType} generates token in, token out and renders the chat itself: pass --tokenizer path/to/tokenizer.json (the model's, with tokenizer_config.json beside it)`);
    }
    if (!modelName) throw new NoPolicyError(`model.url is set but model.name is not: pass --model NAME (the model as the server knows it)`);
    this.chatTokenizer = await loadChatTokenizer(tokenizerPath);
    this.tokenizer = this.chatTokenizer;
    const probed = await probeTokenBackend(
      {
        serverType: serverType as "vllm" | "sglang",
        baseUrl: modelUrl!,
        model: modelName,
        timeoutMs: model.timeoutMs,
        maxRetries: model.maxRetries,
        ...(process.env[model.apiKeyEnv] ? { apiKey: process.env[model.apiKeyEnv]! } : {}),
      },
      this.chatTokenizer,
    );
    this.tokenBackend = probed.backend;
    this.log.info({ endpoint: probed.backend.url, templateCheck: probed.templateCheck }, "token-exact generation");
  }

  /** Releases every slot and stops the backend and model client. */
  async close(): Promise<void> {
    const backend = this.backend;
    this.backend = undefined;
    this.started = false;
    this.removeOwnTools?.();
    this.removeOwnTools = undefined;
    await this.modelClient?.close();
    this.modelClient = undefined;
    await this.tokenBackend?.close();
    this.tokenBackend = undefined;
    if (backend && typeof this.runtime.backend !== "object") await backend.close();
  }

  get tools(): ToolBackend {
    if (!this.backend) throw new EnvError(`env ${this.name} is not started: call start() first`);
    return this.backend;
  }

  /** Whether tokens come from somewhere real (server ids or a tokenizer). */
  get hasTokenizer(): boolean {
    return this.tokenizer !== undefined;
  }

  // ---------------------------------------------------------------- rollouts

  /**
   * The env's own tools (docs/tools.md): `defineEnvTool({..., run(args, ctx)})` runs in this
   * process with the trajectory's ToolContext, `defineEnvTool({..., command(args)})` in the
   * trajectory's slot. Offered to the model in every group, beside the enabled toolsets.
   * Called once, by `start()`.
   */
  envTools(): readonly ToolDefinition[] {
    return [];
  }

  /** The tools of one group: sampled from the distribution, or the enabled toolsets, plus the env's own. Shared by the group. */
  resolveTools(): GroupTools {
    return resolveGroupTools({
      registry: this.tools.registry,
      alsoOffered: this.ownTools.map((t) => t.name),
      enabled: this.config.tools.enabled,
      disabled: this.config.tools.disabled,
      ...(this.config.tools.distribution ? { distribution: this.config.tools.distribution } : {}),
    });
  }

  /** The model client's figures so far (retried, failed calls, latency); undefined before the first model call. */
  modelCallStats = (): ChatCallSummary | undefined => this.modelClient?.summary();

  /** The policy for one item: the runtime's, the model at `model.url`, or the env's oracle. */
  policyFor(item: Item): AgentPolicy {
    if (this.runtime.policy) return this.runtime.policy;
    const model = this.config.model;
    if (this.tokenBackend && this.chatTokenizer) {
      return new TokenExactPolicy({
        backend: this.tokenBackend,
        tokenizer: this.chatTokenizer,
        parser: model.toolCallParser,
        model: model.name!,
        temperature: model.temperature,
        maxTokens: model.maxTokens,
      });
    }
    if (model.url) {
      if (!model.name) throw new NoPolicyError(`model.url is set but model.name is not: pass --model NAME (the model as the server knows it)`);
      this.modelClient ??= chatClientFor({ ...model, url: model.url });
      return new ChatModelPolicy({
        baseUrl: model.url,
        client: this.modelClient,
        model: model.name,
        toolCallFormat: model.toolCallFormat,
        temperature: model.temperature,
        maxTokens: model.maxTokens,
        ...(model.extraBody ? { extraBody: model.extraBody } : {}),
      });
    }
    const script = this.oracle(item);
    if (script) return new OraclePolicy(script);
    throw new NoPolicyError(`env ${this.name} has no model and no oracle: pass --model-url URL --model NAME, or implement oracle(item)`);
  }

  /** The initial conversation: system prompt (if any) and the task. */
  initialMessages(item: Item): ChatMessage[] {
    const task = this.buildTask(item);
    if (Array.isArray(task)) return task;
    const messages: ChatMessage[] = [];
    if (this.config.systemPrompt) messages.push({ role: "system", content: this.config.systemPrompt });
    messages.push({ role: "user", content: task });
    return messages;
  }

  /**
   * One trajectory, start to finish, in its own slot: workspace setup, agent loop, reward.
   * The slot is reset and released in every case. A lost slot restarts the trajectory from
   * scratch on a new slot, up to `slotLossRetries` times; then TrajectoryFailedError. A call
   * the infrastructure cut off in setupWorkspace or a turn: TrajectoryInfraError. `options.policy` replaces `policyFor(item)`.
   */
  async collectTrajectory(item: Item, groupTools: GroupTools, options: CollectOptions = {}): Promise<TrajectoryOutcome> {
    const backend = this.tools;
    const losses: string[] = [];
    const maxAttempts = this.config.slotLossRetries + 1;
    const calls = options.calls ?? new CallTally(); // the tool calls that ran (all its attempts): an interrupted or failed trajectory's are counted too
    for (let attempt = 1; attempt <= maxAttempts; attempt++) {
      options.signal?.throwIfAborted();
      const link = options.signal ? linkedSignal(options.signal) : undefined; // one listener on the run's signal in all
      const signal = link?.signal;
      const trajectoryId = randomUUID();
      const ctx = new ToolContext(trajectoryId, backend.executor, envToolTimeouts(this.config.executor));
      const started = performance.now();
      let stage: InfraStage = "setup";
      try {
        const setupStarted = performance.now();
        const template = this.itemTemplate(item);
        if (template) {
          if (!backend.executor.prepareWorkspace) throw new EnvError(`env ${this.name} names a workspace template but its executor cannot prepare one`);
          await backend.executor.prepareWorkspace(trajectoryId, template, signal ? { signal } : {});
        }
        await this.setupWorkspace(item, ctx);
        const workspaceSetupMs = performance.now() - setupStarted;
        stage = "tool";
        const result = await runAgentLoop({
          // A caller's own policy (openenv's POST /run: the trainer's model for this rollout) wins.
          policy: options.policy ?? this.policyFor(item),
          tools: groupTools.tools,
          messages: this.initialMessages(item),
          maxTurns: this.turnsFor(item),
          ...(signal ? { signal } : {}),
          isKnownTool: (name) => {
            const def = backend.registry.resolve(name);
            return def !== undefined && groupTools.names.includes(def.name);
          },
          // A lost slot rejects with SlotLostError, which restarts the trajectory below.
          executeTool: (call) =>
            calls.count(
              () =>
                routeToolCall(backend.registry, call, ctx, (call) =>
                  // The model's own `timeout`, within the env's bounds (executor.minTimeoutS..maxTimeoutS), else executor.defaultTimeoutS.
                  backend.executor.execute(trajectoryId, call, { timeoutMs: ctx.timeoutFor(requestedTimeoutS(call.arguments ?? {})) * 1000, ...(signal ? { signal } : {}) }),
                ),
              options.signal,
            ),
        });
        const { ctx: rewardCtx, calls: rewardCalls } = rewardContext(trajectoryId, backend.executor, this.config.rewardTimeoutS, this.config.executor.minTimeoutS); // own timeout, calls recorded
        const { score, rewardError, scoreMetadata, metrics, infraFailure } = await scoreRollout(result, trajectoryId, () => this.verifyAndScore(item, result, rewardCtx), this.log);
        const { tokens, brokenSegments } = trajectoryTokens(result, this.tokenizer);
        const outcome: TrajectoryOutcome = {
          trajectoryId,
          result,
          score,
          rewardSkipped: infraFailure?.cause === "model",
          scoreMetadata,
          attempts: attempt,
          slotLosses: [...losses],
          tokens,
          durationMs: performance.now() - started,
          workspaceSetupMs,
        };
        if (brokenSegments.length > 0) outcome.brokenSegments = brokenSegments;
        if (metrics) outcome.metrics = metrics;
        if (rewardError) outcome.rewardError = rewardError;
        if (infraFailure) outcome.infraFailure = infraFailure;
        if (rewardCalls.length > 0) outcome.rewardCalls = rewardCalls;
        options.onTrajectoryEnd?.(outcome);
        return outcome;
      } catch (err) {
        if (options.signal?.aborted) throw new TrajectoryInterruptedError(calls.ran, calls.cut, { cause: err });
        throwIfInfraFailure(err, stage, trajectoryId); // logged where its group is dropped
        if (!isSlotLostError(err)) throw err;
        losses.push(err.message);
        this.log.warn({ trajectoryId, attempt, maxAttempts, reason: err.message }, "slot lost; restarting the trajectory on a new slot");
      } finally {
        link?.release();
        await backend.executor.release(trajectoryId, { reset: true }).catch((err: unknown) => {
          this.log.warn({ trajectoryId, err: String(err) }, "releasing the slot failed");
        });
      }
    }
    throw new TrajectoryFailedError(
      `trajectory lost its slot ${losses.length} times (slotLossRetries = ${this.config.slotLossRetries}); last: ${losses[losses.length - 1]}`,
      maxAttempts,
      undefined,
      true,
    );
  }

  /**
   * `groupSize` trajectories of one item, concurrently, each in its own slot; a trajectory
   * with an infrastructure failure is never part of the group (see collectGroup for what
   * `infraFailurePolicy` makes of it). Never drops one silently. Aborting `signal` (Atropos
   * back-off) stops the rollouts and rejects with the signal's reason.
   */
  async collectTrajectories(item: Item, options: Omit<CollectOptions, "policy" | "calls"> = {}): Promise<GroupOutcome<Item>> {
    this.itemTemplate(item); // a task image that cannot exist stops the run here, before any slot is asked for it
    const point = this.branchPoint(item);
    const scoreGroup = (trajectories: TrajectoryOutcome[]) => applyGroupScore(trajectories, (members) => this.scoreGroup(item, members), this.log);
    if (point) {
      const { onTrajectoryEnd, ...rest } = options;
      const outcome = await collectBranchingGroup(this, item, point, { tokenizer: this.tokenizer, log: this.log, scoreGroup }, rest);
      // A branching group's trajectories are told at its end (its model failures are among its infra failures).
      for (const f of outcome.infraFailures) onTrajectoryEnd?.({ infraFailure: f });
      for (const t of outcome.trajectories) onTrajectoryEnd?.(t);
      return outcome;
    }
    const groupTools = this.resolveTools();
    return collectGroup(item, groupTools, {
      config: this.config,
      log: this.log,
      runTrajectory: (calls) => this.collectTrajectory(item, groupTools, { ...options, calls }),
      scoreGroup,
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }
}
