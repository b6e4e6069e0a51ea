import { request } from "node:http";
import type { Socket } from "node:net";
import { PORT_TUNNEL_PATH, PORT_TUNNEL_PROTOCOL, PortTunnelErrorSchema } from "../protocol/port-tunnel.js";
import { PoolError } from "./errors.js";
import type { LeasedSlot } from "./types.js";

/**
 * The pool's client of port tunnels (`GET /ports/connect`, protocol/port-tunnel.ts): a
 * connection to a port inside a leased slot's network namespace, the one its process
 * sessions share, over the slot's sandbox server (on another host under Nomad). The E2B
 * server brings sandboxes' port traffic through it.
 */

/** The sandbox server refused the tunnel: `status` is its HTTP status (502: nothing listens on `port`). */
export class SlotPortError extends PoolError {
  override name = "SlotPortError";
  constructor(
    readonly status: number,
    readonly port: number,
    message: string,
  ) {
    super(message);
  }
}

export interface SlotPortOptions {
  /** Which namespace of the slot: its sessions' with internet, or loopback only (as they were started). */
  allowNetwork: boolean;
  /** How long the sandbox server may take to answer (default 30 s; its relay connects on loopback). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Largest refusal body read (a JSON error). */
const MAX_ERROR_BYTES = 64 * 1024;

/**
 * A socket carrying `port`'s bytes inside `slot`, both ways; its end (FIN) reaches the port's
 * server and the server's reaches it. Rejects with SlotPortError when the sandbox server
 * refuses (502 when nothing listens there).
 */
export function openSlotPort(slot: LeasedSlot, port: number, options: SlotPortOptions): Promise<Socket> {
  const c = slot.container;
  slot.touch();
  const url = new URL(PORT_TUNNEL_PATH, c.url);
  url.search = new URLSearchParams({ slot_id: slot.slotId, port: String(port), allow_network: String(options.allowNetwork) }).toString();
  const timeoutMs = options.timeoutMs ?? 30_000;
  return new Promise<Socket>((resolve, reject) => {
    const req = request(url, {
      method: "GET",
      agent: false,
      headers: { connection: "Upgrade", upgrade: PORT_TUNNEL_PROTOCOL, ...(c.token ? { authorization: `Bearer ${c.token}` } : {}) },
      ...(options.signal ? { signal: options.signal } : {}),
    });
    const timer = setTimeout(() => req.destroy(new SlotPortError(504, port, `the sandbox server did not open a connection to port ${port} of ${slot.slotId} within ${timeoutMs / 1000} s`)), timeoutMs);
    req.once("upgrade", (res, socket, head) => {
      clearTimeout(timer);
      if (String(res.headers.upgrade ?? "").toLowerCase() !== PORT_TUNNEL_PROTOCOL) {
        socket.destroy();
        reject(new SlotPortError(502, port, `the sandbox server upgraded to '${String(res.headers.upgrade)}', not a port tunnel`));
        return;
      }
      // Bytes the port's server sent right after the 101 arrived with it.
      if (head.length > 0) socket.unshift(head);
      socket.setNoDelay(true);
      resolve(socket);
    });
    req.once("response", (res) => {
      clearTimeout(timer);
      const chunks: Buffer[] = [];
      let size = 0;
      res.on("data", (d: Buffer) => {
        size += d.length;
        if (size <= MAX_ERROR_BYTES) chunks.push(d);
        else res.destroy();
      });
      const done = (): void => {
        const text = Buffer.concat(chunks).toString("utf8");
        let message = text || `HTTP ${res.statusCode}`;
        try {
          const body = PortTunnelErrorSchema.safeParse(JSON.parse(text));
          if (body.success) message = body.data.error;
        } catch {
          /* not JSON: keep the text */
        }
        reject(new SlotPortError(res.statusCode ?? 502, port, message));
      };
      res.once("end", done);
      res.once("close", done);
    });
    req.once("error", (err) => {
      clearTimeout(timer);
      reject(err instanceof SlotPortError ? err : new SlotPortError(502, port, `could not reach the sandbox server for port ${port} of ${slot.slotId}: ${err.message}`));
    });
    req.end();
  });
}
