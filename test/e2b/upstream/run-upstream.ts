import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { FakeInternet } from "./fake-internet.js";

/** One upstream test's outcome, keyed as `file :: full name` (file relative to the suite's root). */
export interface UpstreamOutcome {
  key: string;
  passed: boolean;
  message: string;
}

/**
 * `command args` as a child (in the fake internet's namespaces when there is one: the child and
 * all it starts), its stdout and stderr together once it ends.
 */
function runChild(command: string, args: string[], cwd: string, internet: FakeInternet | undefined, env: NodeJS.ProcessEnv = process.env): Promise<string> {
  const run = internet ? internet.wrap(command, args) : { command, args };
  return new Promise<string>((resolve) => {
    // stdin a pipe that closes when this process ends: python-suite.ts then stops its server.
    const child = spawn(run.command, run.args, { cwd, env, stdio: ["pipe", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    child.once("close", () => resolve(out));
  });
}

/**
 * Runs E2B's JS SDK tests (test/e2b/upstream/js) in their own vitest and returns every outcome.
 * With `internet` (fake-internet.ts), that vitest, the server its global setup starts and the
 * sandboxes run in the fake internet, and the server gives sandboxes the network.
 */
export async function runUpstreamJs(repo: string, internet?: FakeInternet): Promise<{ outcomes: UpstreamOutcome[]; output: string }> {
  const dir = mkdtempSync(join(tmpdir(), "slotpool-e2b-upstream-"));
  const report = join(dir, "report.json");
  try {
    const args = [join(repo, "node_modules", "vitest", "vitest.mjs"), "run", "--config", join(repo, "test/e2b/upstream/js.vitest.config.ts"), "--reporter=json", `--outputFile=${report}`];
    const output = await runChild(process.execPath, args, repo, internet, { ...process.env, ...(internet ? { SLOTPOOL_UPSTREAM_INTERNET: "1" } : {}) });
    const parsed = JSON.parse(readFileSync(report, "utf8")) as {
      testResults: { name: string; status: string; message?: string; assertionResults: { fullName: string; status: string; failureMessages: string[] }[] }[];
    };
    const outcomes: UpstreamOutcome[] = [];
    for (const file of parsed.testResults) {
      const rel = file.name.split("/test/e2b/upstream/js/")[1] ?? file.name;
      // A file that fails to load runs no test: counted as one failure, never silently dropped.
      if (file.assertionResults.length === 0 && file.status === "failed") outcomes.push({ key: `${rel} :: (the file did not load)`, passed: false, message: (file.message ?? "").split("\n")[0]!.slice(0, 300) });
      for (const t of file.assertionResults) {
        outcomes.push({ key: `${rel} :: ${t.fullName}`, passed: t.status === "passed", message: (t.failureMessages[0] ?? "").split("\n")[0]!.slice(0, 300) });
      }
    }
    return { outcomes, output };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Runs E2B's Python SDK tests (test/e2b/upstream/python) with pytest from `python` (the
 * venv of scripts/setup-python.sh) against a server of their own (python-suite.ts starts it,
 * in the fake internet with `internet`), and returns every outcome from pytest's JUnit report
 * (a skip counts as not passed).
 */
export async function runUpstreamPython(repo: string, python: string, internet?: FakeInternet): Promise<{ outcomes: UpstreamOutcome[]; output: string }> {
  const dir = mkdtempSync(join(tmpdir(), "slotpool-e2b-upstream-py-"));
  const report = join(dir, "junit.xml");
  try {
    const script = join(dirname(fileURLToPath(import.meta.url)), "python-suite.ts");
    const output = await runChild(process.execPath, ["--import", "tsx", script, python, report, ...(internet ? ["--internet"] : [])], repo, internet);
    if (!existsSync(report)) throw new Error(`pytest wrote no report:\n${output.slice(-4000)}`);
    const xml = readFileSync(report, "utf8");
    const outcomes: UpstreamOutcome[] = [];
    for (const m of xml.matchAll(/<testcase\b([^>]*?)(\/>|>([\s\S]*?)<\/testcase>)/g)) {
      const attr = (name: string) => new RegExp(`\\b${name}="([^"]*)"`).exec(m[1]!)?.[1] ?? "";
      const body = m[3] ?? "";
      const problem = /<(failure|error|skipped)\b[^>]*?message="([^"]*)"/.exec(body);
      const failed = /<(failure|error|skipped)\b/.test(body);
      outcomes.push({ key: `${attr("file") || attr("classname")} :: ${attr("name")}`, passed: !failed, message: (problem?.[2] ?? "").slice(0, 300) });
    }
    return { outcomes, output };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Why a listed upstream test fails, the first word of its reason in the expected-failures
 * lists: what slotpool does not serve yet or here (left out of the served pass rate: `egress`,
 * header transforms not built; `internet`, listed only where the fake internet cannot be made,
 * `listedHere`), or what it cannot be by design or what the SDK itself does (counted).
 */
export const NOT_SERVED = ["egress", "internet"] as const;
export const COUNTED = ["by-design", "sdk-mismatch"] as const;

/**
 * The list as it holds on this run: the tests listed as `internet` need the fake internet
 * (fake-internet.ts: root only); where it is made, they must pass, so they are not listed.
 */
export function listedHere(expected: Record<string, string>, fakeInternet: boolean): Record<string, string> {
  return fakeInternet ? Object.fromEntries(Object.entries(expected).filter(([, why]) => why.split(":")[0] !== "internet")) : expected;
}

export interface Verdict {
  passed: number;
  total: number;
  /** Tests of what slotpool serves here: all but those listed with a NOT_SERVED reason. */
  servedPassed: number;
  served: number;
  unexpected: string[];
  nowPassing: string[];
  missing: string[];
  /** Listed reasons without a known category. */
  uncategorized: string[];
}

/**
 * Holds `outcomes` to the list: failures not listed, listed tests that pass or are not in the
 * suite. With SLOTPOOL_UPSTREAM_FAILURES=FILE the failing tests are written there (key →
 * message), the list's starting point after a change.
 */
export function judge(outcomes: UpstreamOutcome[], expected: Record<string, string>): Verdict {
  const failing = new Set(outcomes.filter((o) => !o.passed).map((o) => o.key));
  const out = process.env["SLOTPOOL_UPSTREAM_FAILURES"];
  if (out) writeFileSync(out, JSON.stringify(Object.fromEntries(outcomes.filter((o) => !o.passed).map((o) => [o.key, o.message])), null, 2));
  const category = (key: string): string | undefined => expected[key]?.split(":")[0];
  const notServed = (key: string): boolean => (NOT_SERVED as readonly string[]).includes(category(key) ?? "");
  const served = outcomes.filter((o) => !notServed(o.key));
  return {
    passed: outcomes.filter((o) => o.passed).length,
    total: outcomes.length,
    servedPassed: served.filter((o) => o.passed).length,
    served: served.length,
    unexpected: outcomes.filter((o) => !o.passed && !(o.key in expected)).map((o) => `${o.key}: ${o.message}`),
    nowPassing: Object.keys(expected).filter((k) => !failing.has(k) && outcomes.some((o) => o.key === k)),
    missing: Object.keys(expected).filter((k) => !outcomes.some((o) => o.key === k)),
    uncategorized: Object.entries(expected).filter(([, why]) => ![...NOT_SERVED, ...COUNTED].includes(why.split(":")[0] as never)).map(([k]) => k),
  };
}
