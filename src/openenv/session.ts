import type { Server } from "@modelcontextprotocol/sdk/server/index.js";
import { JSONRPCMessageSchema, type JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";
import { formatToolResultForModel } from "../agent/agent-loop.js";
import type { Episode, ToolStep } from "./episode.js";
import type { EpisodeHost } from "./episode-host.js";
import { ActionValidationError, CapacityReachedError, EpisodeInfraError, NoEpisodeError, OpenEnvError, type WsErrorCode } from "./errors.js";
import { createMcpServer, DirectTransport } from "./mcp.js";
import { ActionSchema, callToolAnswer, firstProblem, ResetDataSchema, validationIssues, WS_MESSAGE_TYPES, WsMessageSchema, type StepAnswer } from "./wire.js";

export type Frame =
  | { type: "observation"; data: StepAnswer }
  | { type: "state"; data: Record<string, unknown> }
  | { type: "mcp"; data: JSONRPCMessage | Record<string, unknown> }
  | { type: "error"; data: { message: string; code: WsErrorCode } & Record<string, unknown> };

export function errorFrame(code: WsErrorCode, message: string, extra: Record<string, unknown> = {}): Frame {
  return { type: "error", data: { message, code, ...extra } };
}

/** The frame an error becomes: its own code for the room's errors, EXECUTION_ERROR for anything else. */
export function frameOf(err: unknown): Frame {
  if (err instanceof OpenEnvError) return errorFrame(err.wireCode, err.message, frameFacts(err));
  return errorFrame("EXECUTION_ERROR", `internal error of the OpenEnv server: ${err instanceof Error ? err.message : String(err)}`);
}

/** The fields beside message and code an error frame carries, as OpenEnv's frames do (and whether it was the infrastructure). */
function frameFacts(err: OpenEnvError): Record<string, unknown> {
  if (err instanceof EpisodeInfraError) return { infra_failure: true, cause: err.failure };
  if (err instanceof ActionValidationError) return { errors: err.issues };
  if (err instanceof CapacityReachedError) return { waited_ms: err.waitedMs, ...(err.activeSessions !== undefined ? { active_sessions: err.activeSessions } : {}), ...(err.maxSessions !== undefined ? { max_sessions: err.maxSessions } : {}) };
  return {};
}

/**
 * One OpenEnv session (a WebSocket connection, or an HTTP MCP session): at most one episode
 * at a time, in a slot of its own. reset begins an episode (abandoning a running one),
 * step runs an action in it, state reports it, and the same MCP messages as /mcp go to an
 * MCP server bound to it. Messages are handled one at a time, in order; a bad one gets an
 * error frame and the session lives on.
 */
export class Session<Item = unknown> {
  private episode: Episode<Item> | undefined;
  private mcp: { server: Server; transport: DirectTransport } | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private closed = false;
  private beginning: Promise<Episode<Item>> | undefined;
  private lastActive = Date.now();
  private busy = 0;

  /**
   * `autoBegin`: a tool call with no episode begins one on the next item (MCP sessions,
   * whose protocol has no reset: the session's first tools/call takes the slot).
   */
  constructor(
    private readonly host: EpisodeHost<Item>,
    private readonly options: { autoBegin?: boolean } = {},
  ) {}

  /** Handles one raw message; the frame to answer (none for close). Never throws. */
  handle(raw: string): Promise<Frame | undefined> {
    const run = this.active(() => this.queue.then(() => this.dispatch(raw)).catch((err: unknown) => frameOf(err)));
    this.queue = run;
    return run;
  }

  /** Since when nothing has happened in the session (ms since the epoch); undefined while a message is being handled. */
  get idleSince(): number | undefined {
    return this.busy > 0 ? undefined : this.lastActive;
  }

  /** Runs `work` as activity: the session is not idle while it runs, and its end counts as activity. */
  private async active<T>(work: () => Promise<T>): Promise<T> {
    this.busy++;
    try {
      return await work();
    } finally {
      this.busy--;
      this.lastActive = Date.now();
    }
  }

  /** Ends the session's episode (its slot reset and released); later messages are refused. */
  async close(): Promise<void> {
    this.closed = true;
    // A call still running is stopped now, not awaited to its end (it once held the slot up to 600 s).
    this.episode?.interrupt();
    await this.queue;
    await this.beginning?.catch(() => undefined);
    const episode = this.episode;
    this.episode = undefined;
    await this.host.abandon(episode);
    await this.mcp?.server.close().catch(() => undefined);
  }

  get currentEpisode(): Episode<Item> | undefined {
    return this.episode;
  }

  private async dispatch(raw: string): Promise<Frame | undefined> {
    if (this.closed) throw new NoEpisodeError("the session is closed");
    let message: unknown;
    try {
      message = JSON.parse(raw);
    } catch (err) {
      return errorFrame("INVALID_JSON", `Invalid JSON: ${(err as Error).message}`);
    }
    const type = message && typeof message === "object" && !Array.isArray(message) ? (message as { type?: unknown }).type : undefined;
    if (typeof type !== "string" || !(WS_MESSAGE_TYPES as readonly string[]).includes(type)) {
      return errorFrame("UNKNOWN_TYPE", `Unknown message type: ${JSON.stringify(type ?? null)}; a message is {"type": one of ${WS_MESSAGE_TYPES.join(", ")}, ...}`);
    }
    const parsed = WsMessageSchema.safeParse(message);
    if (!parsed.success) return errorFrame("VALIDATION_ERROR", `Invalid ${type} message: ${firstProblem(parsed.error)}`, { errors: validationIssues(parsed.error) });
    const msg = parsed.data;
    switch (msg.type) {
      case "reset":
        return { type: "observation", data: await this.reset(msg.data) };
      case "step":
        return { type: "observation", data: await this.step(msg.data) };
      case "state":
        return { type: "state", data: this.state() };
      case "mcp":
        return { type: "mcp", data: await this.mcpMessage(msg.data) };
      case "close":
        return undefined;
    }
  }

  async reset(data: unknown): Promise<StepAnswer> {
    const parsed = ResetDataSchema.safeParse(data ?? {});
    if (!parsed.success) throw new ActionValidationError(`Invalid reset: ${firstProblem(parsed.error)}`, validationIssues(parsed.error));
    const previous = this.episode;
    this.episode = undefined;
    await this.host.abandon(previous);
    const { seed, episode_id } = parsed.data;
    this.episode = await this.host.begin({ ...(seed !== undefined ? { seed } : {}), ...(episode_id !== undefined ? { episodeId: episode_id } : {}) });
    return { observation: this.episode.initialObservation(), reward: null, done: false, metadata: { env: this.host.env.name } };
  }

  async step(action: unknown): Promise<StepAnswer> {
    const parsed = ActionSchema.safeParse(action);
    if (!parsed.success) throw new ActionValidationError(`Invalid action: ${firstProblem(parsed.error)}; an action is {"type": "list_tools"} or {"type": "call_tool", "tool_name": NAME, "arguments": {...}}`, validationIssues(parsed.error));
    const a = parsed.data;
    if (a.type === "list_tools") return { observation: { tools: this.host.listTools(), metadata: {} }, reward: null, done: false };
    const step = await this.callTool(a.tool_name, a.arguments);
    return callToolAnswer(step, step.error ? step.error.message : formatToolResultForModel(step.result));
  }

  /** A tool call in the session's episode (also what MCP's tools/call runs); `timeoutMs` bounds this call (else the env's timeout). */
  callTool(name: string, args: Record<string, unknown>, timeoutMs?: number): Promise<ToolStep> {
    return this.active(() => this.runTool(name, args, timeoutMs));
  }

  private async runTool(name: string, args: Record<string, unknown>, timeoutMs?: number): Promise<ToolStep> {
    if (!this.episode && this.options.autoBegin && !this.closed) {
      this.beginning ??= this.host.begin({}).finally(() => (this.beginning = undefined));
      this.episode = await this.beginning;
      if (this.closed) {
        // Closed while the slot was being taken: give it back at once.
        const begun = this.episode;
        this.episode = undefined;
        await this.host.abandon(begun);
        throw new NoEpisodeError("the session was closed");
      }
    }
    const episode = this.episode;
    if (!episode) throw new NoEpisodeError("no episode is running in this session: send reset first");
    try {
      const step = await episode.callTool(name, args, timeoutMs);
      if (step.done) this.host.forget(episode);
      return step;
    } catch (err) {
      if (err instanceof EpisodeInfraError) this.host.forget(episode);
      throw err;
    }
  }

  state(): Record<string, unknown> {
    const e = this.episode;
    if (!e) return { episode_id: null, step_count: 0 };
    return { episode_id: e.episodeId, step_count: e.stepCount, done: e.done, reward: e.reward, max_turns: e.maxTurns, item_index: e.itemIndex };
  }

  /** One JSON-RPC message for the session's MCP server; the JSON-RPC answer. */
  async mcpMessage(data: Record<string, unknown>): Promise<JSONRPCMessage | Record<string, unknown>> {
    const checked = JSONRPCMessageSchema.safeParse(data);
    if (!checked.success) {
      const id = typeof data["id"] === "string" || typeof data["id"] === "number" ? data["id"] : null;
      return { jsonrpc: "2.0", id, error: { code: -32600, message: `Invalid Request: ${firstProblem(checked.error)}` } };
    }
    const mcp = await this.mcpServer();
    return (await mcp.transport.request(checked.data)) ?? { jsonrpc: "2.0", result: null };
  }

  private async mcpServer(): Promise<{ server: Server; transport: DirectTransport }> {
    if (this.mcp) return this.mcp;
    const server = createMcpServer(this.host.env.name, { listTools: () => this.host.listTools(), callTool: (name, args) => this.callTool(name, args) });
    const transport = new DirectTransport();
    await server.connect(transport);
    this.mcp = { server, transport };
    return this.mcp;
  }
}
