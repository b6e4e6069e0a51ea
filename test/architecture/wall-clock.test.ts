/**
 * Issue 39: a wall-clock bound in a test is a bug unless it has a stated reason (see
 * wall-clock.ts for what counts and how the reason is written: `bound:` / `wait:` comments).
 */
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { suiteFindings, wallClockFindings } from "./wall-clock.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

describe("wall-clock time in the suite", () => {
  it("finds an unexplained bound and a fixed wait, and accepts them once they say why; a polling loop's pause is no fixed wait", () => {
    const bare = `it("x", async () => {
  const t0 = Date.now();
  await go();
  expect(Date.now() - t0).toBeLessThan(1_000);
  await new Promise((r) => setTimeout(r, 300));
  while (!done()) {
    await new Promise((r) => setTimeout(r, 50));
  }
});`;
    expect(wallClockFindings("t.ts", bare).map((f) => [f.kind, f.line])).toEqual([
      ["bound", 4],
      ["wait", 5],
    ]);
    const said = bare
      .replace("  expect(Date.now()", "  // bound: at once, not after the 30 s timeout\n  expect(Date.now()")
      .replace("  await new Promise((r) => setTimeout(r, 300));", "  await new Promise((r) => setTimeout(r, 300)); // wait: a window in which nothing may happen");
    expect(wallClockFindings("t.ts", said)).toEqual([]);
    // A wait for an event that gives up after 2 s is a bound in disguise; after a minute it is a hang guard.
    expect(wallClockFindings("t.ts", `  await eventually(() => gone(), 2_000);\n  await within(60_000, "x", p);`).map((f) => [f.kind, f.line])).toEqual([["bound", 1]]);
  });

  it("no test of the suite has a bound or a fixed wait without its reason", () => {
    expect(suiteFindings(ROOT).map((f) => `${f.file}:${f.line} (${f.kind}) ${f.text}`)).toEqual([]);
  });
});
