import { HttpError } from "../../http/errors.js";
import { PortRefusedError, portRelayBinary, portRelayError, relayToPort, type RelayedConnection } from "../isolation/port-relay.js";
import type { NetnsHolder } from "../isolation/slot-netns.js";
import type { Slot } from "../core/slot.js";
import type { SlotHost } from "../workspace/slot-host.js";

/** Most tunnels open at once into one slot: each is a relay process counted in the slot's pids. */
export const MAX_TUNNELS_PER_SLOT = 64;

/** A port nobody listens on (HTTP 502, naming the port). */
export class PortClosedError extends HttpError {
  override name = "PortClosedError";
  constructor(
    readonly port: number,
    message: string,
  ) {
    super(502, message);
  }
}

/** What the tunnels need from the process sessions that own the slot's shared network namespace. */
export interface TunnelNamespaces {
  /** The slot's namespace for this network setting, if its sessions started one (never started here). */
  sharedNetns(slot: Slot, network: boolean): NetnsHolder | undefined;
  /** Why sessions have no shared namespace on this server (each keeps its own), if so. */
  readonly sharedNetnsReason: string | undefined;
  isFrozen(slot: Slot): boolean;
}

/**
 * Port tunnels into slots (`GET /ports/connect`, protocol/port-tunnel.ts): connections to
 * ports in the network namespace a slot's process sessions share, through the port relay
 * (isolation/port-relay.ts). A server a session starts is reachable this way; the `bash`
 * tool's namespace is not (it keeps one of its own, and a call ends everything it started).
 * Tunnels die with the slot's sessions (reset, fork, kill-all, shutdown): the next
 * trajectory's ports are never the previous one's connections.
 */
export class PortTunnels {
  private readonly bySlot = new Map<number, Set<RelayedConnection>>();
  private closed = false;

  constructor(
    private readonly host: SlotHost,
    private readonly namespaces: TunnelNamespaces,
  ) {}

  /** Why tunnels cannot be opened on this server, or undefined when they can. */
  get unavailableReason(): string | undefined {
    if (!this.host.bwrap.available) return `process sessions need bubblewrap, which is unavailable here: ${this.host.bwrap.reason ?? "unknown reason"}`;
    if (this.namespaces.sharedNetnsReason) return `a slot's processes share no network namespace here (${this.namespaces.sharedNetnsReason})`;
    if (!portRelayBinary(this.host.stateDir)) return `the port relay (native/port-relay.c) could not be built: ${portRelayError() ?? "unknown reason"}`;
    return undefined;
  }

  /** Open tunnels into the slot now. */
  count(slot: Slot): number {
    return this.bySlot.get(slot.index)?.size ?? 0;
  }

  /**
   * A connection to `port` where the slot's sessions with this network setting listen. 502
   * (PortClosedError) when nothing listens there, 409 while the slot is paused, 429 past
   * MAX_TUNNELS_PER_SLOT, 503 when this server cannot open tunnels.
   */
  async open(slot: Slot, port: number, allowNetwork: boolean): Promise<RelayedConnection> {
    if (this.closed) throw new HttpError(503, "sandbox server is shutting down: no tunnel opened");
    const why = this.unavailableReason;
    if (why) throw new HttpError(503, `port tunnels are unavailable: ${why}`);
    if (this.namespaces.isFrozen(slot)) throw new HttpError(409, `${slot.id} is paused: resume it (POST /processes/thaw) before connecting to its ports`);
    const mine = this.bySlot.get(slot.index) ?? new Set<RelayedConnection>();
    if (mine.size >= MAX_TUNNELS_PER_SLOT) throw new HttpError(429, `${slot.id} already has ${MAX_TUNNELS_PER_SLOT} open port connections; close one first`);
    // The namespace its sessions use: network on only where the server offers internet (as /processes/start).
    const network = allowNetwork && this.host.effectiveNetwork(true);
    const holder = this.namespaces.sharedNetns(slot, network);
    if (!holder) throw new PortClosedError(port, `nothing listens on port ${port} in ${slot.id}: no process of the slot runs`);
    const generation = slot.generation;
    let conn: RelayedConnection;
    try {
      conn = await relayToPort(portRelayBinary(this.host.stateDir)!, holder, port, (pid) => this.host.cgroups.place(slot.index, pid));
    } catch (err) {
      if (err instanceof PortRefusedError) throw new PortClosedError(port, `nothing listens on port ${port} in ${slot.id} (${err.reason})`);
      throw err;
    }
    if (this.closed || slot.generation !== generation) {
      // The slot was reset (or the server began to close) while the relay connected: that connection belongs to no one.
      conn.child.kill("SIGKILL");
      conn.socket.destroy();
      throw this.closed ? new HttpError(503, "sandbox server is shutting down: no tunnel opened") : new HttpError(409, `${slot.id} was reset while the connection was made; connect again`);
    }
    this.bySlot.set(slot.index, mine);
    mine.add(conn);
    conn.child.once("exit", () => mine.delete(conn));
    return conn;
  }

  /** Ends every tunnel into the slot (its sessions are being killed: reset, fork, kill-all). */
  killSlot(slot: Slot): void {
    const mine = this.bySlot.get(slot.index);
    if (!mine) return;
    for (const c of mine) {
      c.child.kill("SIGKILL");
      c.socket.destroy();
    }
    mine.clear();
  }

  close(): void {
    this.closed = true;
    for (const slot of this.host.slots) this.killSlot(slot);
  }
}
