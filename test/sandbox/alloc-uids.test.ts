/**
 * Unique slot uids per allocation (issue 11, hole 4): without `--slot-uid-base`, a root
 * server inside Nomad runs its slots under a block of uids derived from NOMAD_ALLOC_ID, so
 * two allocations on one node never share a slot uid (nor its RLIMIT_NPROC count).
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ALLOC_BLOCK, ALLOC_UID_RANGE_START, allocationUidBase, slotUidBase } from "../../src/host/slot-uid-blocks.js";
import { isRoot, startServer, type TestServer } from "./helpers.js";

describe("slot uid base of a server", () => {
  it("is --slot-uid-base when given, 20000 outside Nomad, else a block of the allocation's own", () => {
    expect(slotUidBase(30_000, "alloc-a")).toBe(30_000);
    expect(slotUidBase(undefined, undefined)).toBe(20_000);
    const a = slotUidBase(undefined, "6c7a1f3e-0000-4000-8000-000000000001");
    expect(a).toBeGreaterThanOrEqual(ALLOC_UID_RANGE_START);
    expect(a + ALLOC_BLOCK).toBeLessThanOrEqual(2 ** 30);
    expect((a - ALLOC_UID_RANGE_START) % ALLOC_BLOCK).toBe(0);
    // Same allocation, same block (a restarted task keeps its uids).
    expect(slotUidBase(undefined, "6c7a1f3e-0000-4000-8000-000000000001")).toBe(a);
  });

  it("skips a block some process already runs in (another allocation that hashed to it)", () => {
    const first = allocationUidBase("alloc-x", () => false);
    const taken = new Set([first]);
    const next = allocationUidBase("alloc-x", (f) => taken.has(f));
    expect(next).not.toBe(first);
    expect(Math.abs(next - first) % ALLOC_BLOCK).toBe(0);
  });
});

describe("two sandbox servers with different NOMAD_ALLOC_ID values", () => {
  let a: TestServer;
  let b: TestServer;
  beforeAll(async () => {
    [a, b] = await Promise.all([
      startServer({ slots: 2, env: { NOMAD_ALLOC_ID: "0b8e4c52-1111-4a6e-9d1c-5d3b1a2f0e01" } }),
      startServer({ slots: 2, env: { NOMAD_ALLOC_ID: "f13d9a77-2222-4b0f-8c2e-7e4a5b6c1d02" } }),
    ]);
  }, 90_000);
  afterAll(async () => {
    await Promise.all([a?.stop(), b?.stop()]);
  });

  const slotUids = async (): Promise<number[]> => {
    const uids: number[] = [];
    for (const server of [a, b]) {
      for (const slot of [0, 1]) {
        const r = await server.bash(slot, "id -u", { require_sandbox: true });
        expect(r.success, JSON.stringify(r)).toBe(true);
        uids.push(Number(r.output.trim()));
      }
    }
    return uids;
  };

  it.skipIf(isRoot)("not root: run every slot as the server's own uid (no uid per slot without root; skipped as root)", async () => {
    expect(new Set(await slotUids())).toEqual(new Set([process.getuid!()]));
  }, 60_000);

  it.skipIf(!isRoot)("run their slots under disjoint uids from the allocation range (needs root for a uid per slot; skipped otherwise)", async () => {
    const uids = await slotUids();
    expect(new Set(uids).size).toBe(4);
    for (const uid of uids) {
      expect(uid).toBeGreaterThanOrEqual(ALLOC_UID_RANGE_START);
      expect(uid).toBeLessThan(2 ** 30);
    }
    // Slots of one server are consecutive uids of its block.
    expect(uids[1]! - uids[0]!).toBe(1);
    expect(uids[3]! - uids[2]!).toBe(1);
  }, 60_000);
});
