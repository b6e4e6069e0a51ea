import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runUpstreamJs } from "./upstream/run-upstream.js";

// E2B's own JS SDK tests (test/e2b/upstream/js, ORIGIN.md there) against `slotpool e2b-server`
// with its defaults. The tests that still fail here are listed, each with its reason, in
// js-expected-failures.json: this test fails when another one fails (a regression) and when
// a listed one passes (the list must stay exact), and holds the pass rate to its floor.
const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const expectedFailures = JSON.parse(readFileSync(join(repo, "test/e2b/upstream/js-expected-failures.json"), "utf8")) as Record<string, string>;
/** Unlisted failures tolerated as load flakes (each is printed). */
const FLAKE_ALLOWANCE = 2;
/** The share of upstream tests that must pass (the target is 0.95). */
const PASS_FLOOR = 0.95; // issue 30's target; 147 of 149 pass, so the floor leaves room for FLAKE_ALLOWANCE

describe("E2B's own JS SDK tests against slotpool e2b-server", () => {
  it("pass, except exactly the listed known gaps", async () => {
    const { outcomes, output } = await runUpstreamJs(repo);
    expect(outcomes.length, output.slice(-4000)).toBeGreaterThan(100);
    const failing = [...new Set(outcomes.filter((o) => !o.passed).map((o) => o.key))].sort();
    const unexpected = outcomes.filter((o) => !o.passed && !(o.key in expectedFailures)).map((o) => `${o.key}: ${o.message}`);
    const nowPassing = Object.keys(expectedFailures).filter((k) => !failing.includes(k) && outcomes.some((o) => o.key === k));
    const missing = Object.keys(expectedFailures).filter((k) => !outcomes.some((o) => o.key === k));
    const passed = outcomes.filter((o) => o.passed).length;
    console.log(`E2B JS SDK tests: ${passed} of ${outcomes.length} pass against slotpool e2b-server`);
    // Timing-sensitive upstream tests (a PTY's output, a watch's events) can miss on a loaded
    // 2-core box: up to FLAKE_ALLOWANCE unlisted failures are printed, more fail the test.
    if (unexpected.length > 0) console.warn(`upstream tests failing that js-expected-failures.json does not list:\n${unexpected.join("\n")}`);
    expect(unexpected.length, `upstream tests failing that js-expected-failures.json does not list:\n${unexpected.join("\n")}`).toBeLessThanOrEqual(FLAKE_ALLOWANCE);
    expect(nowPassing, "listed as failing in js-expected-failures.json but passing: remove them from the list").toEqual([]);
    expect(missing, "listed in js-expected-failures.json but not in the suite").toEqual([]);
    expect(passed / outcomes.length).toBeGreaterThanOrEqual(PASS_FLOOR);
  }, 900_000);
});
