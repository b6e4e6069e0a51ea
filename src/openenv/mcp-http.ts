import { randomUUID } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { HttpError } from "../http/errors.js";
import { sendJson } from "../http/respond.js";
import type { EpisodeHost } from "./episode-host.js";
import { createMcpServer } from "./mcp.js";
import { discoverResult, EPISODE_META, episodeHandle, isStatelessRequest, statelessAnswer, statelessVersion, unsupportedVersion } from "./mcp-stateless.js";
import { Session } from "./session.js";

/** An MCP session over HTTP: the SDK's transport (2025-11-25), or none (OpenEnv's JSON-RPC sessions, 2026-07-28 episode handles). */
export interface McpHttpSession<Item> {
  session: Session<Item>;
  transport?: StreamableHTTPServerTransport;
}

/** What the MCP routes need of the server: its episodes, reading a body, and whether a session more fits. */
export interface McpHttpHost<Item> {
  host: EpisodeHost<Item>;
  body(req: IncomingMessage): Promise<unknown>;
  /** Undefined when one more session fits, else why not (--max-sessions). */
  full(): string | undefined;
}

/**
 * `/mcp` over HTTP, in the three forms clients speak: MCP's streamable HTTP transport with
 * sessions (2025-11-25: `initialize`, `Mcp-Session-Id`), MCP's stateless revision
 * (2026-07-28: `server/discover`, a version on every request, an episode handle in `_meta`),
 * and OpenEnv's plain JSON-RPC (`openenv/session/create`). Each session is one episode in one
 * slot (its first tools/call takes it).
 */
export class McpHttp<Item> {
  readonly sessions = new Map<string, McpHttpSession<Item>>();

  constructor(private readonly server: McpHttpHost<Item>) {}

  private get host(): EpisodeHost<Item> {
    return this.server.host;
  }

  async handle(req: IncomingMessage, res: ServerResponse, method: string): Promise<void> {
    const sessionId = req.headers["mcp-session-id"];
    const id = Array.isArray(sessionId) ? sessionId[0] : sessionId;
    if (method === "POST") {
      const body = await this.server.body(req);
      if (id !== undefined) {
        const s = this.sessions.get(id);
        if (!s?.transport) return sendJson(res, 404, { jsonrpc: "2.0", id: null, error: { code: -32001, message: `no MCP session ${id} (it ended, or idled out): initialize a new one` } });
        return s.transport.handleRequest(req, res, body);
      }
      const version = statelessVersion(req.headers["mcp-protocol-version"], body);
      if (isStatelessRequest(version)) {
        // A notification has no answer in the stateless revision: acknowledged and dropped.
        if (body && typeof body === "object" && !Array.isArray(body) && !("id" in body)) return void res.writeHead(202).end();
        return sendJson(res, 200, await this.stateless(body, version!));
      }
      if (isInitializeRequest(body)) {
        const full = this.server.full();
        if (full) return sendJson(res, 503, { jsonrpc: "2.0", id: (body as { id?: unknown }).id ?? null, error: { code: -32000, message: full } });
        return this.newSession(req, res, body);
      }
      // No MCP session header, no initialize, no stateless version: OpenEnv's plain JSON-RPC (its MCP client's production mode).
      return sendJson(res, 200, await this.openEnvRpc(body));
    }
    if ((method === "GET" || method === "DELETE") && id !== undefined) {
      const s = this.sessions.get(id);
      if (!s?.transport) return sendJson(res, 404, { jsonrpc: "2.0", id: null, error: { code: -32001, message: `no MCP session ${id}` } });
      return s.transport.handleRequest(req, res);
    }
    throw new HttpError(405, `${method} /mcp needs an Mcp-Session-Id header (start a session with a POST initialize), or a stateless POST (MCP-Protocol-Version: 2026-07-28)`);
  }

  async end(id: string): Promise<void> {
    const s = this.sessions.get(id);
    if (!s) return;
    this.sessions.delete(id);
    await s.session.close().catch(() => undefined);
    await s.transport?.close().catch(() => undefined);
  }

  /** A streamable-HTTP MCP session: one Session (its first tools/call takes a slot) behind the SDK's own transport and server. */
  private async newSession(req: IncomingMessage, res: ServerResponse, body: unknown): Promise<void> {
    const session = new Session(this.host, { autoBegin: true });
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      enableJsonResponse: true,
      onsessioninitialized: (sid) => {
        this.sessions.set(sid, { session, transport });
      },
    });
    transport.onclose = () => {
      const sid = transport.sessionId;
      if (sid && this.sessions.get(sid)?.transport === transport) void this.end(sid);
    };
    const server = createMcpServer(this.host.env.name, { listTools: () => this.host.listTools(), callTool: (name, args) => session.callTool(name, args) });
    await server.connect(transport);
    await transport.handleRequest(req, res, body);
  }

  /**
   * One request of MCP's stateless revision. `tools/call` runs in the episode its
   * `_meta["dev.slotpool/episode"]` names: none, a one-call episode (the call, then the
   * reward, as HTTP /step); "new", a new episode kept for later calls (counted as a session,
   * ended by submit, idling or the turn limit), whose handle the result's `_meta` carries;
   * a handle, that episode.
   */
  private async stateless(body: unknown, version: string): Promise<Record<string, unknown>> {
    const req = (body && typeof body === "object" && !Array.isArray(body) ? body : {}) as Record<string, unknown>;
    const rpcId = typeof req["id"] === "string" || typeof req["id"] === "number" ? req["id"] : null;
    const fail = (code: number, message: string) => ({ jsonrpc: "2.0", id: rpcId, error: { code, message } });
    const refused = unsupportedVersion(version, rpcId);
    if (refused) return refused;
    if (req["jsonrpc"] !== "2.0" || typeof req["method"] !== "string") return fail(-32600, "Invalid Request: a JSON-RPC 2.0 request has jsonrpc \"2.0\" and a method");
    const method = req["method"];
    if (method === "server/discover") {
      const tools = this.host.listTools().map((t) => t.name).join(", ");
      return { jsonrpc: "2.0", id: rpcId, result: discoverResult(this.host.env.name, `slotpool env '${this.host.env.name}': each episode runs in a sandboxed slot of its own; tools: ${tools}. Send _meta {"${EPISODE_META}": "new"} on a tools/call to begin an episode and pass back the handle its result's _meta gives.`) };
    }
    if (method === "tools/list") return statelessAnswer(await new Session(this.host).mcpMessage(req), method);
    if (method !== "tools/call") return fail(-32601, `Method not found: ${method} (the stateless revision here answers server/discover, tools/list, tools/call)`);
    const handle = episodeHandle(req);
    if (handle === undefined) {
      const session = new Session(this.host, { autoBegin: true });
      try {
        const answer = statelessAnswer(await session.mcpMessage(req), method) as { result?: { structuredContent?: Record<string, unknown> } };
        const episode = session.currentEpisode;
        // A one-call episode ends with its call: scored now (the reward and done in the result), as HTTP /step.
        if (episode && !episode.done && answer.result?.structuredContent) {
          const metadata = await episode.finishNow();
          Object.assign(answer.result.structuredContent, { done: true, reward: episode.reward, metadata });
        }
        return answer as Record<string, unknown>;
      } finally {
        await session.close();
      }
    }
    let id = handle;
    if (handle === "new") {
      const full = this.server.full();
      if (full) return fail(-32000, full);
      id = randomUUID();
      this.sessions.set(id, { session: new Session(this.host, { autoBegin: true }) });
    }
    const s = this.sessions.get(id);
    if (!s || s.transport) return fail(-32602, `Invalid params: _meta["${EPISODE_META}"] names no episode of this server (${JSON.stringify(handle)}: it ended, idled out, or was never given); send "new" to begin one`);
    const answer = statelessAnswer(await s.session.mcpMessage(req), method, { [EPISODE_META]: id });
    if (s.session.currentEpisode?.done) await this.end(id);
    return answer;
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
      const full = this.server.full();
      if (full) return fail(-32000, full);
      const id = randomUUID();
      this.sessions.set(id, { session: new Session(this.host, { autoBegin: true }) });
      return { jsonrpc: "2.0", id: rpcId, result: { session_id: id } };
    }
    if (method === "openenv/session/close") {
      if (!sid || !this.sessions.has(sid)) return fail(-32602, `Invalid params: unknown session_id ${JSON.stringify(sid ?? null)}`);
      await this.end(sid);
      return { jsonrpc: "2.0", id: rpcId, result: { session_id: sid, closed: true } };
    }
    const { session_id: _drop, ...rest } = params;
    const forwarded = { ...req, params: rest };
    if (method === "tools/list") return (await new Session(this.host).mcpMessage(forwarded)) as Record<string, unknown>;
    if (method !== "tools/call") return fail(-32601, `Method not found: ${method} (this endpoint answers tools/list, tools/call, openenv/session/create, openenv/session/close, MCP's streamable HTTP transport, and its stateless revision)`);
    if (!sid) return fail(-32602, "Invalid params: tools/call needs params.session_id from openenv/session/create (an episode lives in a session), or use MCP's streamable HTTP transport");
    const s = this.sessions.get(sid);
    if (!s) return fail(-32602, `Invalid params: unknown session_id ${sid}`);
    const answer = (await s.session.mcpMessage(forwarded)) as Record<string, unknown>;
    // OpenEnv's servers answer tools/call with FastMCP's result, whose `data` is what its MCPToolClient.call_tool returns: the output.
    const result = answer["result"] as { structuredContent?: { output?: unknown } } | undefined;
    if (result?.structuredContent && "output" in result.structuredContent) return { ...answer, result: { ...result, data: result.structuredContent.output } };
    return answer;
  }
}
