import type { Duplex } from "node:stream";

/** One connection's share of the budget: what it has received and not yet had handled. */
export interface FrameAccount {
  /** A whole message arrived (`bytes` long): what was partial is now that message, waiting its turn. */
  received(bytes: number): void;
  /** The message was handled: its bytes leave the budget. */
  handled(bytes: number): void;
  /** The connection ended: everything it held leaves the budget. */
  close(): void;
}

/**
 * One byte budget for WebSocket messages in flight over every connection of a server:
 * bytes a socket has delivered (a message still arriving, or arrived and waiting for its
 * session) count until the message is handled. A connection whose bytes would take the
 * total past the budget is told so (`onOver`) and is expected to be closed, so many clients
 * sending large frames at once cannot grow the server's memory past the budget (48 × 15 MiB
 * frames once took it from 318 MB to 1 GB). Each message is also bounded alone (ws's
 * maxPayload); this bounds their sum.
 */
export class FrameBudget {
  private used = 0;

  constructor(readonly capacity: number) {}

  get inFlight(): number {
    return this.used;
  }

  /** Counts `socket`'s bytes from now on; `onOver` is called (once) when they would pass the budget. */
  track(socket: Duplex, onOver: () => void): FrameAccount {
    let partial = 0;
    let waiting = 0;
    let over = false;
    let closed = false;
    const onData = (chunk: Buffer) => {
      if (closed) return;
      partial += chunk.length;
      this.used += chunk.length;
      if (!over && this.used > this.capacity) {
        over = true;
        onOver();
      }
    };
    socket.on("data", onData);
    return {
      received: (bytes) => {
        if (closed) return;
        // Frame headers and a chunk's start of the next message make `partial` differ a little from the message's size.
        this.used += bytes - partial;
        partial = 0;
        waiting += bytes;
      },
      handled: (bytes) => {
        if (closed) return;
        const n = Math.min(bytes, waiting);
        waiting -= n;
        this.used -= n;
      },
      close: () => {
        if (closed) return;
        closed = true;
        socket.off("data", onData);
        this.used -= partial + waiting;
        partial = waiting = 0;
      },
    };
  }
}
