import { NoItemError } from "./errors.js";

/** How a reset chooses its item: OpenEnv's `seed` and `episode_id`, or neither (the next one). */
export interface ItemSelector {
  seed?: number;
  episodeId?: string;
}

/**
 * The env's items as episodes see them, numbered in the order `getNextItem()` gives them:
 * a reset without a selector takes the next unused number, `seed: n` takes item n (drawing
 * up to it if needed), and an `episode_id` seen before takes the item it had, so a seed or an
 * episode id replays the same item for the server's lifetime (and across servers, for an env
 * whose getNextItem is deterministic, as most are). Items drawn are kept for that.
 */
export class ItemSource<Item> {
  private readonly drawn: Item[] = [];
  private cursor = 0;
  private exhausted = false;
  private readonly episodes = new Map<string, number>();
  private drawing: Promise<unknown> = Promise.resolve();

  constructor(private readonly nextItem: () => Promise<Item | null> | Item | null) {}

  async select(selector: ItemSelector = {}): Promise<{ item: Item; index: number }> {
    const known = selector.episodeId !== undefined ? this.episodes.get(selector.episodeId) : undefined;
    const index = selector.seed ?? known ?? this.cursor++;
    const item = await this.itemAt(index);
    if (selector.episodeId !== undefined) this.episodes.set(selector.episodeId, index);
    return { item, index };
  }

  /** Item `index`, drawing from the env one at a time (getNextItem is never called concurrently). */
  private itemAt(index: number): Promise<Item> {
    const run = this.drawing.then(async () => {
      while (this.drawn.length <= index && !this.exhausted) {
        const next = await this.nextItem();
        if (next === null || next === undefined) this.exhausted = true;
        else this.drawn.push(next);
      }
      if (index < this.drawn.length) return this.drawn[index]!;
      throw new NoItemError(`the env has no item ${index}: its getNextItem() ran out after ${this.drawn.length} items${index === this.cursor - 1 ? "" : " (a seed selects the item of that number, from 0)"}`);
    });
    this.drawing = run.catch(() => undefined);
    return run;
  }
}
