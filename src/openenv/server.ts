import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { WebSocketServer, type WebSocket } from "ws";
import type { AgentEnv } from "../env/agent-env.js";
import { BearerAuth } from "../http/auth.js";
import { JsonBodyReader } from "../http/body.js";
import { HttpError } from "../http/errors.js";
import { closeGracefully, listenOn } from "../http/lifecycle.js";
import { sendError, sendJson } from "../http/respond.js";
import { requestPath, requestTarget } from "../http/target.js";
import { createLogger, type Logger } from "../observability/logger.js";
import { EpisodeHost } from "./episode-host.js";
import { ActionValidationError, CapacityReachedError, EpisodeInfraError, NoItemError, OpenEnvError } from "./errors.js";
import { FrameBudget, type FrameAccount } from "./frame-budget.js";
import { DEFAULT_LIMITS, type ServerLimits } from "./limits.js";
import { McpHttp } from "./mcp-http.js";
import { ModelUrlPolicy, ModelUrlRefusedError } from "./model-url.js";
import { openEnvStatus } from "./status.js";
import { openApiDocument } from "./openapi.js";
import { parseRunRequest, runRollout } from "./rollout.js";
import { errorFrame, frameOf, Session } from "./session.js";
import { ActionSchema, callToolAnswer, firstProblem, ResetDataSchema, schemas, validationIssues } from "./wire.js";
import { formatToolResultForModel } from "../agent/agent-loop.js";

export interface OpenEnvServerOptions<Item> {
  /** A started env (its pool is up). The server never stops it: the caller does. */
  env: AgentEnv<Item>;
  logger?: Logger;
  /** A session with no message for this long loses its episode (slot reset and released). Default 600 000 ms. */
  idleTimeoutMs?: number;
  /** Bearer token every route but /health asks for (none: open, for loopback use). */
  token?: string;
  /** Largest WebSocket message and HTTP body, bytes (limits.maxMessageBytes). Default 16 MiB. */
  maxMessageBytes?: number;
  /** The server's bounds (seeds, sessions, frames, model URLs and answers, /run's deadline): limits.ts. */
  limits?: Partial<ServerLimits>;
}


/**
 * Serves an AgentEnv as an OpenEnv environment (huggingface/OpenEnv's wire protocol):
 * WebSocket `/ws` (one episode per connection, in a slot of its own), HTTP `/reset`,
 * `/step`, `/state`, `/schema`, `/metadata`, `/health`, `/openapi.json`, MCP at `/mcp` (the streamable HTTP
 * transport, and OpenEnv's plain JSON-RPC with `openenv/session/*`; and a WebSocket of bare
 * JSON-RPC at `/mcp`), and `POST /run`, one
 * rollout of the env's own agent loop on the trainer's model endpoint. See docs/trainers.md.
 */
export class OpenEnvServer<Item = unknown> {
  readonly host: EpisodeHost<Item>;
  private readonly http: Server;
  private readonly wss: WebSocketServer;
  private readonly log: Logger;
  private readonly auth: BearerAuth;
  private readonly idleTimeoutMs: number;
  readonly limits: ServerLimits;
  private readonly modelUrls: ModelUrlPolicy;
  private readonly bodies: JsonBodyReader;
  private readonly frames: FrameBudget;
  private readonly sockets = new Map<WebSocket, Session<Item>>();
  /** The sockets of `sockets` that speak bare JSON-RPC (WebSocket /mcp), not OpenEnv's frames. */
  private readonly rpcSockets = new WeakSet<WebSocket>();
  private readonly mcp: McpHttp<Item>;
  private sweeper: NodeJS.Timeout | undefined;
  private closing = false;
  readonly startedAt = Date.now();

  constructor(options: OpenEnvServerOptions<Item>) {
    this.log = options.logger ?? createLogger({ name: "openenv-server" });
    this.limits = { ...DEFAULT_LIMITS, ...options.limits, ...(options.maxMessageBytes !== undefined ? { maxMessageBytes: options.maxMessageBytes } : {}) };
    this.modelUrls = new ModelUrlPolicy(this.limits.modelUrlAllow);
    this.host = new EpisodeHost(options.env, this.log, this.limits);
    this.auth = new BearerAuth(options.token, { allowQueryTokenOnUpgrade: true });
    this.idleTimeoutMs = options.idleTimeoutMs ?? 600_000;
    // HTTP bodies share the frames' budget: a body is held whole while parsed.
    this.bodies = new JsonBodyReader({ maxBytes: this.limits.maxMessageBytes, budgetBytes: this.limits.frameBudgetBytes });
    this.frames = new FrameBudget(this.limits.frameBudgetBytes);
    this.http = createServer((req, res) => void this.onRequest(req, res));
    this.wss = new WebSocketServer({ noServer: true, maxPayload: this.limits.maxMessageBytes });
    this.mcp = new McpHttp({ host: this.host, body: (req) => this.body(req), full: () => (this.sessions >= this.limits.maxSessions ? this.tooManySessions().message : undefined) });
    this.http.on("upgrade", (req, socket, head) => this.onUpgrade(req, socket, head));
  }

  async listen(port: number, host = "127.0.0.1"): Promise<string> {
    const url = await listenOn(this.http, port, host);
    const every = Math.max(50, Math.min(5_000, Math.floor(this.idleTimeoutMs / 4)));
    this.sweeper = setInterval(() => void this.sweepIdle(), every);
    this.sweeper.unref();
    return url;
  }

  /** Sessions open now: WebSocket connections and MCP sessions. */
  get sessions(): number {
    // A WebSocket that joined an HTTP MCP session (OpenEnv's MCPToolClient) is one session, not two.
    return new Set([...this.sockets.values(), ...[...this.mcp.sessions.values()].map((s) => s.session)]).size;
  }

  /** Bytes of WebSocket messages received and not yet handled, over all connections (the frame budget's use). */
  get framesInFlight(): number {
    return this.frames.inFlight;
  }

  /** Ends every session (their slots reset and released) and stops listening. */
  async close(): Promise<void> {
    this.closing = true;
    if (this.sweeper) clearInterval(this.sweeper);
    for (const ws of this.sockets.keys()) ws.close(1001, "server shutting down");
    await Promise.all([...this.sockets.values()].map((s) => s.close()));
    this.sockets.clear();
    await Promise.all([...this.mcp.sessions.keys()].map((id) => this.mcp.end(id)));
    await this.host.closeAll();
    this.wss.close();
    await closeGracefully(this.http, 2_000);
  }

  // ---------------------------------------------------------------- WebSocket /ws

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    try {
      if (requestPath(req.url) !== "/ws" && requestPath(req.url) !== "/mcp") throw new HttpError(404, `no WebSocket endpoint at ${requestPath(req.url)}; OpenEnv sessions are at /ws (MCP JSON-RPC at /mcp)`);
      if (this.closing) throw new HttpError(503, "the server is shutting down");
      this.auth.check(req, "upgrade");
      if (this.sessions >= this.limits.maxSessions) throw this.tooManySessions();
    } catch (err) {
      const status = err instanceof HttpError ? err.status : 500;
      const body = JSON.stringify({ error: err instanceof Error ? err.message : String(err) });
      socket.end(`HTTP/1.1 ${status} ${status === 404 ? "Not Found" : status === 401 ? "Unauthorized" : status === 403 ? "Forbidden" : "Service Unavailable"}\r\nconnection: close\r\ncontent-type: application/json\r\n${status === 503 ? "retry-after: 5\r\n" : ""}content-length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
      return;
    }
    if (requestPath(req.url) === "/mcp") {
      this.wss.handleUpgrade(req, socket, head, (ws) => this.onRpcSocket(ws, socket));
      return;
    }
    // OpenEnv's MCP client opens an HTTP MCP session first and joins it here (?session_id=),
    // so its WebSocket reset/step and its HTTP tools/call share one episode.
    const joined = requestTarget(req.url).query.get("session_id") ?? undefined;
    if (joined !== undefined && !this.mcp.sessions.has(joined)) {
      socket.end("HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.onSocket(ws, joined, socket));
  }

  /** The connection's account in the frame budget: past it, an error frame and close 1013 (try again later). */
  private account(ws: WebSocket, socket: Duplex, rpc: boolean): FrameAccount {
    const account = this.frames.track(socket, () => {
      const why = `the server's budget for WebSocket messages in flight (${this.limits.frameBudgetBytes} bytes over all connections) is used up: this connection is closed; retry later, or send smaller messages`;
      socket.pause();
      if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(rpc ? { jsonrpc: "2.0", id: null, error: { code: -32000, message: why } } : errorFrame("CAPACITY_REACHED", why)));
      ws.close(1013, "message budget used up");
      // The client is mid-frame and may never read the close: drop the connection soon after.
      setTimeout(() => ws.terminate(), 1_000).unref();
    });
    ws.once("close", () => account.close());
    return account;
  }

  private onSocket(ws: WebSocket, joined: string | undefined, socket: Duplex): void {
    const session = joined !== undefined ? this.mcp.sessions.get(joined)!.session : new Session(this.host);
    this.sockets.set(ws, session);
    const account = this.account(ws, socket, false);
    const end = () => {
      account.close();
      if (!this.sockets.delete(ws)) return;
      const closing = joined !== undefined ? this.mcp.end(joined) : session.close();
      void closing.catch((err: unknown) => this.log.warn({ err: String(err) }, "closing a session failed"));
    };
    ws.on("message", (data, isBinary) => {
      const bytes = (data as Buffer).length;
      account.received(bytes);
      const raw = isBinary ? Buffer.from(data as Buffer).toString("utf8") : data.toString();
      void session.handle(raw).finally(() => account.handled(bytes)).then((frame) => {
        if (frame === undefined) {
          // {"type":"close"}: the episode ends, then the connection.
          end();
          ws.close(1000, "closed by the client");
          return;
        }
        if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(frame));
      });
    });
    ws.on("close", end);
    ws.on("error", end);
  }

  /**
   * WebSocket /mcp, as OpenEnv's servers have it: every message is a JSON-RPC 2.0 request
   * (tools/list, tools/call) answered by the same MCP server as every session; the connection
   * is one session, so one episode in one slot (its first tools/call takes it), released when
   * the connection ends.
   */
  private onRpcSocket(ws: WebSocket, socket: Duplex): void {
    const session = new Session(this.host, { autoBegin: true });
    this.sockets.set(ws, session);
    this.rpcSockets.add(ws);
    const account = this.account(ws, socket, true);
    const end = () => {
      account.close();
      if (!this.sockets.delete(ws)) return;
      void session.close().catch((err: unknown) => this.log.warn({ err: String(err) }, "closing a session failed"));
    };
    ws.on("message", (data, isBinary) => {
      const bytes = (data as Buffer).length;
      account.received(bytes);
      const raw = isBinary ? Buffer.from(data as Buffer).toString("utf8") : data.toString();
      let message: unknown;
      try {
        message = JSON.parse(raw);
      } catch (err) {
        account.handled(bytes);
        ws.send(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32700, message: `Parse error: ${(err as Error).message}` } }));
        return;
      }
      const request = message && typeof message === "object" && !Array.isArray(message) ? (message as Record<string, unknown>) : {};
      void session.mcpMessage(request).finally(() => account.handled(bytes)).then(
        (answer) => ws.readyState === ws.OPEN && ws.send(JSON.stringify(answer)),
        (err: unknown) => ws.readyState === ws.OPEN && ws.send(JSON.stringify({ jsonrpc: "2.0", id: request["id"] ?? null, error: { code: -32603, message: String((err as Error).message ?? err) } })),
      );
    });
    ws.on("close", end);
    ws.on("error", end);
  }

  private async sweepIdle(): Promise<void> {
    const now = Date.now();
    for (const [ws, session] of this.sockets) {
      const since = session.idleSince;
      if (since === undefined || now - since < this.idleTimeoutMs) continue;
      this.sockets.delete(ws);
      await session.close().catch(() => undefined);
      if (ws.readyState === ws.OPEN) {
        const why = `the session was idle for ${this.idleTimeoutMs} ms: its episode ended and its slot was released; connect again`;
        // A JSON-RPC socket gets JSON-RPC's server error, an OpenEnv one its SESSION_ERROR frame.
        ws.send(JSON.stringify(this.rpcSockets.has(ws) ? { jsonrpc: "2.0", id: null, error: { code: -32000, message: why } } : errorFrame("SESSION_ERROR", why)));
        ws.close(1000, "idle timeout");
      }
    }
    for (const [id, s] of this.mcp.sessions) {
      const since = s.session.idleSince;
      if (since !== undefined && now - since >= this.idleTimeoutMs) await this.mcp.end(id);
    }
  }

  // ---------------------------------------------------------------- HTTP

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = requestPath(req.url);
    const method = req.method ?? "GET";
    try {
      if (path === "/health" && method === "GET") return sendJson(res, 200, { status: "healthy" });
      this.auth.check(req);
      if (path === "/mcp") return await this.mcp.handle(req, res, method);
      const route = `${method} ${path}`;
      switch (route) {
        case "GET /metadata":
          return sendJson(res, 200, this.metadata());
        case "GET /schema":
          return sendJson(res, 200, schemas());
        case "GET /openapi.json":
          return sendJson(res, 200, openApiDocument(this.host.env.name));
        case "GET /status":
          return sendJson(res, 200, openEnvStatus(this));
        case "GET /state":
          // Stateless HTTP has no episode (as OpenEnv's /state over HTTP): the server's counts beside the empty state.
          return sendJson(res, 200, { episode_id: null, step_count: 0, active_episodes: this.host.activeEpisodes, sessions: this.sessions });
        case "POST /reset":
          return sendJson(res, 200, await this.httpReset(await this.body(req)));
        case "POST /step":
          return sendJson(res, 200, await this.httpStep(await this.body(req)));
        case "POST /run":
          return sendJson(res, 200, await this.run(req, res));
      }
      const known = ["/metadata", "/schema", "/openapi.json", "/state", "/status", "/reset", "/step", "/run", "/health"];
      throw new HttpError(known.includes(path) ? 405 : 404, known.includes(path) ? `method ${method} not allowed on ${path}` : `no route ${method} ${path}`);
    } catch (err) {
      sendHttpError(res, err);
    }
  }

  private async body(req: IncomingMessage): Promise<unknown> {
    if (req.headers["content-length"] === "0") return {};
    return this.bodies.read(req);
  }

  /** POST /run: the rollout is cancelled (its slot reset and freed) when the client goes away before its answer. */
  private async run(req: IncomingMessage, res: ServerResponse): Promise<unknown> {
    const request = parseRunRequest(await this.body(req));
    const gone = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) gone.abort();
    };
    res.once("close", onClose);
    try {
      return await runRollout(this.host, request, { limits: this.limits, modelUrls: this.modelUrls, signal: gone.signal });
    } finally {
      res.off("close", onClose);
    }
  }

  private tooManySessions(): HttpError {
    return new HttpError(503, `the server holds ${this.sessions} sessions, its most (--max-sessions ${this.limits.maxSessions}): close idle sessions (WebSocket connections, MCP sessions) or retry later`);
  }

  private metadata(): Record<string, unknown> {
    const env = this.host.env;
    return {
      name: env.name,
      description: `slotpool env '${env.name}' served as an OpenEnv environment: each episode runs in a sandboxed slot of its own; tools: ${this.host.listTools().map((t) => t.name).join(", ")}`,
      readme_content: null,
      version: null,
      author: null,
      documentation_url: null,
    };
  }

  /** HTTP reset, stateless as in OpenEnv: the episode is set up (proving the item can be) and ended at once. */
  private async httpReset(body: unknown): Promise<unknown> {
    const session = new Session(this.host);
    try {
      const answer = await session.reset(body ?? {});
      return answer;
    } finally {
      await session.close();
    }
  }

  /**
   * HTTP step, stateless as in OpenEnv: a single-step episode. The action runs in a fresh
   * episode (of the item `seed` / `episode_id` selects, else the next), which is then scored:
   * the answer carries `done: true` and the reward.
   */
  private async httpStep(body: unknown): Promise<unknown> {
    if (!body || typeof body !== "object" || Array.isArray(body)) throw new ActionValidationError(`Invalid step: the body must be {"action": {...}}`);
    const { action, seed, episode_id, timeout_s } = body as Record<string, unknown>;
    // OpenEnv's StepRequest.timeout_s: this action's own bound (a positive number of seconds).
    if (timeout_s !== undefined && timeout_s !== null && (typeof timeout_s !== "number" || !(timeout_s > 0))) throw new ActionValidationError(`Invalid step: timeout_s must be a positive number of seconds, got ${JSON.stringify(timeout_s)}`, [{ type: "greater_than", loc: ["timeout_s"], msg: "must be > 0" }]);
    if (action === undefined) throw new ActionValidationError(`Invalid step: action is required ({"action": {"type": "call_tool", "tool_name": NAME, "arguments": {...}}})`);
    const parsed = ActionSchema.safeParse(action);
    if (!parsed.success) throw new ActionValidationError(`Invalid step: action.${firstProblem(parsed.error)}`, validationIssues(parsed.error).map((i) => ({ ...i, loc: ["action", ...i.loc] })));
    if (parsed.data.type === "list_tools") return { observation: { tools: this.host.listTools(), metadata: {} }, reward: null, done: false };
    const reset = ResetDataSchema.safeParse({ ...(seed !== undefined ? { seed } : {}), ...(episode_id !== undefined ? { episode_id } : {}) });
    if (!reset.success) throw new ActionValidationError(`Invalid step: ${firstProblem(reset.error)}`, validationIssues(reset.error));
    const session = new Session(this.host);
    try {
      await session.reset(reset.data);
      const step = await session.callTool(parsed.data.tool_name, parsed.data.arguments, typeof timeout_s === "number" ? Math.ceil(timeout_s * 1000) : undefined);
      const final = step.done ? step : { ...step, done: true, metadata: await session.currentEpisode!.finishNow(), reward: session.currentEpisode!.reward };
      return callToolAnswer(final, final.error ? final.error.message : formatToolResultForModel(final.result));
    } finally {
      await session.close();
    }
  }

}

/** HTTP answers of the room's errors: a status that says whose fault it was, and OpenEnv's code. */
function sendHttpError(res: ServerResponse, err: unknown): void {
  if (err instanceof OpenEnvError) {
    const status = err instanceof ModelUrlRefusedError ? 403 : err instanceof ActionValidationError ? 422 : err instanceof CapacityReachedError ? 503 : err instanceof NoItemError ? 404 : err instanceof EpisodeInfraError ? 502 : 409;
    const frame = frameOf(err);
    return sendJson(res, status, { error: err.message, ...frame.data });
  }
  sendError(res, err);
}
