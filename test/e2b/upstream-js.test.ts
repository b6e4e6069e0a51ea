import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { fakeInternetMissing, makeFakeInternet } from "./upstream/fake-internet.js";
import { judge, listedHere, NOT_SERVED, runUpstreamJs } from "./upstream/run-upstream.js";

// E2B's own JS SDK tests (test/e2b/upstream/js, ORIGIN.md there) against `slotpool e2b-server`
// with its defaults. The tests that still fail here are listed, each with its reason, in
// js-expected-failures.json: this test fails when another one fails (a regression) and when
// a listed one passes (the list must stay exact), and holds the pass rate to its floor.
// The tests that curl public hosts (listed as `internet`) get a fake internet where it can be
// made (as root: upstream/fake-internet.ts), and then must pass; elsewhere they stay listed.
const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const expectedFailures = JSON.parse(readFileSync(join(repo, "test/e2b/upstream/js-expected-failures.json"), "utf8")) as Record<string, string>;
/** Unlisted failures tolerated as load flakes (each is printed). */
const FLAKE_ALLOWANCE = 2;
/** The share of the upstream tests of what slotpool serves here that must pass (issue 37's target: 0.98). */
const PASS_FLOOR = 0.98;

describe("E2B's own JS SDK tests against slotpool e2b-server", () => {
  it("pass, except exactly the listed known gaps", async () => {
    const noInternet = fakeInternetMissing();
    const internet = noInternet === undefined ? await makeFakeInternet() : undefined;
    try {
      const { outcomes, output } = await runUpstreamJs(repo, internet);
      expect(outcomes.length, output.slice(-4000)).toBeGreaterThan(100);
      const v = judge(outcomes, listedHere(expectedFailures, internet !== undefined));
      console.log(`E2B JS SDK tests (${internet ? "with the fake internet" : `the internet tests listed: ${noInternet}`}): ${v.passed} of ${v.total} pass against slotpool e2b-server (${((100 * v.passed) / v.total).toFixed(1)} % of all that reach it); of what it serves here (all but the tests listed as ${NOT_SERVED.join(", ")}): ${v.servedPassed} of ${v.served} (${((100 * v.servedPassed) / v.served).toFixed(1)} %)`);
      // Timing-sensitive upstream tests (a PTY's output, a watch's events) can miss on a loaded
      // 2-core box: up to FLAKE_ALLOWANCE unlisted failures are printed, more fail the test.
      if (v.unexpected.length > 0) console.warn(`upstream tests failing that js-expected-failures.json does not list:\n${v.unexpected.join("\n")}`);
      expect(v.unexpected.length, `upstream tests failing that js-expected-failures.json does not list:\n${v.unexpected.join("\n")}`).toBeLessThanOrEqual(FLAKE_ALLOWANCE);
      expect(v.nowPassing, "listed as failing in js-expected-failures.json but passing: remove them from the list").toEqual([]);
      expect(v.missing, "listed in js-expected-failures.json but not in the suite").toEqual([]);
      expect(v.uncategorized, "listed in js-expected-failures.json without a category (the reason's first word: run-upstream.ts)").toEqual([]);
      // The floor is for the listed gaps: load flakes are bounded by FLAKE_ALLOWANCE above.
      expect((v.servedPassed + v.unexpected.length) / v.served).toBeGreaterThanOrEqual(PASS_FLOOR);
      // Issue 37's bar, over all the tests that reach the server: where the fake internet is made, nothing is left out but header transforms.
      if (internet) expect((v.passed + v.unexpected.length) / v.total).toBeGreaterThanOrEqual(PASS_FLOOR);
    } finally {
      internet?.remove();
    }
  }, 900_000);
});
