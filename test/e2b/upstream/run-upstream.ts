import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
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
      testResults: { name: string; assertionResults: { fullName: string; status: string; failureMessages: string[] }[] }[];
    };
    const outcomes: UpstreamOutcome[] = [];
    for (const file of parsed.testResults) {
      const rel = file.name.split("/test/e2b/upstream/js/")[1] ?? file.name;
      for (const t of file.assertionResults) {
        outcomes.push({ key: `${rel} :: ${t.fullName}`, passed: t.status === "passed", message: (t.failureMessages[0] ?? "").split("\n")[0]!.slice(0, 300) });
      }
    }
    return { outcomes, output };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
