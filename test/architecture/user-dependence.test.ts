/**
 * The non-root CI run covers the test files whose behaviour differs by user, and only those
 * (user-dependence.ts says how the list is computed; .ci/run uses it).
 */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { differsByUser, nonRootTests, testFiles } from "./user-dependence.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

describe("the test files that run as non-root too", () => {
  it("are those of the sandbox, security and host rooms, those whose code asks who runs it, and those that say so; never the static checks", () => {
    expect(differsByUser("test/sandbox/x.test.ts", "").differs).toBe(true);
    expect(differsByUser("test/security/x.test.ts", "").differs).toBe(true);
    expect(differsByUser("test/host/x.test.ts", "").differs).toBe(true);
    expect(differsByUser("test/env/x.test.ts", "if (process.getuid?.() === 0) expect(a).toBe(1);").differs).toBe(true);
    expect(differsByUser("test/pool/x.test.ts", 'import { isRoot } from "../sandbox/helpers.js";').differs).toBe(true);
    expect(differsByUser("test/e2b/x.test.ts", "// runs as each user: the slot's files are written as its uid as root\n").differs).toBe(true);
    expect(differsByUser("test/e2b/x.test.ts", "// runs as each user:\n").differs).toBe(false); // a reason is needed
    expect(differsByUser("test/env/x.test.ts", "expect(summary).toContain('root');").differs).toBe(false);
    expect(differsByUser("test/architecture/x.test.ts", "const isRoot = true;").differs).toBe(false);
  });

  it("is a part of the suite: the rooms above and a few more, not everything", () => {
    const all = testFiles(ROOT);
    const each = nonRootTests(ROOT);
    expect(each.every((f) => all.includes(f))).toBe(true);
    expect(each).toEqual(expect.arrayContaining(["test/sandbox/server.test.ts", "test/security/reset-barrier.test.ts", "test/pool/slot-uids.test.ts"]));
    expect(each.length).toBeLessThan(all.length / 2);
  });

  it("is what .ci/run gives the non-root run by default (computed there, from this module)", () => {
    const ci = readFileSync(new URL("../../.ci/run", import.meta.url), "utf8");
    expect(ci).toMatch(/nonroot_tests=\$\{SLOTPOOL_CI_NONROOT_TESTS:-each-user\}/);
    expect(ci).toContain("node --import tsx test/architecture/user-dependence.ts");
  });
});
