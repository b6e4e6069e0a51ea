import { randomUUID } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { WebSocketServer, type WebSocket } from "ws";
import type { AgentEnv } from "../env/agent-env.js";
import { BearerAuth } from "../http/auth.js";
import { readJsonBody } from "../http/body.js";
import { HttpError } from "../http/errors.js";
import { closeGracefully, listenOn } from "../http/lifecycle.js";
import { sendError, sendJson } from "../http/respond.js";
import { requestPath, requestTarget } from "../http/target.js";
import { createLogger, type Logger } from "../observability/logger.js";
import { EpisodeHost } from "./episode-host.js";
import { ActionValidationError, CapacityReachedError, EpisodeInfraError, NoItemError, OpenEnvError } from "./errors.js";
import { createMcpServer } from "./mcp.js";
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
  /** Largest WebSocket message and HTTP body, bytes. Default 16 MiB. */
  maxMessageBytes?: number;
}

interface McpHttpSession<Item> {
  session: Session<Item>;
  transport?: StreamableHTTPServerTransport;
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
  private readonly maxBytes: number;
  private readonly sockets = new Map<WebSocket, Session<Item>>();
  /** The sockets of `sockets` that speak bare JSON-RPC (WebSocket /mcp), not OpenEnv's frames. */
  private readonly rpcSockets = new WeakSet<WebSocket>();
  private readonly mcpSessions = new Map<string, McpHttpSession<Item>>();
  private sweeper: NodeJS.Timeout | undefined;
  private closing = false;
  readonly startedAt = Date.now();

  constructor(options: OpenEnvServerOptions<Item>) {
    this.log = options.logger ?? createLogger({ name: "openenv-server" });
    this.host = new EpisodeHost(options.env, this.log);
    this.auth = new BearerAuth(options.token, { allowQueryTokenOnUpgrade: true });
    this.idleTimeoutMs = options.idleTimeoutMs ?? 600_000;
    this.maxBytes = options.maxMessageBytes ?? 16 * 1024 * 1024;
    this.http = createServer((req, res) => void this.onRequest(req, res));
    this.wss = new WebSocketServer({ noServer: true, maxPayload: this.maxBytes });
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
    return new Set([...this.sockets.values(), ...[...this.mcpSessions.values()].map((s) => s.session)]).size;
  }

  /** Ends every session (their slots reset and released) and stops listening. */
  async close(): Promise<void> {
    this.closing = true;
    if (this.sweeper) clearInterval(this.sweeper);
    for (const ws of this.sockets.keys()) ws.close(1001, "server shutting down");
    await Promise.all([...this.sockets.values()].map((s) => s.close()));
    this.sockets.clear();
    await Promise.all([...this.mcpSessions.keys()].map((id) => this.endMcpSession(id)));
    await this.host.closeAll();
    this.wss.close();
    await closeGracefully(this.http, 2_000);
  }

  // ---------------------------------------------------------------- WebSocket /ws

  private onUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    try {
      if (requestPath(req.url) !== "/ws" && requestPath(req.url) !== "/mcp") throw new HttpError(404, `no WebSocket endpoint at ${requestPath(req.url)}; OpenEnv sessions are at /ws (MCP JSON-RPC at /mcp)`);
      if (this.closing) throw new HttpError(503, "the server is shutting down");
      this.auth.check(req);
    } catch (err) {
      const status = err instanceof HttpError ? err.status : 500;
      socket.end(`HTTP/1.1 ${status} ${status === 404 ? "Not Found" : status === 401 ? "Unauthorized" : status === 403 ? "Forbidden" : "Service Unavailable"}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
      return;
    }
    if (requestPath(req.url) === "/mcp") {
      this.wss.handleUpgrade(req, socket, head, (ws) => this.onRpcSocket(ws));
      return;
    }
    // OpenEnv's MCP client opens an HTTP MCP session first and joins it here (?session_id=),
    // so its WebSocket reset/step and its HTTP tools/call share one episode.
    const joined = requestTarget(req.url).query.get("session_id") ?? undefined;
    if (joined !== undefined && !this.mcpSessions.has(joined)) {
      socket.end("HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    this.wss.handleUpgrade(req, socket, head, (ws) => this.onSocket(ws, joined));
  }

  private onSocket(ws: WebSocket, joined: string | undefined): void {
    const session = joined !== undefined ? this.mcpSessions.get(joined)!.session : new Session(this.host);
    this.sockets.set(ws, session);
    const end = () => {
      if (!this.sockets.delete(ws)) return;
      const closing = joined !== undefined ? this.endMcpSession(joined) : session.close();
      void closing.catch((err: unknown) => this.log.warn({ err: String(err) }, "closing a session failed"));
    };
    ws.on("message", (data, isBinary) => {
      const raw = isBinary ? Buffer.from(data as Buffer).toString("utf8") : data.toString();
      void session.handle(raw).then((frame) => {
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
  private onRpcSocket(ws: WebSocket): void {
    const session = new Session(this.host, { autoBegin: true });
    this.sockets.set(ws, session);
    this.rpcSockets.add(ws);
    const end = () => {
      if (!this.sockets.delete(ws)) return;
      void session.close().catch((err: unknown) => this.log.warn({ err: String(err) }, "closing a session failed"));
    };
    ws.on("message", (data, isBinary) => {
      const raw = isBinary ? Buffer.from(data as Buffer).toString("utf8") : data.toString();
      let message: unknown;
      try {
        message = JSON.parse(raw);
      } catch (err) {
        ws.send(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32700, message: `Parse error: ${(err as Error).message}` } }));
        return;
      }
      const request = message && typeof message === "object" && !Array.isArray(message) ? (message as Record<string, unknown>) : {};
      void session.mcpMessage(request).then(
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
    for (const [id, s] of this.mcpSessions) {
      const since = s.session.idleSince;
      if (since !== undefined && now - since >= this.idleTimeoutMs) await this.endMcpSession(id);
    }
  }

  // ---------------------------------------------------------------- HTTP

  private async onRequest(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = requestPath(req.url);
    const method = req.method ?? "GET";
    try {
      if (path === "/health" && method === "GET") return sendJson(res, 200, { status: "healthy" });
      this.auth.check(req);
      if (path === "/mcp") return await this.onMcp(req, res, method);
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
          return sendJson(res, 200, await runRollout(this.host, parseRunRequest(await this.body(req))));
      }
      const known = ["/metadata", "/schema", "/openapi.json", "/state", "/status", "/reset", "/step", "/run", "/health"];
      throw new HttpError(known.includes(path) ? 405 : 404, known.includes(path) ? `method ${method} not allowed on ${path}` : `no route ${method} ${path}`);
    } catch (err) {
      sendHttpError(res, err);
    }
  }

  private async body(req: IncomingMessage): Promise<unknown> {
    if (req.headers["content-length"] === "0") return {};
    return readJsonBody(req, this.maxBytes);
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

  // ---------------------------------------------------------------- MCP /mcp

  private async onMcp(req: IncomingMessage, res: ServerResponse, method: string): Promise<void> {
    const sessionId = req.headers["mcp-session-id"];
    const id = Array.isArray(sessionId) ? sessionId[0] : sessionId;
    if (method === "POST") {
      const body = await this.body(req);
      if (id !== undefined) {
        const s = this.mcpSessions.get(id);
        if (!s?.transport) return sendJson(res, 404, { jsonrpc: "2.0", id: null, error: { code: -32001, message: `no MCP session ${id} (it ended, or idled out): initialize a new one` } });
        return s.transport.handleRequest(req, res, body);
      }
      if (isInitializeRequest(body)) return this.newMcpSession(req, res, body);
      // No MCP session header and no initialize: OpenEnv's plain JSON-RPC (its MCP client's production mode).
      return sendJson(res, 200, await this.openEnvRpc(body));
    }
    if ((method === "GET" || method === "DELETE") && id !== undefined) {
      const s = this.mcpSessions.get(id);
      if (!s?.transport) return sendJson(res, 404, { jsonrpc: "2.0", id: null, error: { code: -32001, message: `no MCP session ${id}` } });
      return s.transport.handleRequest(req, res);
    }
    throw new HttpError(405, `${method} /mcp needs an Mcp-Session-Id header (start a session with a POST initialize)`);
  }

  /** A streamable-HTTP MCP session: one Session (its first tools/call takes a slot) behind the SDK's own transport and server. */
  private async newMcpSession(req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    const session = new Session(this.host, { autoBegin: true });
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: true,
      onsessioninitialized: (sid) => {
        this.mcpSessions.set(sid, { session, transport });
      },
    });
    transport.onclose = () => {
      const sid = transport.sessionId;
      if (sid && this.mcpSessions.get(sid)?.transport === transport) void this.endMcpSession(sid);
    };
    const server = createMcpServer(this.host.env.name, { listTools: () => this.host.listTools(), callTool: (name, args) => session.callTool(name, args) });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  }

  private async endMcpSession(id: string): Promise<void> {
    const s = this.mcpSessions.get(id);
    if (!s) return;
    this.mcpSessions.delete(id);
    await s.session.close().catch(() => undefined);
    await s.transport?.close().catch(() => undefined);
  }

  /**
   * OpenEnv's JSON-RPC at POST /mcp without MCP's session header: `openenv/session/create`
   * and `openenv/session/close` hold a session across requests (by `params.session_id`),
   * and `tools/list` / `tools/call` run in it through the same MCP server as every session.
   */
  private async openEnvRpc(body: unknown): Promise<Record<string, unknown>> {
    const req = (body && typeof body === "object" && !Array.isArray(body) ? body : {}) as Record<string, unknown>;
    const rpcId = typeof req["id"] === "string" || typeof req["id"] === "number" ? req["id"] : null;
    const fail = (code: number, message: string) => ({ jsonrpc: "2.0", id: rpcId, error: { code, message } });
    if (req["jsonrpc"] !== "2.0" || typeof req["method"] !== "string") return fail(-32600, "Invalid Request: a JSON-RPC 2.0 request has jsonrpc \"2.0\" and a method");
    const params = (req["params"] ?? {}) as Record<string, unknown>;
    if (typeof params !== "object" || Array.isArray(params)) return fail(-32602, "Invalid params: params must be an object");
    const method = req["method"];
    const sid = typeof params["session_id"] === "string" ? params["session_id"] : undefined;
    if (method === "openenv/session/create") {
      const id = randomUUID();
      this.mcpSessions.set(id, { session: new Session(this.host, { autoBegin: true }) });
      return { jsonrpc: "2.0", id: rpcId, result: { session_id: id } };
    }
    if (method === "openenv/session/close") {
      if (!sid || !this.mcpSessions.has(sid)) return fail(-32602, `Invalid params: unknown session_id ${JSON.stringify(sid ?? null)}`);
      await this.endMcpSession(sid);
      return { jsonrpc: "2.0", id: rpcId, result: { session_id: sid, closed: true } };
    }
    const { session_id: _drop, ...rest } = params;
    const forwarded = { ...req, params: rest };
    if (method === "tools/list") return (await new Session(this.host).mcpMessage(forwarded)) as Record<string, unknown>;
    if (method !== "tools/call") return fail(-32601, `Method not found: ${method} (this endpoint answers tools/list, tools/call, openenv/session/create, openenv/session/close, and MCP's streamable HTTP transport)`);
    if (!sid) return fail(-32602, "Invalid params: tools/call needs params.session_id from openenv/session/create (an episode lives in a session), or use MCP's streamable HTTP transport");
    const s = this.mcpSessions.get(sid);
    if (!s) return fail(-32602, `Invalid params: unknown session_id ${sid}`);
    const answer = (await s.session.mcpMessage(forwarded)) as Record<string, unknown>;
    // OpenEnv's servers answer tools/call with FastMCP's result, whose `data` is what its MCPToolClient.call_tool returns: the output.
    const result = answer["result"] as { structuredContent?: { output?: unknown } } | undefined;
    if (result?.structuredContent && "output" in result.structuredContent) return { ...answer, result: { ...result, data: result.structuredContent.output } };
    return answer;
  }
}

/** HTTP answers of the room's errors: a status that says whose fault it was, and OpenEnv's code. */
function sendHttpError(res: ServerResponse, err: unknown): void {
  if (err instanceof OpenEnvError) {
    const status = err instanceof ActionValidationError ? 422 : err instanceof CapacityReachedError ? 503 : err instanceof NoItemError ? 404 : err instanceof EpisodeInfraError ? 502 : 409;
    const frame = frameOf(err);
    return sendJson(res, status, { error: err.message, ...frame.data });
  }
  sendError(res, err);
}
