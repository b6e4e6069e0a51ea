import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** One upstream test's outcome, keyed as `file :: full name` (file relative to the suite's root). */
export interface UpstreamOutcome {
  key: string;
  passed: boolean;
  message: string;
}

/** Runs E2B's JS SDK tests (test/e2b/upstream/js) in their own vitest and returns every outcome. */
export async function runUpstreamJs(repo: string): Promise<{ outcomes: UpstreamOutcome[]; output: string }> {
  const dir = mkdtempSync(join(tmpdir(), "slotpool-e2b-upstream-"));
  const report = join(dir, "report.json");
  try {
    const output = await new Promise<string>((resolve) => {
      const child = spawn(process.execPath, [join(repo, "node_modules", "vitest", "vitest.mjs"), "run", "--config", join(repo, "test/e2b/upstream/js.vitest.config.ts"), "--reporter=json", `--outputFile=${report}`], {
        cwd: repo,
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      child.stderr.on("data", (d: Buffer) => (out += d.toString()));
      child.once("close", () => resolve(out));
    });
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
 * venv of scripts/setup-python.sh) against `server`, and returns every outcome from pytest's
 * JUnit report (a skip counts as not passed).
 */
export async function runUpstreamPython(repo: string, python: string, server: { url: string; apiKey: string; tls?: { caFile: string } | undefined }): Promise<{ outcomes: UpstreamOutcome[]; output: string }> {
  const dir = mkdtempSync(join(tmpdir(), "slotpool-e2b-upstream-py-"));
  const report = join(dir, "junit.xml");
  const root = join(repo, "test/e2b/upstream/python");
  try {
    const output = await new Promise<string>((resolve) => {
      // -p slotpool_localhost: `*.localhost` is loopback, as with systemd-resolved (https://get_host(port)).
      const child = spawn(python, ["-m", "pytest", "-p", "no:cacheprovider", "-p", "slotpool_localhost", "-q", "-n", "2", `--junitxml=${report}`, "-o", "junit_family=xunit1", root], {
        cwd: root,
        env: {
          ...process.env,
          E2B_API_URL: server.url,
          E2B_SANDBOX_URL: server.url,
          E2B_API_KEY: server.apiKey,
          E2B_DOMAIN: new URL(server.url).host,
          // The plugin lives beside the tests (pytest loads -p plugins before the ini's pythonpath).
          PYTHONPATH: [root, process.env["PYTHONPATH"]].filter(Boolean).join(":"),
          // httpx trusts the server's certificate (a throwaway CA's) for https://get_host(port).
          ...(server.tls ? { SSL_CERT_FILE: server.tls.caFile } : {}),
        },
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      child.stdout.on("data", (d: Buffer) => (out += d.toString()));
      child.stderr.on("data", (d: Buffer) => (out += d.toString()));
      child.once("close", () => resolve(out));
    });
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
 * lists: what slotpool does not serve yet or here (left out of the served pass rate), or what
 * it cannot be by design or what the SDK itself does (counted).
 */
export const NOT_SERVED = ["template-build", "task-image", "egress", "internet"] as const;
export const COUNTED = ["by-design", "sdk-mismatch"] as const;

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
