import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";

/**
 * Episode ids and the items they replay.
 *
 * - An id the server hands out (a reset that named none) is signed: `ep-<item>-<nonce>-<mac>`,
 *   an HMAC of the item number and a nonce under the server's secret. Replaying it needs no
 *   state on the server (nothing to grow, nothing another client can re-bind), and a forged or
 *   altered one is not a replay but a client-chosen id like any other.
 * - An id a client chose is bound to its item the first time it is used and never re-bound
 *   (a reset naming it with another seed is refused); the bindings are an LRU of at most
 *   `maxClientIds` entries, so the map cannot grow without bound. An evicted id is unknown
 *   again: a replay of it then takes a new item (docs/trainers.md says so; server ids and
 *   seeds never are evicted).
 */
export class EpisodeIds {
  private readonly secret: Buffer;
  private readonly bound = new Map<string, number>();

  constructor(options: { secret?: string; maxClientIds?: number } = {}) {
    this.secret = options.secret ? Buffer.from(options.secret, "utf8") : randomBytes(32);
    this.maxClientIds = options.maxClientIds ?? 65_536;
  }

  readonly maxClientIds: number;

  /** A new signed id for an episode of item `index`. */
  issue(index: number): string {
    const nonce = randomBytes(6).toString("hex");
    return `ep-${index}-${nonce}-${this.mac(index, nonce)}`;
  }

  /** The item a signed id names, or undefined when `id` is not one of this server's (or was altered). */
  signedItem(id: string): number | undefined {
    const m = /^ep-(\d{1,15})-([0-9a-f]{12})-([0-9a-f]{32})$/.exec(id);
    if (!m) return undefined;
    const index = Number(m[1]);
    const want = Buffer.from(this.mac(index, m[2]!), "hex");
    const got = Buffer.from(m[3]!, "hex");
    return timingSafeEqual(want, got) ? index : undefined;
  }

  /** The item a client-chosen id is bound to (refreshing it in the LRU), or undefined. */
  boundItem(id: string): number | undefined {
    const index = this.bound.get(id);
    if (index === undefined) return undefined;
    this.bound.delete(id);
    this.bound.set(id, index);
    return index;
  }

  /** Binds a client-chosen id to its item (first use); the least recently used binding goes when full. */
  bind(id: string, index: number): void {
    if (this.bound.has(id)) return;
    this.bound.set(id, index);
    if (this.bound.size > this.maxClientIds) this.bound.delete(this.bound.keys().next().value!);
  }

  /** Client-chosen ids held now. */
  get size(): number {
    return this.bound.size;
  }

  private mac(index: number, nonce: string): string {
    return createHmac("sha256", this.secret).update(`${index}:${nonce}`).digest("hex").slice(0, 32);
  }
}
