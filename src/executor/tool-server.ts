import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { performance } from "node:perf_hooks";
import pLimit, { type LimitFunction } from "p-limit";
import type { Logger } from "pino";
import { silentLogger } from "../observability/logger.js";
import { ToolServerExecuteRequestSchema } from "../protocol/executor.js";
import type { ToolResult } from "../protocol/tool.js";
import { ToolRegistry } from "../tools/registry.js";
import { clampTimeoutS } from "./config.js";
import type { ExternalTool, ExternalToolOutput } from "./external-tool.js";
import { BearerAuth } from "../http/auth.js";
import { JsonBodyReader, parseBody } from "../http/body.js";
import { HttpError } from "../http/errors.js";
import { closeConnectionsOnShutdown, closeGracefully, listenOn, serverUrl } from "../http/lifecycle.js";
import { sendError, sendJson } from "../http/respond.js";
import { RouteTable } from "../http/routes.js";
import { dropNulls } from "./wire-compat.js";

/**
 * The ToolServer hosts external tools in their own process, so API keys stay there and never
 * reach the executor, the env or a sandbox. Routes (compatible with the original):
 * `GET /health`, `GET /tools` (OpenAI schemas), `POST /execute` (a tool call → a tool result).
 */
export interface ToolServerOptions {
  tools: ExternalTool[];
  /** Bearer token required on /tools and /execute. */
  token?: string;
  /** Tool calls running at once; the rest wait their turn (default 16). */
  maxConcurrency?: number;
  /** Timeout of a call whose request names none, seconds (default 60; always clamped to 1..600). */
  defaultTimeoutS?: number;
  logger?: Logger;
}

export class ToolServer {
  readonly registry: ToolRegistry;
  private readonly byName = new Map<string, ExternalTool>();
  private readonly limit: LimitFunction;
  private readonly logger: Logger;
  private readonly server: Server;
  private readonly auth: BearerAuth;
  private readonly body = new JsonBodyReader();
  private readonly routes: RouteTable;
  private readonly defaultTimeoutS: number;
  private running = 0;
  private maxRunning = 0;
  private served = 0;
  private closing = false;

  constructor(private readonly options: ToolServerOptions) {
    this.registry = new ToolRegistry();
    for (const t of options.tools) {
      this.registry.register(t);
      this.byName.set(t.name, t);
    }
    const max = options.maxConcurrency ?? 16;
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`maxConcurrency must be a whole number >= 1, got ${max}`);
    this.limit = pLimit(max);
    this.defaultTimeoutS = options.defaultTimeoutS ?? 60;
    this.logger = options.logger ?? silentLogger();
    this.auth = new BearerAuth(options.token);
    this.routes = new RouteTable()
      .add("GET", "/health", (_req, res) => sendJson(res, 200, { status: "ok", tools: this.byName.size, running: this.running, queued: this.limit.pendingCount, served: this.served }), { public: true })
      .add("GET", "/tools", (_req, res) => sendJson(res, 200, { tools: this.registry.openAiTools() }))
      .add("POST", "/execute", async (req, res) => {
        const body = parseBody(ToolServerExecuteRequestSchema, dropNulls(await this.body.read(req)));
        sendJson(res, 200, await this.execute(body));
      });
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => sendError(res, err));
    });
    this.server.keepAliveTimeout = 65_000;
  }

  /** Starts listening; resolves with the base URL. */
  async listen(port = 0, host = "127.0.0.1"): Promise<string> {
    return listenOn(this.server, port, host);
  }

  get url(): string {
    return serverUrl(this.server);
  }

  /** Highest number of tool calls that ran at once since start (for tests and /health). */
  get peakConcurrency(): number {
    return this.maxRunning;
  }

  /** Stops accepting calls; waits up to `graceMs` for those running, then closes every connection. */
  async close(graceMs = 10_000): Promise<void> {
    this.closing = true;
    await closeGracefully(this.server, graceMs);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    closeConnectionsOnShutdown(this.server, res, () => this.closing);
    const { route, path } = this.routes.match(req);
    if (!route.public) this.auth.check(req);
    await route.handler(req, res, path);
  }

  private async execute(body: ReturnType<typeof ToolServerExecuteRequestSchema.parse>): Promise<ToolResult> {
    const uniq = body.tool.uniq_id ?? null;
    const checked = this.registry.check(body.tool.name, body.tool.arguments);
    if (!checked.ok) return { success: false, output: "", error: checked.error.message, metadata: {}, uniq_id: uniq };
    const tool = this.byName.get(checked.tool.name)!;
    const timeoutS = clampTimeoutS(body.timeout_s ?? this.defaultTimeoutS);
    return this.limit(async () => {
      this.running++;
      this.maxRunning = Math.max(this.maxRunning, this.running);
      const started = performance.now();
      const ac = new AbortController();
      let timer: NodeJS.Timeout | undefined;
      try {
        const timedOut = new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            ac.abort();
            reject(new HttpError(504, `tool '${tool.name}' did not finish within ${timeoutS} s`));
          }, timeoutS * 1000);
        });
        const out = await Promise.race([
          Promise.resolve(
            tool.execute(checked.args, {
              trajectoryId: body.trajectory_id,
              slotId: body.slot_id,
              containerAddr: body.container_addr,
              timeoutMs: timeoutS * 1000,
              signal: ac.signal,
              logger: this.logger.child({ tool: tool.name }),
            }),
          ),
          timedOut,
        ]);
        const result = toResult(out, uniq);
        // Arguments and outputs may carry secrets or user data: log only the shape of the call.
        this.logger.info({ tool: tool.name, trajectoryId: body.trajectory_id, success: result.success, ms: Math.round(performance.now() - started) }, "tool call");
        return result;
      } catch (err) {
        this.logger.warn({ tool: tool.name, trajectoryId: body.trajectory_id, err: (err as Error).message }, "tool call failed");
        const msg = err instanceof HttpError && err.status === 504 ? err.message : `tool '${tool.name}' failed: ${(err as Error)?.message ?? String(err)}`;
        return { success: false, output: "", error: msg, metadata: err instanceof HttpError && err.status === 504 ? { timeout: true } : {}, uniq_id: uniq };
      } finally {
        clearTimeout(timer);
        this.running--;
        this.served++;
      }
    });
  }
}

function toResult(out: ExternalToolOutput, uniq: string | null): ToolResult {
  if (typeof out === "string") return { success: true, output: out, error: "", metadata: {}, uniq_id: uniq };
  if (out === null || typeof out !== "object") return { success: true, output: out === undefined ? "" : String(out), error: "", metadata: {}, uniq_id: uniq };
  return {
    success: out.success ?? !out.error,
    output: out.output ?? "",
    error: out.error ?? "",
    metadata: out.metadata ?? {},
    uniq_id: uniq,
  };
}
