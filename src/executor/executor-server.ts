import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Logger } from "pino";
import { silentLogger } from "../observability/logger.js";
import { PROMETHEUS_CONTENT_TYPE, type MetricsRegistry } from "../observability/metrics.js";
import {
  ExecutorArtifactArchiveRequestSchema,
  ExecutorArtifactListRequestSchema,
  ExecutorArtifactReadRequestSchema,
  ExecutorExecuteRequestSchema,
  ExecutorPrepareWorkspaceRequestSchema,
  ExecutorForkRequestSchema,
  type ExecutorForkResponse,
  ExecutorReleaseRequestSchema,
} from "../protocol/executor.js";
import type { SlotPoolLike } from "../pool/types.js";
import { BearerAuth } from "../http/auth.js";
import { JsonBodyReader, parseBody } from "../http/body.js";
import { HttpError } from "../http/errors.js";
import { closeConnectionsOnShutdown, closeGracefully, listenOn, serverUrl } from "../http/lifecycle.js";
import { sendError, sendJson } from "../http/respond.js";
import { RouteTable } from "../http/routes.js";
import { ImageUnavailableError, isSlotLostError } from "../pool/errors.js";
import type { ToolExecutorLike } from "./types.js";
import { dropNulls } from "./wire-compat.js";
import { slotLostArtifactArchive, slotLostArtifactList, slotLostArtifactRead, slotLostToolResult } from "./wire-slot-loss.js";

/**
 * The executor over HTTP, so envs in any language (the original's Python envs included) can
 * run tool calls in slotpool slots. Routes and bodies are the original's:
 *
 *   POST /execute {trajectory_id, tool: {name, arguments, uniq_id}, timeout_s?} → tool result
 *     (a lost slot, a SlotLostError in-process, is answered here and only here as a failed
 *     result with `metadata.slot_lost: true`; prepare, fork and artifacts carry `slot_lost`)
 *   POST /release {trajectory_id, reset_workspace} → {"status":"ok"}
 *   POST /artifacts/read | /artifacts/list | /artifacts/archive (keyed by trajectory_id)
 *   GET  /status (queue_size, total_requests, total_errors, pool) · GET /health · GET /metrics
 *
 * Every route but /health requires the bearer token when one is set (no header → 401,
 * a wrong token → 403, as the original).
 */
export interface ExecutorServerOptions {
  executor: ToolExecutorLike;
  /** For /status: the pool's counts. */
  pool?: SlotPoolLike;
  token?: string;
  logger?: Logger;
  /** Rendered at /metrics (the executor's and the pool's series). */
  metrics?: MetricsRegistry;
}

export class ExecutorServer {
  private readonly server: Server;
  private readonly logger: Logger;
  private readonly auth: BearerAuth;
  private readonly body = new JsonBodyReader();
  private readonly routes: RouteTable;
  private closing = false;

  constructor(private readonly options: ExecutorServerOptions) {
    this.logger = options.logger ?? silentLogger();
    this.auth = new BearerAuth(options.token);
    this.routes = new RouteTable()
      .add("GET", "/health", (_req, res) => sendJson(res, 200, { status: "ok" }), { public: true })
      .add("GET", "/", (_req, res) => sendJson(res, 200, { message: "slotpool tool executor" }), { public: true })
      .add("POST", "/execute", (req, res) => this.execute(req, res))
      .add("POST", "/release", (req, res) => this.release(req, res))
      .add("POST", "/prepare_workspace", (req, res) => this.prepareWorkspace(req, res))
      .add("POST", "/fork", (req, res) => this.fork(req, res))
      .add("GET", "/status", (req, res) => this.status(req, res))
      .add("GET", "/metrics", (req, res) => this.metrics(req, res))
      .add("POST", "/artifacts/read", (req, res) => this.artifactRead(req, res))
      .add("POST", "/artifacts/list", (req, res) => this.artifactList(req, res))
      .add("POST", "/artifacts/archive", (req, res) => this.artifactArchive(req, res));
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        if (!(err instanceof HttpError)) this.logger.error({ err }, "request failed");
        sendError(res, err);
      });
    });
    this.server.keepAliveTimeout = 65_000;
    // Tool calls may run up to 600 s; Node's default request timeout (300 s) would cut them.
    this.server.requestTimeout = 0;
  }

  async listen(port = 0, host = "127.0.0.1"): Promise<string> {
    return listenOn(this.server, port, host);
  }

  get url(): string {
    return serverUrl(this.server);
  }

  /**
   * Stops accepting requests and resolves once those in progress are answered (close the
   * executor meanwhile: releasing the slots ends calls still running). Keep-alive
   * connections are closed as they fall idle, all of them after `graceMs`.
   */
  async close(graceMs = 10_000): Promise<void> {
    this.closing = true;
    await closeGracefully(this.server, graceMs);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    closeConnectionsOnShutdown(this.server, res, () => this.closing);
    const { route, path } = this.routes.match(req);
    if (!route.public) {
      this.auth.check(req);
      if (this.closing) throw new HttpError(503, "the executor is shutting down");
    }
    await route.handler(req, res, path);
  }

  private async execute(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = parseBody(ExecutorExecuteRequestSchema, dropNulls(await this.body.read(req)));
    // A client that hangs up no longer wants the answer: cancel the call if it has not run yet.
    const ac = new AbortController();
    const onClose = () => {
      if (!res.writableFinished) ac.abort();
    };
    res.once("close", onClose);
    let result;
    try {
      result = await this.options.executor.execute(body.trajectory_id, body.tool, {
        timeoutMs: body.timeout_s !== undefined ? body.timeout_s * 1000 : undefined,
        signal: ac.signal,
      });
    } catch (err) {
      if (!isSlotLostError(err)) throw err;
      result = slotLostToolResult(err, body.tool.uniq_id);
    } finally {
      res.off("close", onClose);
    }
    sendJson(res, 200, result);
  }

  private async release(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = parseBody(ExecutorReleaseRequestSchema, dropNulls(await this.body.read(req)));
    await this.options.executor.release(body.trajectory_id, { reset: body.reset_workspace });
    sendJson(res, 200, { status: "ok" });
  }

  private async prepareWorkspace(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { trajectory_id, template } = parseBody(ExecutorPrepareWorkspaceRequestSchema, dropNulls(await this.body.read(req)));
    const executor = this.options.executor;
    if (!executor.prepareWorkspace) throw new HttpError(501, "this executor cannot prepare workspace templates");
    try {
      const { timeout_s, ...spec } = template;
      await executor.prepareWorkspace(trajectory_id, { ...spec, ...(timeout_s !== undefined ? { timeoutS: timeout_s } : {}) });
      sendJson(res, 200, { success: true, error: "" });
    } catch (err) {
      const lost = isSlotLostError(err);
      const image = err instanceof ImageUnavailableError ? { image_unavailable: err.reason } : {};
      sendJson(res, 200, { success: false, error: err instanceof Error ? err.message : String(err), ...(lost ? { slot_lost: true } : {}), ...image });
    }
  }

  private async fork(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { trajectory_id, into, timeout_s } = parseBody(ExecutorForkRequestSchema, dropNulls(await this.body.read(req)));
    const executor = this.options.executor;
    if (!executor.fork) throw new HttpError(501, "this executor cannot fork slots");
    try {
      await executor.fork(trajectory_id, into, timeout_s !== undefined ? { timeoutMs: timeout_s * 1000 } : {});
      sendJson(res, 200, { success: true, error: "", into } satisfies ExecutorForkResponse);
    } catch (err) {
      const lost = isSlotLostError(err);
      sendJson(res, 200, { success: false, error: err instanceof Error ? err.message : String(err), into: [], ...(lost ? { slot_lost: true } : {}) } satisfies ExecutorForkResponse);
    }
  }

  private async status(_req: IncomingMessage, res: ServerResponse): Promise<void> {
    const s = this.options.executor.stats();
    sendJson(res, 200, {
      // The original's keys first, then ours.
      queue_size: s.queued,
      total_requests: s.totals.calls,
      total_errors: s.totals.errors,
      pool: this.options.pool?.stats() ?? null,
      in_flight: s.inFlight,
      trajectories: s.trajectories,
      totals: s.totals,
      latency_ms: s.latencyMs,
    });
  }

  private async metrics(_req: IncomingMessage, res: ServerResponse): Promise<void> {
    const text = this.options.metrics?.render() ?? "";
    res.writeHead(200, { "content-type": PROMETHEUS_CONTENT_TYPE, "content-length": Buffer.byteLength(text) });
    res.end(text);
  }

  private async artifactRead(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { trajectory_id, ...rest } = parseBody(ExecutorArtifactReadRequestSchema, dropNulls(await this.body.read(req)));
    sendJson(res, 200, await this.options.executor.readArtifact(trajectory_id, rest).catch((err: unknown) => {
      if (!isSlotLostError(err)) throw err;
      return slotLostArtifactRead(err, rest);
    }));
  }

  private async artifactList(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { trajectory_id, ...rest } = parseBody(ExecutorArtifactListRequestSchema, dropNulls(await this.body.read(req)));
    sendJson(res, 200, await this.options.executor.listArtifacts(trajectory_id, rest).catch((err: unknown) => {
      if (!isSlotLostError(err)) throw err;
      return slotLostArtifactList(err, rest);
    }));
  }

  private async artifactArchive(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { trajectory_id, format: _format, ...rest } = parseBody(ExecutorArtifactArchiveRequestSchema, dropNulls(await this.body.read(req)));
    sendJson(res, 200, await this.options.executor.archiveArtifacts(trajectory_id, rest).catch((err: unknown) => {
      if (!isSlotLostError(err)) throw err;
      return slotLostArtifactArchive(err, rest);
    }));
  }
}
