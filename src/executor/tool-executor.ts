// Longer than 500 lines on purpose: the batching loop, per-trajectory ordering and slot-loss
// handling share one queue state; the HTTP side, config and metrics are already apart.
import { performance } from "node:perf_hooks";
import pLimit, { type LimitFunction } from "p-limit";
import type { Logger } from "pino";
import { LatencyWindow } from "../observability/latency-window.js";
import { silentLogger } from "../observability/logger.js";
import type { MetricsRegistry } from "../observability/metrics.js";
import type { ArtifactArchiveResponse, ArtifactListResponse, ArtifactReadResponse, ExecuteResponse } from "../protocol/sandbox.js";
import { ToolCallSchema, type ParsedToolCall, type ToolCall, type ToolResult } from "../protocol/tool.js";
import type { TemplateSpec } from "../pool/template-affinity.js";
import type { LeasedSlot, SlotCall, SlotPoolLike } from "../pool/types.js";
import { toolFromOpenAiSchema } from "../tools/definition.js";
import { ToolRegistry } from "../tools/registry.js";
import type { ToolDefinition } from "../tools/types.js";
import { callTimeoutS, parseToolExecutorConfig, timeoutBounds, type ToolExecutorConfig, type ToolExecutorConfigInput } from "./config.js";
import { ExecutorMetrics } from "./executor-metrics.js";
import { artifactFailureMetadata, errorResult, fromExecuteResponse, infraResult } from "./results.js";
import { isSlotLostError, PoolTemplateError, type SlotLostError } from "../pool/errors.js";
import { ToolServerClient } from "./tool-server-client.js";
import { BrowserResults } from "./browser-results.js";
import type { ExecuteOptions, ExecutorStats, ToolExecutorLike } from "./types.js";
import type { PendingCall, TrajectoryState } from "./queue-state.js";
import { SlotpoolError } from "../protocol/errors.js";
import { ISOLATION_ARG_NAMES, builtinTool, type IsolationArgName } from "../protocol/tool-table.js";
import { BROWSER_START_ALLOWANCE_MS } from "../protocol/browser-tools.js";

/**
 * The ToolExecutor: every tool call of every trajectory passes here.
 *
 * - Calls queue per trajectory and run in the order they were issued.
 * - A batch window gathers calls; each dispatch takes the queued calls of every trajectory
 *   that has nothing in flight and sends them at once, one request per slot, bounded per
 *   container. A trajectory's dispatch never waits for another's: a `sleep 60` in one
 *   holds up only the calls issued after it in the same trajectory.
 * - Each result is delivered the moment its call finishes (the slot's streaming batch).
 * - A trajectory's first sandbox call acquires its slot; `release()` returns it.
 */

export interface ToolExecutorOptions {
  pool: SlotPoolLike;
  /** Tools the executor accepts (default: the built-in sandbox tools). External tools listed by the ToolServer are added at start. */
  tools?: ToolRegistry;
  config?: ToolExecutorConfigInput;
  /** Settings parsed already at the edge (createToolBackend passes its `executor` section): used as they are, instead of `config`. */
  parsedConfig?: ToolExecutorConfig;
  logger?: Logger;
  /** Registry to publish the executor's metrics in (the executor service shares one with the pool). */
  metrics?: MetricsRegistry;
}


export class ExecutorClosedError extends SlotpoolError {
  override name = "ExecutorClosedError";
}

/** `fork()` was refused before anything happened (no slot yet, child id in use, pool cannot fork). Code EXECUTOR_FORK. */
export class ExecutorForkError extends SlotpoolError {
  override name = "ExecutorForkError";
}

export class ToolExecutor implements ToolExecutorLike {
  readonly config: ToolExecutorConfig;
  readonly tools: ToolRegistry;
  readonly metrics: ExecutorMetrics;
  private readonly pool: SlotPoolLike;
  private readonly logger: Logger;
  private readonly toolServer?: ToolServerClient;
  private readonly trajectories = new Map<string, TrajectoryState>();
  /** Trajectories with queued calls and nothing in flight, in arrival order. */
  private readonly ready = new Set<TrajectoryState>();
  private readonly containerLimits = new Map<string, LimitFunction>();
  private readonly running = new Set<Promise<void>>();
  private timer: NodeJS.Timeout | undefined;
  private immediate: NodeJS.Immediate | undefined;
  private queuedCount = 0;
  private inFlightCount = 0;
  private started = false;
  private closed = false;
  private readonly totals = { calls: 0, errors: 0, sandbox: 0, external: 0 };
  private readonly recentLatencies = new LatencyWindow(4096);
  /** The isolation arguments' values, from the config: stamped on every sandbox call that honours them. */
  private readonly isolation: Readonly<Record<IsolationArgName, boolean>>;
  /** The env's snapshot bound and vision model, applied to the browser tools' answers. */
  private readonly browserResults: BrowserResults;

  constructor(options: ToolExecutorOptions) {
    this.config = options.parsedConfig ?? parseToolExecutorConfig(options.config);
    this.isolation = { allow_network: this.config.allowNetwork, require_sandbox: this.config.requireSandbox, require_stateful_sandbox: this.config.requireStatefulSandbox };
    this.pool = options.pool;
    this.browserResults = new BrowserResults(this.config.browser);
    this.tools = options.tools ?? ToolRegistry.withBuiltins();
    this.logger = options.logger ?? silentLogger();
    if (this.config.toolServerUrl) this.toolServer = new ToolServerClient(this.config.toolServerUrl, this.config.toolServerToken);
    this.metrics = new ExecutorMetrics(options.metrics, () => ({
      queued: this.queuedCount,
      inFlight: this.inFlightCount,
      trajectories: this.trajectories.size,
    }));
  }

  async start(): Promise<void> {
    if (this.closed) throw new ExecutorClosedError("the ToolExecutor was closed; create a new one");
    if (this.started) return;
    this.started = true;
    if (this.toolServer && this.config.discoverExternalTools) {
      try {
        const listed = await this.toolServer.listTools();
        const added: string[] = [];
        for (const t of listed) {
          if (this.tools.has(t.function.name)) continue;
          this.tools.register(toolFromOpenAiSchema(t, "external"));
          added.push(t.function.name);
        }
        this.logger.info({ toolServer: this.toolServer.url, tools: added }, "external tools registered");
      } catch (err) {
        // The ToolServer may come up later; tools registered by the caller still route to it.
        this.logger.warn({ toolServer: this.toolServer.url, err: (err as Error).message }, "could not list the ToolServer's tools");
      }
    }
  }

  execute(trajectoryId: string, call: ToolCall, options: ExecuteOptions = {}): Promise<ToolResult> {
    const startedAt = performance.now();
    const parsedCall = ToolCallSchema.safeParse(call);
    if (!parsedCall.success) {
      return Promise.resolve(this.finishEarly(errorResult(`invalid tool call: ${parsedCall.error.issues[0]?.message ?? "bad shape"}`, undefined), "unknown", "unknown", startedAt));
    }
    const c = parsedCall.data;
    if (this.closed) return Promise.resolve(this.finishEarly(infraResult("the tool executor is shutting down; the call was not run", c.uniq_id, "server_shutdown"), c.name, "unknown", startedAt));
    if (!trajectoryId) return Promise.resolve(this.finishEarly(errorResult("trajectory id must not be empty", c.uniq_id), c.name, "unknown", startedAt));
    if (options.signal?.aborted) return Promise.resolve(this.finishEarly(errorResult("the call was cancelled before it ran", c.uniq_id), c.name, "unknown", startedAt));

    const checked = this.tools.check(c.name, c.arguments);
    if (!checked.ok) {
      return Promise.resolve(this.finishEarly(errorResult(checked.error.message, c.uniq_id, { tool_error: checked.error.name }), c.name, "unknown", startedAt));
    }
    const tool = checked.tool;
    if (tool.kind === "external" && !this.toolServer) {
      return Promise.resolve(
        this.finishEarly(
          errorResult(`external tool '${tool.name}' is not available: no ToolServer is configured (set toolServerUrl / --tool-server-url)`, c.uniq_id),
          tool.name,
          "external",
          startedAt,
        ),
      );
    }
    if (tool.kind === "in-process") {
      return Promise.resolve(
        this.finishEarly(
          errorResult(`tool '${tool.name}' runs in the env's own process (in-process, with the trajectory's ToolContext): the env calls it, not the executor`, c.uniq_id, { tool_error: "InProcessToolError" }),
          tool.name,
          "in-process",
          startedAt,
        ),
      );
    }
    const timeoutS = callTimeoutS(checked.args, options.timeoutMs, timeoutBounds(this.config));
    const args = { ...checked.args };
    if (tool.timeoutArg && tool.timeoutArg in args) args[tool.timeoutArg] = timeoutS;

    return new Promise<ToolResult>((resolve, reject) => {
      const traj = this.trajectory(trajectoryId);
      const pc: PendingCall = {
        trajectoryId,
        traj,
        call: c,
        tool,
        args,
        strippedIsolationArgs: checked.strippedIsolationArgs,
        timeoutS,
        startedAt,
        resolve,
        reject,
        signal: options.signal,
        dispatched: false,
        done: false,
      };
      traj.queue.push(pc);
      this.queuedCount++;
      if (pc.signal) {
        pc.onAbort = () => this.cancel(pc);
        pc.signal.addEventListener("abort", pc.onAbort, { once: true });
      }
      if (!traj.running) this.ready.add(traj);
      this.scheduleFlush();
    });
  }

  async prepareWorkspace(trajectoryId: string, template: TemplateSpec, options: { signal?: AbortSignal } = {}): Promise<void> {
    if (!this.pool.useTemplate) throw new Error("this executor's pool cannot prepare workspace templates");
    const traj = this.trajectory(trajectoryId);
    // Routed to a container holding the template, else the task image (pool/slot-placement.ts).
    const slot = await this.ensureSlot(traj, { template: template.name, ...(template.image !== undefined ? { image: template.image } : {}) });
    try {
      await this.pool.useTemplate(slot, template, options);
    } catch (err) {
      // A lost container: later calls of the trajectory report the loss, release skips the reset.
      if (isSlotLostError(err)) traj.lost = err;
      throw err;
    }
  }

  async claimSlot(trajectoryId: string): Promise<void> {
    await this.ensureSlot(this.trajectory(trajectoryId));
  }

  async fork(trajectoryId: string, into: string[], options: { signal?: AbortSignal; timeoutMs?: number } = {}): Promise<void> {
    const traj = this.trajectories.get(trajectoryId);
    if (traj?.lost) throw traj.lost;
    const slot = traj?.slot;
    if (!traj || !slot) throw new ExecutorForkError(`trajectory ${trajectoryId} holds no slot to fork: run one of its calls (or prepareWorkspace) first`);
    if (!slot.fork) throw new ExecutorForkError("this executor's pool cannot fork slots");
    const seen = new Set<string>();
    for (const id of into) {
      if (this.trajectories.has(id) || seen.has(id)) throw new ExecutorForkError(`cannot fork ${trajectoryId} into ${id}: that trajectory id is already in use (or named twice); pick new ids`);
      seen.add(id);
    }
    // Reserved now: a call for a child arriving during the fork waits for its slot instead of acquiring another.
    const children = into.map((id) => this.trajectory(id));
    let slots: LeasedSlot[];
    const forking = slot.fork(into.length, { trajectoryIds: into, ...options });
    for (const c of children) {
      const mine = forking.then((s) => s[children.indexOf(c)]!);
      mine.catch(() => undefined);
      c.acquiring = mine;
    }
    try {
      slots = await forking;
    } catch (err) {
      for (const c of children) {
        c.acquiring = undefined;
        this.trajectories.delete(c.id);
      }
      if (isSlotLostError(err)) traj.lost = err;
      throw err;
    }
    children.forEach((c, i) => {
      c.acquiring = undefined;
      // Released during the fork: release() awaited `acquiring` and returns the slot itself.
      if (c.released) return;
      c.slot = slots[i]!;
      c.heldSlot = slots[i]!;
    });
  }

  async release(trajectoryId: string, options: { reset?: boolean } = {}): Promise<void> {
    const traj = this.trajectories.get(trajectoryId);
    if (!traj) return;
    traj.released = true;
    this.trajectories.delete(trajectoryId);
    this.ready.delete(traj);
    for (const pc of traj.queue.splice(0)) {
      this.queuedCount--;
      this.deliver(pc, errorResult(`trajectory ${trajectoryId} was released before this call ran`, pc.call.uniq_id));
    }
    let slot = traj.slot;
    if (!slot && traj.acquiring) slot = await traj.acquiring.catch(() => undefined);
    if (!slot) return;
    traj.slot = undefined;
    try {
      // A lost slot has no workspace left to reset; the pool only needs to hear it is free.
      await this.pool.release(slot, { reset: traj.lost ? false : (options.reset ?? true) });
    } catch (err) {
      if (!traj.lost) throw err;
    }
  }

  async readArtifact(trajectoryId: string, req: { path: string; encoding?: "text" | "base64"; max_bytes?: number; include_sha256?: boolean }): Promise<ArtifactReadResponse> {
    const failed = (error: string): ArtifactReadResponse => ({ success: false, error, content: "", encoding: req.encoding ?? "text", truncated: false, bytes: 0, file_size: 0, path: req.path, mime: "" });
    const slot = this.slotFor(trajectoryId);
    if (typeof slot === "string") return failed(slot);
    try {
      return await slot.readArtifact(req);
    } catch (err) {
      return { ...failed(this.describeSlotError(trajectoryId, err)), metadata: artifactFailureMetadata(err) };
    }
  }

  async listArtifacts(trajectoryId: string, req: { path?: string; recursive?: boolean; max_entries?: number }): Promise<ArtifactListResponse> {
    const slot = this.slotFor(trajectoryId);
    const path = req.path ?? ".";
    if (typeof slot === "string") return { success: false, error: slot, entries: [], truncated: false, path };
    try {
      return await slot.listArtifacts(req);
    } catch (err) {
      return { success: false, error: this.describeSlotError(trajectoryId, err), entries: [], truncated: false, path, metadata: artifactFailureMetadata(err) };
    }
  }

  async archiveArtifacts(trajectoryId: string, req: { path?: string; max_bytes?: number; max_entries?: number }): Promise<ArtifactArchiveResponse> {
    const slot = this.slotFor(trajectoryId);
    const path = req.path ?? ".";
    const empty = { content: "", encoding: "base64" as const, format: "tar.gz" as const, bytes: 0, entries: 0, path };
    if (typeof slot === "string") return { success: false, error: slot, ...empty };
    try {
      return await slot.archiveArtifacts(req);
    } catch (err) {
      return { success: false, error: this.describeSlotError(trajectoryId, err), ...empty, metadata: artifactFailureMetadata(err) };
    }
  }

  /** The slot a trajectory holds, if any (for the env layer's ToolContext and the ToolServer). */
  slotOf(trajectoryId: string): LeasedSlot | undefined {
    return this.trajectories.get(trajectoryId)?.slot;
  }

  /** Counts, and latency percentiles over the last 4096 calls (the histogram in `metrics` has them all). */
  stats(): ExecutorStats {
    const { p50, p99 } = this.recentLatencies.summary();
    return {
      queued: this.queuedCount,
      inFlight: this.inFlightCount,
      trajectories: this.trajectories.size,
      totals: { ...this.totals },
      latencyMs: { p50, p99, count: this.metrics.duration.snapshot().count },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    if (this.immediate) clearImmediate(this.immediate);
    this.timer = undefined;
    this.immediate = undefined;
    const ids = [...this.trajectories.keys()];
    const failures: unknown[] = [];
    await Promise.all(
      ids.map((id) =>
        this.release(id, { reset: true }).catch((err: unknown) => {
          failures.push(err);
          this.logger.warn({ trajectoryId: id, ...this.slotFields(this.trajectories.get(id)?.slot), err: (err as Error).message }, "releasing a slot at shutdown failed");
        }),
      ),
    );
    // Calls in flight end once their slot is reset; give them a moment to report.
    await Promise.race([Promise.allSettled([...this.running]), new Promise((r) => setTimeout(r, 2_000).unref())]);
    await this.toolServer?.close();
  }

  // ---------------------------------------------------------------- dispatch

  private trajectory(id: string): TrajectoryState {
    let t = this.trajectories.get(id);
    if (!t) {
      t = { id, queue: [], running: false, released: false };
      this.trajectories.set(id, t);
    }
    return t;
  }

  private scheduleFlush(): void {
    if (this.queuedCount >= this.config.maxBatchSize || this.config.batchWindowMs === 0) {
      if (!this.immediate) {
        this.immediate = setImmediate(() => {
          this.immediate = undefined;
          this.flush();
        });
      }
      return;
    }
    if (!this.timer) {
      this.timer = setTimeout(() => {
        this.timer = undefined;
        this.flush();
      }, this.config.batchWindowMs);
    }
  }

  private flush(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
    let budget = this.config.maxBatchSize;
    for (const traj of this.ready) {
      if (budget <= 0) break;
      this.ready.delete(traj);
      if (traj.running || traj.queue.length === 0) continue;
      const calls = traj.queue.splice(0, budget);
      budget -= calls.length;
      this.queuedCount -= calls.length;
      if (traj.queue.length > 0) this.ready.add(traj);
      const run = this.runTrajectory(traj, calls);
      this.running.add(run);
      void run.finally(() => this.running.delete(run));
    }
    if (this.ready.size > 0) this.scheduleFlush();
  }

  private async runTrajectory(traj: TrajectoryState, calls: PendingCall[]): Promise<void> {
    traj.running = true;
    for (const pc of calls) {
      pc.dispatched = true;
      this.inFlightCount++;
    }
    try {
      let i = 0;
      while (i < calls.length) {
        const first = calls[i]!;
        if (first.tool.kind === "external") {
          if (!first.done) await this.runExternal(traj, first);
          i++;
          continue;
        }
        let j = i;
        while (j < calls.length && calls[j]!.tool.kind === "sandbox") j++;
        const group = calls.slice(i, j).filter((pc) => !pc.done);
        if (group.length) await this.runSandbox(traj, group);
        i = j;
      }
    } catch (err) {
      for (const pc of calls) this.deliver(pc, errorResult(`internal executor error: ${(err as Error).message}`, pc.call.uniq_id));
      this.logger.error({ err, trajectoryId: traj.id, ...this.slotFields(traj.slot) }, "dispatch failed");
    } finally {
      traj.running = false;
      if (traj.queue.length > 0 && !traj.released) {
        this.ready.add(traj);
        this.scheduleFlush();
      }
    }
  }

  /**
   * One call as the slot's server gets it, derived from the tool's definition: the canonical
   * name (resolved once, in execute), the isolation arguments the tool honours filled from the
   * config, and an env tool's slotCommand run as `bash`.
   */
  private slotCall(pc: PendingCall): SlotCall {
    const shell = pc.tool.slotCommand ? builtinTool("bash")! : undefined;
    const tool = shell?.name ?? pc.tool.name;
    const args: Record<string, unknown> = shell ? { command: pc.tool.slotCommand!(pc.args), timeout: pc.timeoutS } : { ...pc.args };
    // A sandbox tool the table does not describe gets every isolation argument (fail closed).
    for (const name of shell?.isolationArgs ?? pc.tool.isolationArgs ?? ISOLATION_ARG_NAMES) args[name] = this.isolation[name];
    return { tool, args, execution_id: pc.call.uniq_id ?? null, timeout: pc.timeoutS };
  }

  private async runSandbox(traj: TrajectoryState, calls: PendingCall[]): Promise<void> {
    if (traj.lost) {
      for (const pc of calls) this.deliverLost(pc, traj.lost);
      return;
    }
    let slot: LeasedSlot;
    try {
      slot = await this.ensureSlot(traj);
    } catch (err) {
      for (const pc of calls) {
        if (isSlotLostError(err)) this.deliverLost(pc, err);
        else this.deliver(pc, this.acquireFailure(traj.id, err, pc.call.uniq_id));
      }
      return;
    }
    if (traj.released) {
      for (const pc of calls) this.deliver(pc, errorResult(`trajectory ${traj.id} was released before this call ran`, pc.call.uniq_id));
      return;
    }
    // Built before anything is sent: an env tool whose slotCommand throws fails alone.
    const wire: Array<{ pc: PendingCall; call: SlotCall }> = [];
    for (const pc of calls) {
      try {
        wire.push({ pc, call: this.slotCall(pc) });
      } catch (err) {
        this.deliver(pc, errorResult(`tool '${pc.tool.name}' could not build its command: ${(err as Error).message}`, pc.call.uniq_id));
      }
    }
    if (wire.length === 0) return;
    calls = wire.map((w) => w.pc);
    const slotCalls = wire.map((w) => w.call);
    for (const pc of calls) {
      if (pc.strippedIsolationArgs.length) {
        this.logger.debug({ trajectoryId: traj.id, ...this.slotFields(slot), tool: pc.tool.name, stripped: pc.strippedIsolationArgs }, "isolation arguments from the model ignored");
      }
    }
    const limit = this.containerLimit(slot.container.id);
    // The HTTP deadline covers the whole run of this slot's calls, which execute one by one (a navigation may start a browser first).
    const timeoutMs = slotCalls.reduce((s, c) => s + (c.timeout ?? 0) * 1000 + (c.tool === "browser_navigate" ? BROWSER_START_ALLOWANCE_MS : 0), 0) + 10_000;
    // A browser tool's answer is finished here first (browser-results.ts); the next calls of the trajectory wait for it.
    const finishing = new Map<PendingCall, Promise<void>>();
    const settle = (pc: PendingCall, res: ExecuteResponse): void => {
      const result = fromExecuteResponse(res, pc.call.uniq_id);
      if (!this.browserResults.handles(pc.tool.name)) return this.deliver(pc, result);
      if (pc.done || finishing.has(pc)) return;
      finishing.set(pc, this.browserResults.finish(pc.tool.name, result, pc.signal).then((r) => this.deliver(pc, r)));
    };
    try {
      if (calls.length === 1) {
        const res = await limit(() => slot.execute(slotCalls[0]!, { timeoutMs }));
        settle(calls[0]!, res);
      } else {
        const onResult = (index: number, res: ExecuteResponse) => {
          const pc = calls[index];
          if (pc) settle(pc, res);
        };
        const all = await limit(() => slot.executeBatch(slotCalls, onResult, { timeoutMs }));
        all.forEach((res, index) => onResult(index, res));
      }
      await Promise.all(finishing.values());
    } catch (err) {
      if (isSlotLostError(err)) {
        traj.lost = err;
        this.metrics.slotsLost.inc();
        this.logger.warn({ trajectoryId: traj.id, ...this.slotFields(slot), reason: err.reason }, "slot lost");
        for (const pc of calls) this.deliverLost(pc, err);
        return;
      }
      for (const pc of calls) {
        this.deliver(pc, infraResult(`sandbox call failed on slot ${slot.key}: ${(err as Error).message}`, pc.call.uniq_id, "sandbox_error", { slot_key: slot.key }));
      }
    }
  }

  /**
   * No slot for the trajectory: the infrastructure's failure (acquire timed out, the pool
   * stopped), except a template whose build failed, which is the env's own.
   */
  private acquireFailure(trajectoryId: string, err: unknown, uniqId: string | undefined | null): ToolResult {
    const message = `could not get a sandbox slot for trajectory ${trajectoryId}: ${(err as Error).message}`;
    if (err instanceof PoolTemplateError) return errorResult(message, uniqId, { acquire_failed: true });
    return infraResult(message, uniqId, "no_slot", { acquire_failed: true });
  }

  private async runExternal(traj: TrajectoryState, pc: PendingCall): Promise<void> {
    const client = this.toolServer!;
    const slot = traj.slot;
    try {
      const result = await client.execute({
        trajectoryId: traj.id,
        call: { name: pc.tool.name, arguments: pc.args, uniq_id: pc.call.uniq_id },
        timeoutS: pc.timeoutS,
        slotId: slot?.slotId,
        containerAddr: slot?.container.url,
        signal: pc.signal,
      });
      this.deliver(pc, { ...result, uniq_id: result.uniq_id ?? pc.call.uniq_id ?? null });
    } catch (err) {
      this.deliver(pc, errorResult(`external tool '${pc.tool.name}' failed: ${(err as Error).message}`, pc.call.uniq_id));
    }
  }

  private async ensureSlot(traj: TrajectoryState, wish: { template?: string; image?: string } = {}): Promise<LeasedSlot> {
    if (traj.slot) return traj.slot;
    // A released trajectory must not take a new slot: nobody would ever return it.
    if (traj.released) throw new Error(`trajectory ${traj.id} was released`);
    if (!traj.acquiring) {
      traj.acquiring = this.pool.acquire({ trajectoryId: traj.id, timeoutMs: this.config.acquireTimeoutMs, ...wish });
      traj.acquiring.then(
        (slot) => {
          traj.acquiring = undefined;
          // If release() ran meanwhile it awaited this acquire and returns the slot itself.
          if (!traj.released) {
            traj.slot = slot;
            traj.heldSlot = slot;
          }
        },
        () => {
          traj.acquiring = undefined;
        },
      );
    }
    return traj.acquiring;
  }

  private containerLimit(containerId: string): LimitFunction {
    let l = this.containerLimits.get(containerId);
    if (!l) {
      l = pLimit(this.config.maxInFlightPerContainer);
      this.containerLimits.set(containerId, l);
    }
    return l;
  }

  // ---------------------------------------------------------------- results

  private cancel(pc: PendingCall): void {
    if (pc.done) return;
    if (!pc.dispatched) {
      const traj = pc.traj;
      const i = traj.queue.indexOf(pc);
      if (i >= 0) {
        traj.queue.splice(i, 1);
        this.queuedCount--;
        if (traj.queue.length === 0) this.ready.delete(traj);
      }
      this.deliver(pc, errorResult("the call was cancelled before it ran", pc.call.uniq_id), false);
      return;
    }
    this.deliver(pc, errorResult("the call was cancelled while running; it may still finish in the sandbox", pc.call.uniq_id));
  }

  /** The call fails with the slot's SlotLostError (counted as a failed call, like an error result). */
  private deliverLost(pc: PendingCall, err: SlotLostError): void {
    if (pc.done) return;
    pc.done = true;
    if (pc.dispatched) this.inFlightCount--;
    if (pc.onAbort) pc.signal?.removeEventListener("abort", pc.onAbort);
    this.record({ success: false }, pc.tool.name, pc.tool.kind, pc.startedAt);
    this.logger.debug({ trajectoryId: pc.trajectoryId, tool: pc.tool.name, callId: pc.call.uniq_id, slotLost: true }, "tool call");
    pc.reject(err);
  }

  private deliver(pc: PendingCall, result: ToolResult, wasDispatched = pc.dispatched): void {
    if (pc.done) return;
    pc.done = true;
    if (wasDispatched) this.inFlightCount--;
    if (pc.onAbort) pc.signal?.removeEventListener("abort", pc.onAbort);
    const ms = this.record(result, pc.tool.name, pc.tool.kind, pc.startedAt);
    if (this.logger.isLevelEnabled("debug")) {
      // Arguments and output stay out of logs (they may hold user data); the call's identity does not.
      const slot = pc.traj.slot ?? pc.traj.heldSlot;
      this.logger.debug(
        {
          trajectoryId: pc.trajectoryId,
          ...this.slotFields(slot),
          tool: pc.tool.name,
          kind: pc.tool.kind,
          callId: pc.call.uniq_id,
          success: result.success,
          exitCode: result.metadata["exit_code"],
          ms: Math.round(ms * 10) / 10,
          ...(result.success ? {} : { error: result.error.slice(0, 200) }),
        },
        "tool call",
      );
    }
    pc.resolve(result);
  }

  /** How log lines name a slot: its key (`<allocation>/slot_N`) and its allocation/container id. */
  private slotFields(slot: LeasedSlot | undefined): { slot?: string; allocation?: string } {
    return slot ? { slot: slot.key, allocation: slot.container.id } : {};
  }

  private finishEarly(result: ToolResult, tool: string, kind: string, startedAt: number): ToolResult {
    this.record(result, tool, kind, startedAt);
    return result;
  }

  private record(result: Pick<ToolResult, "success">, tool: string, kind: string, startedAt: number): number {
    this.totals.calls++;
    if (kind === "sandbox") this.totals.sandbox++;
    else if (kind === "external") this.totals.external++;
    // Unknown names are model-chosen strings: keep them out of metric labels.
    const labels = { tool: kind === "unknown" ? "(invalid)" : tool, kind };
    this.metrics.calls.inc(labels);
    if (!result.success) {
      this.totals.errors++;
      this.metrics.errors.inc(labels);
    }
    const ms = performance.now() - startedAt;
    this.metrics.duration.observe(ms / 1000, { kind });
    this.recentLatencies.record(ms);
    return ms;
  }

  /** The trajectory's slot, or why it has none. Throws the slot's SlotLostError once it was lost. */
  private slotFor(trajectoryId: string): LeasedSlot | string {
    const traj = this.trajectories.get(trajectoryId);
    if (traj?.lost) throw traj.lost;
    if (!traj?.slot) return `trajectory ${trajectoryId} holds no slot (run a sandbox tool first)`;
    return traj.slot;
  }

  /** An artifact call's failure as its error text; a lost slot is thrown on (and remembered), never turned into text. */
  private describeSlotError(trajectoryId: string, err: unknown): string {
    if (isSlotLostError(err)) {
      const traj = this.trajectories.get(trajectoryId);
      if (traj && traj.slot) traj.lost = err;
      throw err;
    }
    return (err as Error).message;
  }
}
