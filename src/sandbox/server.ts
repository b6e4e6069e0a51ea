import { createHash, timingSafeEqual } from "node:crypto";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { z } from "zod";
import { PROMETHEUS_CONTENT_TYPE } from "../observability/metrics.js";
import {
  ArtifactArchiveRequestSchema,
  ArtifactListRequestSchema,
  ArtifactReadRequestSchema,
  ResetRequestSchema,
  TemplateBuildRequestSchema,
  type ExecuteResponse,
} from "../protocol/sandbox.js";
import { HttpError, fieldName } from "./errors.js";
import { archiveArtifacts, listArtifacts, readArtifact } from "./artifacts.js";
import { SandboxWebSockets } from "./ws.js";
import { SandboxService, type ParsedCall, type SandboxServiceOptions } from "./service.js";

export interface SandboxServerOptions extends SandboxServiceOptions {
  host: string;
  port: number;
  /** Bearer token; when set every route but /health requires it. */
  token?: string | undefined;
  /** Largest request body accepted, bytes. */
  maxBodyBytes?: number;
  /** Open connections at most (default 4096). */
  maxConnections?: number;
  /** Start every slot's namespace in the background once listening (default true). */
  prewarm?: boolean;
}

/** Constant-time token check: both sides hashed to equal length first. */
function tokenMatches(given: string, expected: Buffer): boolean {
  const g = createHash("sha256").update(given).digest();
  return timingSafeEqual(g, expected);
}

export class SandboxServer {
  readonly service: SandboxService;
  private readonly server: Server;
  private readonly tokenHash: Buffer | null;
  private readonly maxBody: number;
  private readonly ws: SandboxWebSockets;
  private readonly bodyBudget: ByteBudget;
  url = "";

  constructor(readonly options: SandboxServerOptions) {
    this.service = new SandboxService(options);
    this.tokenHash = options.token ? createHash("sha256").update(options.token).digest() : null;
    this.maxBody = options.maxBodyBytes ?? 64 * 1024 * 1024;
    this.bodyBudget = new ByteBudget(this.maxBody);
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        try {
          this.sendError(res, req, err);
        } catch (inner) {
          // Never let one request take the server down.
          this.service.logger.error({ err: inner }, "could not answer a failed request");
          res.destroy();
        }
      });
    });
    this.ws = new SandboxWebSockets(this.service);
    this.server.on("upgrade", (req, socket, head) => {
      const { path } = parseTarget(req.url);
      try {
        if (path !== "/ws") throw new HttpError(404, `no WebSocket route ${path}`);
        this.authorize(req);
      } catch (err) {
        const status = err instanceof HttpError ? err.status : 500;
        const body = JSON.stringify({ error: err instanceof Error ? err.message : String(err) });
        socket.end(`HTTP/1.1 ${status} ${status === 401 ? "Unauthorized" : status === 403 ? "Forbidden" : "Not Found"}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
        return;
      }
      this.ws.handleUpgrade(req, socket, head);
    });
    // Idle and slow connections cost a file descriptor each: a client must send its
    // headers within 15 s, and at most `maxConnections` are open at once (the rest are
    // closed at accept). Keep-alive clients (the pool) stay connected between calls.
    this.server.keepAliveTimeout = 65_000;
    this.server.headersTimeout = 15_000;
    this.server.maxConnections = options.maxConnections ?? 4096;
  }

  async listen(): Promise<string> {
    await new Promise<void>((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(this.options.port, this.options.host, () => {
        this.server.off("error", reject);
        resolve();
      });
    });
    const addr = this.server.address() as AddressInfo;
    const host = addr.family === "IPv6" ? `[${addr.address}]` : addr.address;
    this.url = `http://${host}:${addr.port}`;
    // Pre-warm every slot's namespace in the background (bounded: a few at a time).
    if (this.options.prewarm !== false) void this.service.prewarm();
    return this.url;
  }

  get httpServer(): Server {
    return this.server;
  }

  /** Stops accepting, kills every slot process, closes idle connections. */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.ws.close();
    this.server.closeIdleConnections();
    await this.service.close();
    // In-flight calls have now been answered (killed): their keep-alive sockets are idle.
    this.server.closeIdleConnections();
    const timer = setTimeout(() => this.server.closeAllConnections(), 1_000);
    await closed;
    clearTimeout(timer);
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { path, query } = parseTarget(req.url);
    const method = req.method ?? "GET";
    if (path === "/health" && method === "GET") {
      const svc = this.service;
      return this.send(res, 200, {
        status: "ok",
        slots: svc.slots.length,
        bwrap_available: svc.bwrap.available,
        ...(svc.bwrap.available ? {} : { sandbox_unavailable_reason: svc.bwrap.reason }),
        fast_path: svc.spawnerPath !== null,
        cgroups: svc.cgroups.mode,
        slots_busy: svc.slots.filter((s) => s.state !== "idle").length,
      });
    }
    this.authorize(req);
    const route = `${method} ${path}`;
    switch (route) {
      case "GET /slots":
        return this.send(res, 200, {
          slots: this.service.slots.map((s) => ({ slot_id: s.id, state: s.state, workspace: "/workspace", queued: s.queued })),
        });
      case "GET /metrics":
        res.writeHead(200, { "content-type": PROMETHEUS_CONTENT_TYPE });
        res.end(this.service.metrics.render());
        return;
      case "POST /execute": {
        const body = await this.readJson(req);
        const call = this.service.parseCall(body);
        return this.send(res, 200, await this.service.execute(call));
      }
      case "POST /batch": {
        const body = await this.readJson(req);
        if (!Array.isArray(body)) throw new HttpError(400, "invalid request: /batch expects a JSON list of execute bodies", "body");
        const calls = body.map((b, i) => this.service.parseCall(b, String(i)));
        const stream = ["1", "true", "yes"].includes(query.get("stream") ?? "");
        return stream ? this.streamBatch(res, calls) : this.send(res, 200, await Promise.all(calls.map((c) => this.service.execute(c))));
      }
      case "POST /reset": {
        const body = parse(ResetRequestSchema, await this.readJson(req));
        const slot = this.service.slotById(body.slot_id);
        return this.send(res, 200, await this.service.reset(slot, body.template));
      }
      case "GET /templates":
        return this.send(res, 200, this.service.templates.list());
      case "POST /templates":
        return this.send(res, 200, await this.service.templates.build(parse(TemplateBuildRequestSchema, await this.readJson(req))));
      case "POST /artifacts/read":
      case "POST /artifacts/list":
      case "POST /artifacts/archive":
        return this.artifacts(req, res, path.slice("/artifacts/".length) as "read" | "list" | "archive");
    }
    if (["/slots", "/metrics", "/execute", "/batch", "/reset", "/templates", "/artifacts/read", "/artifacts/list", "/artifacts/archive"].includes(path)) {
      throw new HttpError(405, `method ${method} not allowed on ${path}`);
    }
    throw new HttpError(404, `no route ${method} ${path}`);
  }

  private streamBatch(res: ServerResponse, calls: ParsedCall[]): Promise<void> {
    res.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-cache" });
    res.flushHeaders();
    return Promise.all(
      calls.map((c, index) =>
        this.service.execute(c).then((r: ExecuteResponse) => {
          res.write(JSON.stringify({ ...r, index }) + "\n");
        }),
      ),
    ).then(() => {
      res.end();
    });
  }

  private async artifacts(req: IncomingMessage, res: ServerResponse, kind: "read" | "list" | "archive"): Promise<void> {
    const body = await this.readJson(req);
    const schema = kind === "read" ? ArtifactReadRequestSchema : kind === "list" ? ArtifactListRequestSchema : ArtifactArchiveRequestSchema;
    const parsed = parse(schema as z.ZodType<{ slot_id: string } & Record<string, unknown>>, body);
    const slot = this.service.slotById(parsed.slot_id);
    const { slot_id: _omit, ...rest } = parsed;
    // Artifact reads run in the slot's queue so they see the files of every earlier call.
    const answer = await slot.enqueue<unknown>(() =>
      kind === "read"
        ? readArtifact(slot.workspaceDir, rest as Parameters<typeof readArtifact>[1])
        : kind === "list"
          ? listArtifacts(slot.workspaceDir, rest as Parameters<typeof listArtifacts>[1])
          : archiveArtifacts(slot.workspaceDir, rest as Parameters<typeof archiveArtifacts>[1]),
    );
    return this.send(res, 200, answer);
  }

  private authorize(req: IncomingMessage): void {
    if (!this.tokenHash) return;
    const header = req.headers.authorization;
    let given: string | undefined;
    if (header) given = /^Bearer\s+(.+)$/i.exec(header)?.[1]?.trim() ?? "";
    else if (req.headers.upgrade) {
      // Browsers cannot set headers on a WebSocket: accept ?token= there only.
      given = parseTarget(req.url).query.get("token") ?? undefined;
    }
    if (given === undefined) throw new HttpError(401, "missing Authorization: Bearer <token> header");
    if (!tokenMatches(given, this.tokenHash)) throw new HttpError(403, "invalid bearer token");
  }

  /**
   * Reads and parses a JSON body. Bodies are held whole while parsed (≈ 3-4 x their size
   * at the peak), so the bytes of bodies being read at once are capped by a budget
   * (`maxBodyBytes`, 64 MB by default): a request whose Content-Length does not fit waits
   * its turn (TCP backpressure on its sender) instead of the server's memory growing with
   * the number of concurrent large requests.
   */
  private async readJson(req: IncomingMessage): Promise<unknown> {
    const declared = Number(req.headers["content-length"] ?? NaN);
    if (Number.isFinite(declared) && declared > this.maxBody) {
      req.resume();
      throw new HttpError(413, `request body larger than ${this.maxBody} bytes`, "body");
    }
    const reserve = Number.isFinite(declared) ? declared : 0;
    await this.bodyBudget.acquire(reserve);
    try {
      return await this.readJsonNow(req);
    } finally {
      // A large body leaves large garbage (bytes, text); collect it before the next one
      // is let in, or peaks add up while V8 waits to collect.
      if (reserve >= LARGE_BODY) collectGarbage();
      this.bodyBudget.release(reserve);
    }
  }

  private readJsonNow(req: IncomingMessage): Promise<unknown> {
    return new Promise((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      let failed = false;
      req.on("data", (c: Buffer) => {
        if (failed) return;
        size += c.length;
        if (size > this.maxBody) {
          failed = true;
          reject(new HttpError(413, `request body larger than ${this.maxBody} bytes`, "body"));
          req.resume();
          return;
        }
        chunks.push(c);
      });
      req.on("end", () => {
        if (failed) return;
        const buf = Buffer.concat(chunks);
        chunks.length = 0;
        const text = buf.toString("utf8");
        if (!text.trim()) return reject(new HttpError(400, "invalid request: empty body, expected JSON", "body"));
        try {
          resolve(JSON.parse(text));
        } catch (err) {
          reject(new HttpError(400, `invalid JSON body: ${err instanceof Error ? err.message : String(err)}`, "body"));
        }
      });
      req.on("error", reject);
    });
  }

  private send(res: ServerResponse, status: number, body: unknown): void {
    const text = JSON.stringify(body);
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
    res.end(text);
  }

  private sendError(res: ServerResponse, req: IncomingMessage, err: unknown): void {
    const status = err instanceof HttpError ? err.status : 500;
    const body: { error: string; field?: string } = { error: err instanceof Error ? err.message : String(err) };
    if (err instanceof HttpError && err.field) body.field = err.field;
    const route = parseTarget(req.url).path;
    this.service.metrics.errors.inc({ route, status });
    if (status >= 500) this.service.logger.error({ err, route }, "request failed");
    else this.service.logger.info({ route, status, error: body.error }, "request refused");
    if (res.headersSent) {
      res.end();
      return;
    }
    this.send(res, status, body);
  }
}

/**
 * Path and query of a request target, without URL parsing surprises: `new URL("//x", base)`
 * reads `//x` as a host (or throws), which must never crash the server.
 */
export function parseTarget(target: string | undefined): { path: string; query: URLSearchParams } {
  const t = target ?? "/";
  const q = t.indexOf("?");
  const path = q >= 0 ? t.slice(0, q) : t;
  return { path: path || "/", query: new URLSearchParams(q >= 0 ? t.slice(q + 1) : "") };
}

function parse<T>(schema: z.ZodType<T>, body: unknown): T {
  const r = schema.safeParse(body);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    throw new HttpError(400, `invalid request: ${issue.message}`, fieldName(issue.path));
  }
  return r.data;
}


const LARGE_BODY = 8 * 1024 * 1024;

let gcFn: (() => void) | null | undefined;
/** A full GC, when V8 lets us have one (`--expose-gc` enabled at run time). */
function collectGarbage(): void {
  if (gcFn === undefined) {
    try {
      setFlagsFromString("--expose-gc");
      gcFn = runInNewContext("gc") as () => void;
    } catch {
      gcFn = null;
    }
  }
  gcFn?.();
}

/** A FIFO byte budget: `acquire(n)` waits until n bytes fit (a lone request always fits). */
export class ByteBudget {
  private used = 0;
  private readonly waiters: Array<{ n: number; go: () => void }> = [];

  constructor(private readonly capacity: number) {}

  acquire(n: number): Promise<void> {
    if (this.waiters.length === 0 && (this.used === 0 || this.used + n <= this.capacity)) {
      this.used += n;
      return Promise.resolve();
    }
    return new Promise((go) => this.waiters.push({ n, go }));
  }

  release(n: number): void {
    this.used -= n;
    while (this.waiters.length > 0) {
      const next = this.waiters[0]!;
      if (this.used !== 0 && this.used + next.n > this.capacity) break;
      this.waiters.shift();
      this.used += next.n;
      next.go();
    }
  }
}
