import type { NextDisk, SlotDisks } from "../workspace/slot-disk.js";
import type { Slot } from "../core/slot.js";

/** The used children's disk swaps of one fork, sent in one request when every one has arrived (or skipped). */
export class DiskSwaps {
  private readonly entries: Array<{ slot: Slot; next: NextDisk }> = [];
  private arrived = 0;
  private readonly done = deferred<Settled<void>>();

  constructor(
    private readonly disks: SlotDisks,
    private readonly expected: number,
  ) {}

  async swap(slot: Slot, next: NextDisk): Promise<void> {
    this.entries.push({ slot, next });
    this.arrive();
    const r = await this.done.promise;
    if ("error" in r) throw r.error;
  }

  /** A child that will not swap (its stop failed): the others do not wait for it. */
  skip(): void {
    this.arrive();
  }

  private arrive(): void {
    if (++this.arrived < this.expected) return;
    if (this.entries.length === 0) this.done.resolve({ value: undefined });
    else void settle(this.disks.swap(this.entries)).then((r) => this.done.resolve(r));
  }
}

export type Settled<T> = { value: T } | { error: unknown };

/** A promise that never rejects (awaited later, maybe not at all: no unhandled rejection meanwhile). */
export function settle<T>(p: Promise<T>): Promise<Settled<T>> {
  return p.then(
    (value) => ({ value }),
    (error: unknown) => ({ error }),
  );
}

export function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}
