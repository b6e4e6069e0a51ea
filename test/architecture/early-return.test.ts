import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { earlyReturns, earlyReturnsUnder } from "./early-return.js";

const TEST_DIR = fileURLToPath(new URL("..", import.meta.url));

describe("tests under test/", () => {
  it("none passes by returning early: a missing precondition skips with a reason (it.skipIf / ctx.skip)", () => {
    expect(earlyReturnsUnder(TEST_DIR)).toEqual([]);
  });
});

describe("the early-return scan itself", () => {
  it("reports an `if (...) return` whose branch asserts nothing, in any form of test call", () => {
    const source = [
      'it("a", async () => {',
      "  if (!bwrap) return;",
      "  expect(1).toBe(1);",
      "});",
      'it.skipIf(x)("b", () => {',
      "  const r = run();",
      "  if (!r.ok) {",
      "    console.log('no');",
      "    return;",
      "  }",
      "});",
      'test.concurrent("c", () => { expect(a).toBe(1); if (!indexed) return; check(); });',
    ].join("\n");
    expect(earlyReturns("x.test.ts", source)).toEqual([
      "x.test.ts:2: if (!bwrap) return;",
      "x.test.ts:7: if (!r.ok) {",
      "x.test.ts:12: if (!indexed) return;",
    ]);
  });

  it("allows the narrowing idiom after an assertion on the same value, an asserting branch, and returns in callbacks", () => {
    const source = [
      'it("a", async () => {',
      "  expect(outcome.ok).toBe(true);",
      "  if (!outcome.ok) return;",
      "  if (!isRoot) {",
      "    expect(uid).toBe(0);",
      "    return;",
      "  }",
      "  list.filter((n) => { if (!n) return false; return true; });",
      "});",
      "function helper() { if (!x) return; }",
    ].join("\n");
    expect(earlyReturns("y.test.ts", source)).toEqual([]);
  });
});
