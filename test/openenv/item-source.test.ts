/**
 * How episodes choose their items (src/openenv/item-source.ts, episode-ids.ts): seeds are
 * bounded and drawn without holding the event loop; the server's episode ids are signed and
 * replay without state; a client's own ids are bound once, in a map that cannot grow past its
 * bound.
 */
import { describe, expect, it } from "vitest";
import { ActionValidationError, NoItemError } from "../../src/openenv/errors.js";
import { EpisodeIds } from "../../src/openenv/episode-ids.js";
import { ItemSource } from "../../src/openenv/item-source.js";

const counting = () => {
  let next = 0;
  return () => ({ id: next++ });
};

describe("ItemSource", () => {
  it("a seed past maxSeed is refused before anything is drawn", async () => {
    let draws = 0;
    const items = new ItemSource(() => ({ id: draws++ }), new EpisodeIds(), 1_000);
    await expect(items.select({ seed: 1e11 })).rejects.toBeInstanceOf(ActionValidationError);
    await expect(items.select({ seed: 1_001 })).rejects.toThrow(/from 0 to 1000/);
    expect(draws).toBe(0);
    expect((await items.select({ seed: 1_000 })).item).toEqual({ id: 1_000 });
  });

  it("drawing up to a large seed lets the event loop run between slices (other requests, SIGTERM are served meanwhile)", async () => {
    const items = new ItemSource(counting(), new EpisodeIds(), 200_000);
    let turns = 0;
    const ticker = setInterval(() => turns++, 0);
    try {
      const selected = await items.select({ seed: 199_999 });
      expect(selected.item).toEqual({ id: 199_999 });
    } finally {
      clearInterval(ticker);
    }
    expect(turns).toBeGreaterThan(0);
  });

  it("keeps only items 0..maxSeed: a reset past them draws a fresh item that is not kept", async () => {
    const items = new ItemSource(counting(), new EpisodeIds(), 2);
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push((await items.select()).episodeId);
    expect((await items.select({ episodeId: ids[1]! })).index).toBe(1);
    await expect(items.select({ episodeId: ids[4]! })).rejects.toBeInstanceOf(NoItemError);
  });

  it("an env that runs out: a seed past its items is a NoItemError, and later ones are refused without drawing", async () => {
    let left = 3;
    const items = new ItemSource(() => (left-- > 0 ? { n: left } : null), new EpisodeIds(), 100);
    await expect(items.select({ seed: 10 })).rejects.toBeInstanceOf(NoItemError);
    await expect(items.select({ seed: 50 })).rejects.toThrow(/ran out after 3 items/);
  });
});

describe("EpisodeIds", () => {
  it("a signed id names its item; an altered one, or one signed by another secret, is not a replay", () => {
    const ids = new EpisodeIds({ secret: "a-secret-of-enough-length" });
    const id = ids.issue(42);
    expect(ids.signedItem(id)).toBe(42);
    expect(ids.signedItem(id.replace(/^ep-42-/, "ep-43-"))).toBeUndefined();
    expect(new EpisodeIds({ secret: "another-secret-entirely" }).signedItem(id)).toBeUndefined();
    // The same secret on another server replays it (a deterministic env's items are the same there).
    expect(new EpisodeIds({ secret: "a-secret-of-enough-length" }).signedItem(id)).toBe(42);
    expect(ids.issue(42)).not.toBe(id);
  });

  it("client ids are bound once and kept in an LRU of at most maxClientIds", () => {
    const ids = new EpisodeIds({ maxClientIds: 3 });
    for (let i = 0; i < 10; i++) ids.bind(`c${i}`, i);
    expect(ids.size).toBe(3);
    expect(ids.boundItem("c0")).toBeUndefined();
    expect(ids.boundItem("c9")).toBe(9);
    ids.bind("c9", 99);
    expect(ids.boundItem("c9")).toBe(9);
  });
});
