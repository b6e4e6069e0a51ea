import type { Socket } from "node:net";
import { connect as tlsConnect } from "node:tls";
import type { Duplex } from "node:stream";
import { openSlotPort, SlotPortError } from "../pool/slot-port.js";
import type { LeasedSlot } from "../pool/types.js";
import { E2bApiError } from "./errors.js";

/** Per-sandbox bounds on port traffic (see docs/e2b.md, "Ports"). */
export interface PortLimits {
  /** A port connection with no byte either way for this long is closed (E2B's proxy: 620 s). */
  idleTimeoutMs: number;
  /** Port connections (HTTP requests in flight, WebSockets) one sandbox may hold open. */
  maxConnections: number;
  /** Bytes one port connection may carry in each direction. */
  maxTransferBytes: number;
}

export const DEFAULT_PORT_LIMITS: PortLimits = { idleTimeoutMs: 620_000, maxConnections: 64, maxTransferBytes: 1024 * 1024 * 1024 };

/** A port refused by the sandbox server: `status` 502 when nothing listens there. */
export class SandboxPortError extends E2bApiError {
  override name = "SandboxPortError";
  constructor(
    status: number,
    readonly port: number,
    message: string,
  ) {
    super(status, message);
  }
}

/**
 * One sandbox's connections to its own ports (through its slot's port tunnels,
 * pool/slot-port.ts): counted against `maxConnections`, all torn down when the sandbox ends.
 * A port the sandbox was created with in `network.httpsPorts` is reached over TLS (its
 * certificate not checked, as E2B's proxy does).
 */
export class SandboxPorts {
  private readonly open = new Set<Duplex>();
  private starting = 0;
  private ended = false;

  constructor(
    private readonly slot: LeasedSlot,
    private readonly allowNetwork: boolean,
    readonly limits: PortLimits,
    private readonly httpsPorts: ReadonlySet<number> = new Set(),
  ) {}

  /** Port connections open now. */
  get count(): number {
    return this.open.size + this.starting;
  }

  /** A connection to `port` inside the sandbox; 429 past the cap, 502 when nothing listens there. */
  async connect(port: number): Promise<Duplex> {
    if (this.ended) throw new E2bApiError(502, "this sandbox has ended (killed or timed out)");
    if (this.count >= this.limits.maxConnections) {
      throw new E2bApiError(429, `this sandbox already has ${this.limits.maxConnections} open port connections (--max-port-connections-per-sandbox): close one first`);
    }
    this.starting++;
    let raw: Socket;
    try {
      raw = await openSlotPort(this.slot, port, { allowNetwork: this.allowNetwork });
    } catch (err) {
      if (err instanceof SlotPortError) throw new SandboxPortError(err.status === 409 ? 502 : err.status, port, err.message);
      throw err;
    } finally {
      this.starting--;
    }
    const conn: Duplex = this.httpsPorts.has(port) ? tlsConnect({ socket: raw, rejectUnauthorized: false }) : raw;
    conn.on("error", () => undefined);
    this.open.add(conn);
    conn.once("close", () => {
      this.open.delete(conn);
      raw.destroy();
    });
    if (this.ended) conn.destroy();
    return conn;
  }

  /** The sandbox ended: every port connection is closed, none opens again. */
  closeAll(): void {
    this.ended = true;
    for (const c of this.open) c.destroy();
    this.open.clear();
  }
}
