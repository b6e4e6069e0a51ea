import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { pythonClients } from "../support/python-clients.js";
import { fakeInternetMissing, makeFakeInternet } from "./upstream/fake-internet.js";
import { judge, listedHere, NOT_SERVED, runUpstreamPython } from "./upstream/run-upstream.js";
import { startE2bServerProcess } from "./upstream/server-process.js";

// E2B's own Python SDK tests (test/e2b/upstream/python, ORIGIN.md) with the current E2B
// Python SDK from the package index (test/python/requirements.txt), sync and async, against
// `slotpool e2b-server` with its defaults. As for the JS suite, the tests that still fail
// are listed with their reasons (py-expected-failures.json) and the list is kept exact. The
// tests that curl public hosts (listed as `internet`) get a fake internet where it can be made
// (as root: upstream/fake-internet.ts), and then must pass; elsewhere they stay listed.
const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const expectedFailures = JSON.parse(readFileSync(join(repo, "test/e2b/upstream/py-expected-failures.json"), "utf8")) as Record<string, string>;
/** Unlisted failures tolerated as load flakes (each is printed). */
const FLAKE_ALLOWANCE = 2;
/** The share of the upstream tests of what slotpool serves here that must pass (issue 37's target: 0.98). */
const PASS_FLOOR = 0.98;
const py = pythonClients();

describe("E2B's own Python SDK tests against slotpool e2b-server", () => {
  it.skipIf(py.python === null)(`pass, except exactly the listed known gaps${py.reason ? ` (skipped: ${py.reason})` : ""}`, async () => {
    // The server, its template images' registry and pytest: upstream/python-suite.ts.
    const noInternet = fakeInternetMissing();
    const internet = noInternet === undefined ? await makeFakeInternet() : undefined;
    try {
      const { outcomes, output } = await runUpstreamPython(repo, py.python!, internet);
      expect(outcomes.length, output.slice(-4000)).toBeGreaterThan(200);
      const v = judge(outcomes, listedHere(expectedFailures, internet !== undefined));
      console.log(`E2B Python SDK tests (${internet ? "with the fake internet" : `the internet tests listed: ${noInternet}`}): ${v.passed} of ${v.total} pass against slotpool e2b-server (${((100 * v.passed) / v.total).toFixed(1)} % of all that reach it); of what it serves here (all but the tests listed as ${NOT_SERVED.join(", ")}): ${v.servedPassed} of ${v.served} (${((100 * v.servedPassed) / v.served).toFixed(1)} %)`);
      // Timing-sensitive upstream tests (a PTY's output, a watch's events) can miss on a loaded
      // 2-core box: up to FLAKE_ALLOWANCE unlisted failures are printed, more fail the test.
      if (v.unexpected.length > 0) console.warn(`upstream tests failing that py-expected-failures.json does not list:\n${v.unexpected.join("\n")}`);
      expect(v.unexpected.length, `upstream tests failing that py-expected-failures.json does not list:\n${v.unexpected.join("\n")}`).toBeLessThanOrEqual(FLAKE_ALLOWANCE);
      expect(v.nowPassing, "listed as failing in py-expected-failures.json but passing: remove them from the list").toEqual([]);
      expect(v.missing, "listed in py-expected-failures.json but not in the suite").toEqual([]);
      expect(v.uncategorized, "listed in py-expected-failures.json without a category (the reason's first word: run-upstream.ts)").toEqual([]);
      // The floor is for the listed gaps: load flakes are bounded by FLAKE_ALLOWANCE above.
      expect((v.servedPassed + v.unexpected.length) / v.served).toBeGreaterThanOrEqual(PASS_FLOOR);
      // Issue 37's bar, over all the tests that reach the server: where the fake internet is made, nothing is left out but header transforms.
      if (internet) expect((v.passed + v.unexpected.length) / v.total).toBeGreaterThanOrEqual(PASS_FLOOR);
    } finally {
      internet?.remove();
    }
  }, 900_000);

  it.skipIf(py.python === null)("a default Sandbox.create() from Python works against a default server", async () => {
    const server = await startE2bServerProcess();
    try {
      const { spawnSync } = await import("node:child_process");
      const script = [
        "from e2b import Sandbox",
        "s = Sandbox.create()",
        "print(s.commands.run('whoami').stdout.strip(), s.get_info().allow_internet_access)",
        "s.kill()",
        // What E2B's Python SDK up to 2.34 always sent: internet asked for, loopback given.
        "s = Sandbox.create(allow_internet_access=True)",
        "print(s.commands.run('echo ok').stdout.strip(), s.get_info().allow_internet_access)",
        "s.kill()",
      ].join("\n");
      const r = spawnSync(py.python!, ["-c", script], { env: { ...process.env, E2B_API_URL: server.url, E2B_SANDBOX_URL: server.url, E2B_API_KEY: server.apiKey }, encoding: "utf8", timeout: 120_000 });
      expect(r.stderr + r.stdout).toBe("user False\nok False\n");
    } finally {
      await server.stop();
    }
  }, 180_000);
});
