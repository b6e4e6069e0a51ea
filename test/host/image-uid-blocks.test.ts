import { describe, expect, it } from "vitest";
import { claimImageUidBlock } from "../../src/host/image-uid-claim.js";
import { IMAGE_UID_RANGE_END, IMAGE_UID_RANGE_START, IMAGE_UID_SPAN, imageHostUid, imageUidMap, imageUidPositions } from "../../src/host/slot-uid-blocks.js";

const isRoot = process.getuid?.() === 0;

/** Image uid blocks (host/slot-uid-blocks.ts): a slot's image users are host uids only that slot has. */
describe("image uid blocks", () => {
  it("a slot's map: inside 0 is its host uid, 1-65535 its own block in [2^31, 2^32)", () => {
    const base = IMAGE_UID_RANGE_START + 3 * 4 * IMAGE_UID_SPAN;
    expect(imageUidMap(20_001, base, 1)).toBe(`0:20001:1,1:${base + IMAGE_UID_SPAN + 1}:65535`);
    expect(imageHostUid(20_001, base, 1, 0)).toBe(20_001);
    expect(imageHostUid(20_001, base, 1, 1000)).toBe(base + IMAGE_UID_SPAN + 1000);
    // Blocks of a server's slots do not overlap, and stay below 2^32 - 1.
    const { count, size } = imageUidPositions(20_000, 64);
    expect(size).toBe(64 * IMAGE_UID_SPAN);
    expect(IMAGE_UID_RANGE_START + count * size).toBeLessThanOrEqual(IMAGE_UID_RANGE_END);
    expect(imageHostUid(0, base, 0, 65535)).toBeLessThan(imageHostUid(0, base, 1, 1));
  });

  it("the first position tried follows the slot uid base; one in use is skipped", async () => {
    const a = imageUidPositions(20_000, 4);
    const b = imageUidPositions(30_000, 4);
    expect(a.first).not.toBe(b.first);
    const first = IMAGE_UID_RANGE_START + a.first * a.size;
    const claim = await claimImageUidBlock(20_000, 4, (f) => f === first);
    try {
      expect(claim.base).toBe(IMAGE_UID_RANGE_START + ((a.first + 1) % a.count) * a.size);
    } finally {
      claim.release();
    }
  });

  it.skipIf(!isRoot)("two root servers with the same slot uid base never share a block (a flock each), and a released block is free again (skipped without root: /run is root's)", async () => {
    const one = await claimImageUidBlock(40_000, 4, () => false);
    const two = await claimImageUidBlock(40_000, 4, () => false);
    expect(two.base).not.toBe(one.base);
    one.release();
    two.release();
    // The lock is the kernel's: it goes with its holder process, which a release ends.
    let again = await claimImageUidBlock(40_000, 4, () => false);
    for (let i = 0; i < 100 && again.base !== one.base; i++) {
      again.release();
      await new Promise((r) => setTimeout(r, 20));
      again = await claimImageUidBlock(40_000, 4, () => false);
    }
    expect(again.base).toBe(one.base);
    again.release();
  });
});
