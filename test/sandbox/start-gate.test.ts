/**
 * The sandbox server's StartGate (slot namespace start-ups at once): never more than its
 * limit running, the rest first come, first served, and a failing task gives its place on.
 */
import { describe, expect, it } from "vitest";
import { StartGate } from "../../src/sandbox/isolation/start-gate.js";

describe("StartGate", () => {
  it("runs at most `limit` tasks at once, in arrival order, and a failure frees its place", async () => {
    const gate = new StartGate(2);
    let running = 0;
    let most = 0;
    const began: number[] = [];
    const task = (i: number) => async () => {
      began.push(i);
      running++;
      most = Math.max(most, running);
      // wait: a start-up that takes a while (the fake's own 20 ms), so that starts overlap.
      await new Promise((r) => setTimeout(r, 20));
      running--;
      if (i === 1) throw new Error("start-up failed");
      return i;
    };
    const results = await Promise.allSettled([0, 1, 2, 3, 4, 5].map((i) => gate.run(task(i))));
    expect(most).toBe(2);
    expect(began).toEqual([0, 1, 2, 3, 4, 5]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled", "fulfilled", "fulfilled", "fulfilled"]);
    // The gate is free again: the next task starts at once.
    let ran = false;
    await gate.run(async () => void (ran = true));
    expect(ran).toBe(true); // it ran (a gate still held would never let it: the test would time out)
  });
});
