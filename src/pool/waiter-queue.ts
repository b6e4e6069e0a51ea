import type { PlacementWish } from "./slot-placement.js";
import type { ForkableSlot } from "./types.js";

/** An acquire() call waiting for a free slot. */
export interface Waiter {
  trajectoryId: string;
  /** The template or image its container should hold, when one with a free slot does (slot-placement.ts). */
  wish?: PlacementWish;
  startedAt: number;
  resolve: (slot: ForkableSlot) => void;
  reject: (err: unknown) => void;
  done: boolean;
  /** Clears the waiter's timer and abort listener. */
  cleanup: () => void;
}

/**
 * acquire() calls waiting for a slot, first come first served. A waiter that times out or
 * is aborted is marked done and skipped later (no O(n) removal from the middle); the array
 * is compacted once the head has moved far enough.
 */
export class WaiterQueue {
  private readonly items: Waiter[] = [];
  private head = 0;
  /** Waiters not done yet. */
  size = 0;

  /**
   * A new waiter at the back of the queue: resolves with the slot it is served, rejects with
   * `timeoutError()` after `timeoutMs` or with the signal's reason on abort (both drop it,
   * through `gaveUp`, so the pool can rescale).
   */
  wait(
    o: { trajectoryId: string; wish: PlacementWish; startedAt: number; timeoutMs: number; signal: AbortSignal | undefined },
    host: { gaveUp: (waiter: Waiter) => void; timeoutError: () => Error },
  ): Promise<ForkableSlot> {
    return new Promise<ForkableSlot>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const onAbort = () => {
        if (waiter.done) return;
        host.gaveUp(waiter);
        reject(o.signal!.reason);
      };
      const waiter: Waiter = {
        trajectoryId: o.trajectoryId,
        wish: o.wish,
        startedAt: o.startedAt,
        resolve,
        reject,
        done: false,
        cleanup: () => {
          clearTimeout(timer);
          o.signal?.removeEventListener("abort", onAbort);
        },
      };
      timer = setTimeout(() => {
        if (waiter.done) return;
        host.gaveUp(waiter);
        reject(host.timeoutError());
      }, o.timeoutMs);
      o.signal?.addEventListener("abort", onAbort, { once: true });
      this.push(waiter);
    });
  }

  push(waiter: Waiter): void {
    this.items.push(waiter);
    this.size++;
  }

  /** The first waiter not done, left in place. */
  peek(): Waiter | undefined {
    while (this.head < this.items.length) {
      const w = this.items[this.head]!;
      if (!w.done) return w;
      this.head++;
    }
    return undefined;
  }

  /** Takes the first waiter (the one peek() returned) out of the queue, done. */
  take(): Waiter | undefined {
    const w = this.peek();
    if (!w) return undefined;
    this.head++;
    w.done = true;
    w.cleanup();
    this.size--;
    return w;
  }

  /** A waiter gives up (timeout, abort): it is skipped from now on. */
  drop(waiter: Waiter): void {
    if (waiter.done) return;
    waiter.done = true;
    waiter.cleanup();
    this.size--;
    this.compact();
  }

  /** Rejects every waiter with `error` and empties the queue. */
  failAll(error: Error): void {
    for (let i = this.head; i < this.items.length; i++) {
      const w = this.items[i]!;
      if (w.done) continue;
      w.done = true;
      w.cleanup();
      w.reject(error);
    }
    this.items.length = 0;
    this.head = 0;
    this.size = 0;
  }

  compact(): void {
    if (this.head > 1024 && this.head * 2 > this.items.length) {
      this.items.splice(0, this.head);
      this.head = 0;
    } else if (this.head === this.items.length) {
      this.items.length = 0;
      this.head = 0;
    }
  }
}
