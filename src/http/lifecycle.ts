import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { z } from "zod";

/** Small JSON-over-HTTP helpers shared by the executor service and the ToolServer. */

export class HttpError extends Error {
  override name = "HttpError";
  constructor(
    readonly status: number,
    message: string,
    readonly field?: string,
  ) {
    super(message);
  }
}

/**
 * The request's path, without the query. Taken from the raw target rather than `new URL()`,
 * which throws on targets like "//" (read as a host-relative URL): those just match no route.
 */
export function requestPath(req: IncomingMessage): string {
  const target = req.url ?? "/";
  const q = target.indexOf("?");
  return q >= 0 ? target.slice(0, q) : target;
}

export const MAX_BODY_BYTES = 16 * 1024 * 1024;

export async function readJson(req: IncomingMessage, maxBytes = MAX_BODY_BYTES): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > maxBytes) throw new HttpError(413, `request body is larger than ${maxBytes} bytes`);
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  if (!text.trim()) throw new HttpError(400, "invalid request: the body must be JSON, got nothing");
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, `invalid request: the body is not valid JSON (${(err as Error).message})`);
  }
}

/** Parses a body with a zod schema; a mismatch is a 400 naming the field. */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown): z.output<S> {
  const r = schema.safeParse(body);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    const field = issue.path.join(".");
    throw new HttpError(400, `invalid request: ${field ? `${field}: ` : ""}${issue.message}`, field || undefined);
  }
  return r.data;
}

export function sendJson(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

export function sendError(res: ServerResponse, err: unknown): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  if (err instanceof HttpError) {
    sendJson(res, err.status, err.field ? { error: err.message, field: err.field } : { error: err.message });
    return;
  }
  sendJson(res, 500, { error: `internal error: ${(err as Error)?.message ?? String(err)}` });
}

/**
 * Bearer-token check, as the original services do it: no header → 401, a wrong token → 403.
 * Compared in constant time so the token cannot be guessed byte by byte.
 */
export function checkBearer(req: IncomingMessage, token: string | undefined): void {
  if (!token) return;
  const header = req.headers["authorization"];
  if (!header) throw new HttpError(401, "missing Authorization header: send 'Authorization: Bearer <token>'");
  const m = /^Bearer\s+(.+)$/i.exec(header);
  if (!m) throw new HttpError(401, "invalid Authorization header: expected 'Bearer <token>'");
  const given = Buffer.from(m[1]!.trim());
  const want = Buffer.from(token);
  if (given.length !== want.length || !timingSafeEqual(given, want)) throw new HttpError(403, "invalid token");
}

/** Starts `server` listening; resolves with its base URL (port 0 picks a free port). */
export async function listenOn(server: Server, port: number, host: string): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return serverUrl(server);
}

/** Base URL of a listening server, IPv6 hosts bracketed. */
export function serverUrl(server: Server): string {
  const a = server.address() as AddressInfo;
  const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
  return `http://${host}:${a.port}`;
}

/**
 * Stops accepting requests and resolves once those in progress are answered. Idle
 * keep-alive connections are closed at once, all of them after `graceMs`.
 */
export async function closeGracefully(server: Server, graceMs: number): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  const timer = setTimeout(() => server.closeAllConnections(), graceMs);
  await closed;
  clearTimeout(timer);
}

/**
 * During shutdown, answer with `connection: close` and drop the connection once the answer
 * is sent: a keep-alive connection that just answered its last request would otherwise keep
 * the process alive. `isClosing` is read when the answer finishes, so requests already in
 * progress when shutdown starts are covered too.
 */
export function closeConnectionsOnShutdown(server: Server, res: ServerResponse, isClosing: () => boolean): void {
  res.once("finish", () => {
    if (isClosing()) setImmediate(() => server.closeIdleConnections());
  });
  if (isClosing()) res.setHeader("connection", "close");
}
