import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { HttpError, fieldName } from "../../http/errors.js";
import { requestTarget } from "../../http/target.js";
import { PORT_TUNNEL_PROTOCOL, PortTunnelQuerySchema } from "../../protocol/port-tunnel.js";
import type { Slot } from "../core/slot.js";
import type { PortTunnels } from "../tools/port-tunnels.js";
import { PortClosedError } from "../tools/port-tunnels.js";

/** What the route needs from the sandbox service. */
export interface PortRouteHost {
  readonly processes: { readonly ports: PortTunnels };
  readonly shuttingDown: boolean;
  slotById(id: string): Slot;
}

/**
 * A tunnel without a byte either way for this long is closed (E2B's own sandbox proxy closes
 * idle connections after 620 s; the E2B server has its own, usually shorter, bound).
 */
export const PORT_IDLE_TIMEOUT_MS = 620_000;

/**
 * `GET /ports/connect` (protocol/port-tunnel.ts), an HTTP upgrade: after the 101 the socket
 * carries the port's bytes both ways, with backpressure (nothing is buffered here beyond the
 * sockets' own buffers), each side's end passed on, and an idle timeout. Refusals are JSON
 * answers on the raw socket. The token was checked before this runs.
 */
export async function handlePortUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer, host: PortRouteHost, idleTimeoutMs = PORT_IDLE_TIMEOUT_MS): Promise<void> {
  let slot: Slot;
  let query: ReturnType<typeof PortTunnelQuerySchema.parse>;
  try {
    if (String(req.headers.upgrade ?? "").toLowerCase() !== PORT_TUNNEL_PROTOCOL) throw new HttpError(400, `a port tunnel is an upgrade to '${PORT_TUNNEL_PROTOCOL}' (Upgrade header)`, "upgrade");
    const parsed = PortTunnelQuerySchema.safeParse(Object.fromEntries(requestTarget(req.url).query));
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      const field = fieldName(issue.path);
      throw new HttpError(400, `invalid request: ${field}: ${issue.message}`, field);
    }
    query = parsed.data;
    if (host.shuttingDown) throw new HttpError(503, "sandbox server is shutting down: no tunnel opened");
    slot = host.slotById(query.slot_id);
    const stale = slot.staleFor(query.generation);
    if (stale) throw new HttpError(409, stale.replace("the call did not run", "no tunnel opened"));
  } catch (err) {
    refuse(socket, err);
    return;
  }
  let conn;
  try {
    conn = await host.processes.ports.open(slot, query.port, query.allow_network);
  } catch (err) {
    refuse(socket, err);
    return;
  }
  const inner = conn.socket;
  const end = (): void => {
    conn.child.kill("SIGKILL");
    inner.destroy();
    socket.destroy();
  };
  if (socket.destroyed) return end();
  socket.write(`HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: ${PORT_TUNNEL_PROTOCOL}\r\n\r\n`);
  if (head.length > 0) inner.write(head);
  // Bytes both ways with backpressure; an end (FIN) is passed on, the connection lives until both sides ended.
  socket.pipe(inner);
  inner.pipe(socket);
  socket.on("error", end);
  socket.on("close", end);
  inner.on("error", end);
  // The relay is gone (both sides ended, or it was killed): what is still buffered goes out, then the socket closes.
  inner.on("close", () => (socket as Duplex & { destroySoon?: () => void }).destroySoon?.() ?? socket.end());
  (socket as Duplex & { setTimeout?: (ms: number, cb: () => void) => void }).setTimeout?.(idleTimeoutMs, end);
}

function refuse(socket: Duplex, err: unknown): void {
  const status = err instanceof HttpError ? err.status : 500;
  const body = JSON.stringify({
    error: err instanceof Error ? err.message : String(err),
    ...(err instanceof HttpError && err.field ? { field: err.field } : {}),
    ...(err instanceof PortClosedError ? { port: err.port } : {}),
  });
  if (socket.destroyed) return;
  socket.end(`HTTP/1.1 ${status} ${REASONS[status] ?? "Error"}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}

const REASONS: Record<number, string> = { 400: "Bad Request", 404: "Not Found", 409: "Conflict", 429: "Too Many Requests", 500: "Internal Server Error", 502: "Bad Gateway", 503: "Service Unavailable" };
