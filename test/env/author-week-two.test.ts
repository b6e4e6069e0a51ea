/**
 * Issue 39, item 5: what a new env author met in their second week, each as it should be —
 * the tool calls of dropped tries counted the same in the summary and the report, "n/a" where
 * nothing was timed, no token-id warning for the oracle, each command's own help, and a hint
 * for a missing env file that fits a project of one's own. (The other items of 5 have their
 * tests beside the code they touch: cli-honest-results, model-breaker, docs-code, jobs-prune,
 * nomad-provisioner.contract, public-api, openenv/status, scripts/setup-python.)
 */
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentResult } from "../../src/agent/agent-loop.js";
import { runProcessMode } from "../../src/env/run-modes/process.js";
import { formatSummary } from "../../src/env/run-modes/summary.js";
import { RunStats } from "../../src/env/run-stats.js";
import type { ToolContext } from "../../src/env/tool-context.js";
import { silentLogger } from "../../src/observability/logger.js";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { fakeBackend } from "./support/fake-backend.js";
import { WriteFileEnv, type FileItem } from "./support/counting-env.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "week-two-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function run(args: string[], cwd = ROOT): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const { command, args: base } = slotpoolCommand();
  const child = spawn(command, [...base, ...args], { cwd, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  return new Promise((resolve) => child.on("exit", (code) => resolve({ code, stdout, stderr })));
}

/** Its reward fails the first try of each item (an infra failure: the group is dropped and tried again). */
class FlakyRewardEnv extends WriteFileEnv {
  private readonly tried = new Set<number>();
  override async computeReward(item: FileItem, result: AgentResult, ctx: ToolContext): Promise<number> {
    if (!this.tried.has(item.id)) {
      await new Promise((r) => setImmediate(r)); // both trajectories of the try get here before it is marked
      this.tried.add(item.id);
      throw new Error("grader crashed");
    }
    return super.computeReward(item, result, ctx);
  }
}

describe("the tool calls of dropped tries", () => {
  it("count in the summary and in the report's run panel alike: every call that ran (8), while the file holds 4", async () => {
    const backend = fakeBackend();
    const env = new FlakyRewardEnv({ groupSize: 2, groupConcurrency: 1 }, { backend, logger: silentLogger() });
    await env.start();
    const r = await runProcessMode(env, { out: join(dir, "dropped.jsonl"), groups: 2 });
    await env.close();
    expect(r.written).toBe(2);
    expect(r.stats.droppedAttempts).toBe(2);
    // 2 groups × 2 tries × 2 trajectories, one bash call each.
    const agentCalls = backend.executor.calls.filter((c) => String(c.call.arguments?.["command"]).startsWith("printf")).length;
    expect(agentCalls).toBe(8);
    expect(r.stats.toolCalls).toBe(8);
    expect(formatSummary("t", r.stats)).toMatch(/tool calls\s+8 \(every call that ran: written or not, dropped tries included\)/);
    const html = await readFile(r.report!.path, "utf8");
    expect(html).toContain('<td class="key">tool calls</td><td>8 (every call that ran: written or not, dropped tries included)</td>');
    expect(html).toContain("<b>4</b><span>tool calls in the file</span>");
  });
});

describe("the summary says n/a where nothing was measured", () => {
  it("no tool call, no workspace set up, no completed model call: n/a, never '0.0 ms'", () => {
    const stats = new RunStats();
    stats.modelSource = () => ({ completed: 0, retriedCalls: 0, retries: 0, failed: 3, latencyP50Ms: 0, latencyP99Ms: 0 });
    const table = formatSummary("t", stats);
    expect(table).toMatch(/tool latency p50\s+n\/a \(no tool call finished\)/);
    expect(table).toMatch(/tool latency p99\s+n\/a \(no tool call finished\)/);
    expect(table).toMatch(/workspace setup p50\/p99\s+n\/a \(no workspace was set up\)/);
    expect(table).toMatch(/model latency p50\/p99\s+n\/a \(no model call completed\)/);
    expect(table).not.toContain("0.0 ms");
  });
});

describe("the commands' own words", () => {
  it("the oracle policy gets no warning about token ids a model server did not return", async () => {
    const r = await run(["process", "examples/shell-tasks/env.js", "--out", join(dir, "oracle.jsonl"), "--groups", "1", "--group-size", "1", "--no-progress"]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stderr).not.toMatch(/warning: no --tokenizer/);
    expect(r.stderr).not.toContain("model server");
    // The summary still says what the JSONL holds.
    expect(r.stdout).toMatch(/token ids\s+none for 1 of 1 written trajectories/);
  }, 60_000);

  it("process, serve and evaluate each have help of their own: no flag text speaks of another command", async () => {
    const [p, s, e] = await Promise.all(["process", "serve", "evaluate"].map((c) => run([c, "--help"])));
    expect(p!.stdout).toMatch(/^usage: slotpool process ENV/);
    expect(p!.stdout).toMatch(/--groups N\s+groups to make \(default: the env's totalGroups, 8\)/);
    expect(p!.stdout).not.toMatch(/\(serve|groups to send|trainer's num_steps/);
    expect(s!.stdout).toMatch(/--groups N\s+groups to send, then stop \(default: until the trainer's num_steps\)/);
    expect(s!.stdout).not.toMatch(/\(process\)|--out FILE/);
    expect(e!.stdout).not.toMatch(/--groups|\(serve|\(process\)/);
  }, 60_000);

  it("a missing env file in a project of one's own: a hint for that project, not 'npm run build' of slotpool's repository", async () => {
    const project = join(dir, "my-envs");
    await import("node:fs/promises").then((fs) => fs.mkdir(project, { recursive: true }));
    await writeFile(join(project, "package.json"), JSON.stringify({ name: "my-envs", type: "module" }));
    const js = await run(["process", "build/my-env.js"], project);
    expect(js.code).toBe(2);
    expect(js.stderr).toMatch(/cannot find the env module 'build\/my-env\.js' \(looked at .*\); check the path \(it is relative to the working directory\)/);
    expect(js.stderr).not.toContain("npm run build");
    const ts = await run(["process", "my-env.ts"], project);
    expect(ts.code).toBe(2);
    expect(ts.stderr).toMatch(/a TypeScript env runs from its compiled \.js: compile it \(npx tsc\)/);
    // In slotpool's own checkout the examples are built by its npm run build: said there.
    const here = await run(["process", "examples/no-such/env.ts"]);
    expect(here.stderr).toContain("run 'npm run build' if it is a TypeScript file of this repo");
  }, 60_000);
});
