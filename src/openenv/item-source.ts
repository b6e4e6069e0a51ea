import { ActionValidationError, NoItemError } from "./errors.js";
import type { EpisodeIds } from "./episode-ids.js";

/** How a reset chooses its item: OpenEnv's `seed` and `episode_id`, or neither (the next one). */
export interface ItemSelector {
  seed?: number;
  episodeId?: string;
}

/** The item a selector chose, its number, and the episode id to answer with (the client's, or a signed one). */
export interface SelectedItem<Item> {
  item: Item;
  index: number;
  episodeId: string;
}

/** Draws from getNextItem this many at a time before letting the event loop run (other requests, signals). */
const DRAW_SLICE = 256;

/**
 * The env's items as episodes see them, numbered in the order `getNextItem()` gives them:
 * a reset without a selector takes the next unused number, `seed: n` takes item n (drawing
 * up to it if needed), and an `episode_id` replays the item it had (ids this server handed
 * out are signed, ids a client chose are bound on first use: see EpisodeIds).
 *
 * Bounded: a seed above `maxSeed` is a validation error before anything is drawn (an
 * unbounded seed once walked getNextItem billions of times), drawing yields to the event loop
 * every few hundred items, and only items 0..maxSeed are kept (a server reset past them draws
 * a fresh item that is not kept, so its id cannot replay after it).
 */
export class ItemSource<Item> {
  private readonly kept: Item[] = [];
  /** How many items getNextItem has given (kept or not). */
  private drawn = 0;
  private cursor = 0;
  private exhausted = false;
  private drawing: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly nextItem: () => Promise<Item | null> | Item | null,
    readonly ids: EpisodeIds,
    readonly maxSeed = 100_000,
  ) {}

  async select(selector: ItemSelector = {}): Promise<SelectedItem<Item>> {
    const { seed, episodeId } = selector;
    if (seed !== undefined) this.checkSeed(seed);
    const signed = episodeId !== undefined ? this.ids.signedItem(episodeId) : undefined;
    const bound = signed ?? (episodeId !== undefined ? this.ids.boundItem(episodeId) : undefined);
    if (bound !== undefined && seed !== undefined && seed !== bound) {
      throw new ActionValidationError(`Invalid reset: episode_id ${JSON.stringify(episodeId)} replays item ${bound}, not the seed ${seed}: send one of them, or a new episode_id`, [
        { type: "value_error", loc: ["episode_id"], msg: `bound to item ${bound}` },
      ]);
    }
    const index = bound ?? seed ?? this.cursor++;
    const item = await this.itemAt(index);
    if (episodeId !== undefined && signed === undefined) this.ids.bind(episodeId, index);
    return { item, index, episodeId: episodeId ?? this.ids.issue(index) };
  }

  private checkSeed(seed: number): void {
    if (!Number.isSafeInteger(seed) || seed < 0 || seed > this.maxSeed) {
      throw new ActionValidationError(`Invalid reset: seed must be an item number from 0 to ${this.maxSeed} (this server's --max-seed), got ${seed}`, [
        { type: "less_than_equal", loc: ["seed"], msg: `must be <= ${this.maxSeed}` },
      ]);
    }
    if (this.exhausted && seed >= this.drawn) throw this.noItem(seed);
  }

  /** Item `index`, drawing from the env one at a time (getNextItem is never called concurrently). */
  private itemAt(index: number): Promise<Item> {
    const run = this.drawing.then(async () => {
      if (index < this.kept.length) return this.kept[index]!;
      if (index < this.drawn) throw new NoItemError(`item ${index} is no longer held: only items 0..${this.maxSeed} are kept for replay (--max-seed); reset without an episode_id for a new item`);
      let item: Item | undefined;
      while (this.drawn <= index && !this.exhausted) {
        const next = await this.nextItem();
        if (next === null || next === undefined) {
          this.exhausted = true;
          break;
        }
        if (this.drawn <= this.maxSeed) this.kept.push(next);
        if (this.drawn === index) item = next;
        this.drawn++;
        if (this.drawn % DRAW_SLICE === 0) await new Promise((resolve) => setImmediate(resolve));
      }
      if (item !== undefined) return item;
      throw this.noItem(index);
    });
    this.drawing = run.catch(() => undefined);
    return run;
  }

  private noItem(index: number): NoItemError {
    return new NoItemError(`the env has no item ${index}: its getNextItem() ran out after ${this.drawn} items${index === this.cursor - 1 ? "" : " (a seed selects the item of that number, from 0)"}`);
  }
}
