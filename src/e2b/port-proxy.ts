import { createHash, timingSafeEqual } from "node:crypto";
import { request, type IncomingHttpHeaders, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import type { Logger } from "../observability/logger.js";
import { E2bApiError } from "./errors.js";
import { SandboxPortError } from "./sandbox-ports.js";
import type { E2bSandbox, SandboxRegistry } from "./sandboxes.js";

/**
 * HTTP and WebSocket traffic for a port inside a sandbox (`<port>-<id>.<domain>`, or the
 * `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers; sandbox-target.ts), brought to the server
 * a sandbox's command listens with there, through its slot's port tunnels
 * (sandbox-ports.ts). The rules are E2B's own sandbox proxy's
 * (github:e2b-dev/infra, packages/orchestrator/pkg/proxy/proxy.go and
 * packages/shared/pkg/proxy): ports are public unless the sandbox was created with
 * `network.allowPublicTraffic: false`, which needs its `trafficAccessToken` in the
 * `e2b-traffic-access-token` header (403 without it or with another); an unknown sandbox is a
 * 502 "The sandbox was not found", a port nobody listens on a 502 "The sandbox is running but
 * port is not open" naming the port; `network.maskRequestHost` replaces the Host header
 * (`${PORT}` = the port). Every answer of the proxy itself is JSON `{sandboxId, message, code}`.
 * Each connection is bounded (PortLimits): idle time, bytes each way, connections per sandbox.
 */

export const TRAFFIC_TOKEN_HEADER = "e2b-traffic-access-token";

/** Headers of one hop that are not passed on (RFC 9110 §7.6.1), besides those `Connection` names. */
const HOP_BY_HOP = new Set(["connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding", "upgrade"]);

/** What the proxy answers with itself: E2B's proxy's JSON errors. */
export class ProxyError extends E2bApiError {
  override name = "ProxyError";
  constructor(
    status: number,
    readonly sandboxId: string,
    message: string,
    readonly extra: Record<string, unknown> = {},
  ) {
    super(status, message);
  }

  body(): Record<string, unknown> {
    return { sandboxId: this.sandboxId, message: this.message, ...this.extra, code: this.status };
  }
}

export class PortProxy {
  constructor(
    private readonly registry: SandboxRegistry,
    private readonly logger: Logger,
  ) {}

  /** An HTTP request for `port` of the sandbox: forwarded, its answer streamed back. */
  async http(req: IncomingMessage, res: ServerResponse, sandboxId: string, port: number): Promise<void> {
    let upstream: Duplex;
    let sandbox: E2bSandbox;
    try {
      sandbox = await this.admit(req.headers, sandboxId);
      upstream = await this.connect(sandbox, port);
    } catch (err) {
      return this.refuseHttp(req, res, err, sandboxId);
    }
    const { maxTransferBytes, idleTimeoutMs } = sandbox.ports.limits;
    let done = false;
    const abort = (why: string, status = 504): void => {
      if (done) return;
      done = true;
      upstream.destroy();
      if (!res.headersSent) this.refuseHttp(req, res, new ProxyError(status, sandboxId, `port ${port} of the sandbox: ${why}`, { port }), sandboxId);
      else res.destroy();
    };
    idle(upstream, idleTimeoutMs, () => abort(`no byte either way for ${idleTimeoutMs / 1000} s`));
    const fwd = request({
      createConnection: () => upstream as never,
      method: req.method,
      path: req.url,
      headers: this.forwardHeaders(req.headers, req.rawHeaders, sandbox, port, req.socket.remoteAddress),
      setHost: false,
    });
    fwd.on("error", (err) => abort(`the connection failed (${err.message})`, 502));
    countBytes(req, maxTransferBytes, () => abort(`the request body is above ${maxTransferBytes} bytes (--max-port-transfer-mb)`, 413));
    req.pipe(fwd);
    // The client went away: the connection to the sandbox's server goes too.
    res.once("close", () => {
      if (!res.writableFinished) abort("the client went away");
      done = true;
      upstream.destroy();
    });
    fwd.once("response", (up) => {
      res.writeHead(up.statusCode ?? 502, up.statusMessage, withoutHopByHop(up.headers, up.rawHeaders));
      countBytes(up, maxTransferBytes, () => abort(`the answer is above ${maxTransferBytes} bytes (--max-port-transfer-mb)`));
      up.pipe(res);
      up.once("error", () => abort("the answer was cut off"));
    });
  }

  /** A WebSocket (any upgrade) for `port`: the request goes through, then bytes both ways. */
  async upgrade(req: IncomingMessage, socket: Duplex, head: Buffer, sandboxId: string, port: number): Promise<void> {
    let upstream: Duplex;
    let sandbox: E2bSandbox;
    try {
      sandbox = await this.admit(req.headers, sandboxId);
      upstream = await this.connect(sandbox, port);
    } catch (err) {
      return this.refuseRaw(socket, err, sandboxId);
    }
    const { maxTransferBytes, idleTimeoutMs } = sandbox.ports.limits;
    const end = (): void => {
      upstream.destroy();
      socket.destroy();
    };
    if (socket.destroyed) return end();
    const headers = this.forwardHeaders(req.headers, req.rawHeaders, sandbox, port, req.socket.remoteAddress, true);
    const lines = [`${req.method} ${req.url} HTTP/1.1`];
    for (const [k, v] of Object.entries(headers)) for (const one of Array.isArray(v) ? v : [v]) lines.push(`${k}: ${String(one)}`);
    upstream.write(lines.join("\r\n") + "\r\n\r\n");
    if (head.length > 0) upstream.write(head);
    countBytes(socket, maxTransferBytes, end);
    countBytes(upstream, maxTransferBytes, end);
    socket.pipe(upstream);
    upstream.pipe(socket);
    socket.on("error", end);
    socket.on("close", end);
    upstream.on("close", () => (socket as Duplex & { destroySoon?: () => void }).destroySoon?.() ?? socket.end());
    idle(socket, idleTimeoutMs, end);
  }

  /** The live sandbox the request may reach (auto-resume, traffic token), or a ProxyError. */
  private async admit(headers: IncomingHttpHeaders, sandboxId: string): Promise<E2bSandbox> {
    const notFound = () => new ProxyError(502, sandboxId, "The sandbox was not found");
    let s = this.registry.get(sandboxId);
    if (!s) throw notFound();
    const token = typeof headers[TRAFFIC_TOKEN_HEADER] === "string" ? (headers[TRAFFIC_TOKEN_HEADER] as string) : undefined;
    if (s.trafficAccessToken !== undefined) {
      if (!token) throw new ProxyError(403, sandboxId, `Sandbox is secured with traffic access token. Token header '${TRAFFIC_TOKEN_HEADER}' is missing`);
      if (!sameToken(token, s.trafficAccessToken)) throw new ProxyError(403, sandboxId, `Sandbox is secured with traffic access token. Provided token in header '${TRAFFIC_TOKEN_HEADER}' is invalid`);
    }
    // Traffic to a paused sandbox created with auto-resume wakes it (E2B's autoResume), as its API's does.
    if (s.state === "paused") {
      await this.registry.wakeForTraffic(s);
      s = this.registry.get(sandboxId);
      if (!s) throw notFound();
      if (s.state === "paused") throw new ProxyError(502, sandboxId, "The sandbox is paused: Sandbox.connect() resumes it");
    }
    return s;
  }

  private async connect(s: E2bSandbox, port: number): Promise<Duplex> {
    try {
      return await s.ports.connect(port);
    } catch (err) {
      if (err instanceof SandboxPortError && err.status === 502) {
        this.logger.debug({ sandbox: s.id, port, error: err.message }, "sandbox port is not open");
        throw new ProxyError(502, s.id, "The sandbox is running but port is not open", { port, reason: err.message });
      }
      if (err instanceof E2bApiError) throw new ProxyError(err.status, s.id, err.message, { port });
      throw err;
    }
  }

  /**
   * The request's headers for the sandbox's server: hop-by-hop ones dropped (kept for an
   * upgrade, which needs them), the Host masked when the sandbox asked (`${PORT}` = the port),
   * the client's address added to X-Forwarded-For, as E2B's proxy (Go's reverse proxy) does.
   */
  private forwardHeaders(headers: IncomingHttpHeaders, raw: string[], s: E2bSandbox, port: number, client: string | undefined, upgrade = false): OutgoingHttpHeaders {
    const out = upgrade ? rawHeaders(raw) : withoutHopByHop(headers, raw);
    if (upgrade) {
      out["Connection"] = "Upgrade";
      if (headers.upgrade) out["Upgrade"] = headers.upgrade;
    }
    if (s.maskRequestHost) out["Host"] = s.maskRequestHost.replaceAll("${PORT}", String(port));
    if (client) out["X-Forwarded-For"] = headers["x-forwarded-for"] ? `${String(headers["x-forwarded-for"])}, ${client}` : client;
    return out;
  }

  private refuseHttp(req: IncomingMessage, res: ServerResponse, err: unknown, sandboxId: string): void {
    const e = asProxyError(err, sandboxId);
    if (e.status >= 500 && e.status !== 502 && e.status !== 504) this.logger.error({ err, sandbox: sandboxId }, "port traffic failed");
    if (res.headersSent) return void res.destroy();
    const body = JSON.stringify(e.body());
    res.writeHead(e.status, { "content-type": "application/json; charset=utf-8", "content-length": Buffer.byteLength(body) });
    res.end(body);
    if (!req.complete) req.resume();
  }

  private refuseRaw(socket: Duplex, err: unknown, sandboxId: string): void {
    const e = asProxyError(err, sandboxId);
    if (socket.destroyed) return;
    const body = JSON.stringify(e.body());
    socket.end(`HTTP/1.1 ${e.status} ${e.status === 403 ? "Forbidden" : e.status === 429 ? "Too Many Requests" : e.status === 400 ? "Bad Request" : "Bad Gateway"}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
  }
}

function asProxyError(err: unknown, sandboxId: string): ProxyError {
  if (err instanceof ProxyError) return err;
  if (err instanceof E2bApiError) return new ProxyError(err.status, sandboxId, err.message);
  return new ProxyError(502, sandboxId, `Unexpected error when routing request: ${err instanceof Error ? err.message : String(err)}`);
}

/** Calls `fire` once `socket` (a net or TLS socket) saw no byte either way for `ms`. */
function idle(socket: Duplex, ms: number, fire: () => void): void {
  (socket as Duplex & { setTimeout?: (ms: number, cb: () => void) => void }).setTimeout?.(ms, fire);
}

/** Destroys the flow (via `over`) once more than `max` bytes passed through `stream`. */
function countBytes(stream: NodeJS.ReadableStream, max: number, over: () => void): void {
  let n = 0;
  stream.on("data", (d: Buffer) => {
    n += d.length;
    if (n > max) over();
  });
}

/**
 * Headers by name, each name in Go's canonical form (`Host`, `X-Forwarded-For`), as E2B's
 * proxy (Go's net/http) writes them to the sandbox's server; duplicates kept as arrays.
 */
function rawHeaders(raw: string[]): OutgoingHttpHeaders {
  const out: Record<string, string | string[]> = {};
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const k = canonical(raw[i]!);
    const v = raw[i + 1]!;
    const prev = out[k];
    out[k] = prev === undefined ? v : Array.isArray(prev) ? [...prev, v] : [prev, v];
  }
  return out;
}

/** Go's CanonicalMIMEHeaderKey: each dash-separated word capitalized (`content-type` → `Content-Type`). */
export function canonical(name: string): string {
  return name.toLowerCase().replace(/(^|-)([a-z])/g, (_m, dash: string, c: string) => dash + c.toUpperCase());
}

function withoutHopByHop(headers: IncomingHttpHeaders, raw: string[]): OutgoingHttpHeaders {
  const named = new Set(
    String(headers.connection ?? "")
      .split(",")
      .map((t) => t.trim().toLowerCase())
      .filter(Boolean),
  );
  const out = rawHeaders(raw);
  for (const k of Object.keys(out)) if (HOP_BY_HOP.has(k.toLowerCase()) || named.has(k.toLowerCase())) delete out[k];
  return out;
}

function sameToken(a: string, b: string): boolean {
  return timingSafeEqual(createHash("sha256").update(a).digest(), createHash("sha256").update(b).digest());
}
