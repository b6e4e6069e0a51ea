/**
 * Issue 39, item 3: a reward (or hook) that throws is debuggable from the run's own output —
 * its stack, the env file's frames first, in the log and in the report's failed-groups panel,
 * and the failed trajectories' transcripts and reward calls in a sidecar the report links
 * (`<out>.failed.jsonl`), never in the training JSONL. Through the real command.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const PKG = pathToFileURL(join(ROOT, "dist", "src", "index.js")).href;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "reward-crash-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const { command, args: base } = slotpoolCommand();
  const child = spawn(command, [...base, ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
  return new Promise((resolve) => child.on("exit", (code) => resolve({ code, stdout, stderr })));
}

/** An env whose reward runs a command, then throws from a helper of its own file; its setup throws for item 1. */
async function crashingEnv(): Promise<string> {
  const path = join(dir, "crashing.mjs");
  await writeFile(
    path,
    `import { AgentEnv } from ${JSON.stringify(PKG)};
function parseVerdict(text) {
  throw new TypeError("grader crashed on " + JSON.stringify(text.trim()));
}
export default class Crashing extends AgentEnv {
  static envName = "crashing";
  next = 0;
  constructor(config = {}, runtime = {}) { super({ groupSize: 2, maxTurns: 3, pool: { slotsPerContainer: 2 }, ...config }, runtime); }
  getNextItem() { return { n: this.next++ }; }
  buildTask(item) { return "write " + item.n + " to out.txt"; }
  async setupWorkspace(item) { if (item.n === 1) throw new RangeError("no fixture for item 1"); }
  oracle(item) {
    return ({ turn }) => turn === 1 ? { toolCalls: [{ name: "bash", arguments: { command: "echo " + item.n + " > out.txt" } }] } : { final: "done" };
  }
  async computeReward(item, result, ctx) {
    const r = await ctx.terminal("cat out.txt");
    return parseVerdict(r.output);
  }
}
`,
  );
  return path;
}

describe("a reward that throws", () => {
  it("its stack (the env file's frames first) in the log and the report; its trajectories' transcripts and reward calls in out.failed.jsonl, linked from the report, never in the JSONL", async () => {
    const env = await crashingEnv();
    const out = join(dir, "crash.jsonl");
    const r = await run(["process", env, "--out", out, "--groups", "1", "--concurrency", "1", "--no-progress"]);
    expect(r.code, r.stderr).toBe(1);

    // The log: the warning once, its stack below it, the env file's frame before slotpool's.
    const lines = r.stderr.split("\n");
    const warn = lines.findIndex((l) => /WARN {2}the reward failed; the trajectory is not scored/.test(l));
    expect(warn).toBeGreaterThanOrEqual(0);
    const stack = lines.slice(warn + 1, warn + 12);
    expect(stack[0]).toMatch(/^\s+TypeError: grader crashed on "0"$/);
    expect(stack[1]).toMatch(/^\s+at parseVerdict \(file:\/\/.*crashing\.mjs:3:\d+\)$/);
    expect(stack[2]).toMatch(/^\s+at Crashing\.computeReward \(file:\/\/.*crashing\.mjs:\d+:\d+\)$/);
    expect(stack[3]).toMatch(/^\s+… then \d+ frames? of slotpool and node:$/);
    // Every try of the group failed alike: logged once, then counted.
    expect(lines.filter((l) => /WARN {2}the reward failed; the trajectory is not scored {2}trajectoryId=/.test(l))).toHaveLength(1);
    expect(r.stderr).toMatch(/the reward failed; the trajectory is not scored — × 6 in all/);

    // The training JSONL holds nothing of it.
    const training = await readFile(out, "utf8");
    expect(training).toBe("");

    // The sidecar: one line per unscored trajectory (2 per try × 3 tries), with why, the stack, the transcript and the reward's calls.
    const sidecar = join(dir, "crash.failed.jsonl");
    const failed = (await readFile(sidecar, "utf8")).trim().split("\n").map((l) => JSON.parse(l) as Record<string, any>);
    expect(failed).toHaveLength(6);
    expect(failed.map((f) => f["group_try"]).sort()).toEqual([1, 1, 2, 2, 3, 3]);
    for (const f of failed) {
      expect(f).toMatchObject({ cause: "reward", stage: "reward", message: 'grader crashed on "0"', item: { n: 0 } });
      expect(f["stack"]).toMatch(/^TypeError: grader crashed on "0"\n\s+at parseVerdict \(file:\/\/.*crashing\.mjs/);
      expect(f["messages"].some((m: any) => m.role === "tool")).toBe(true);
      expect(f["reward_calls"]).toEqual([expect.objectContaining({ tool: "bash", success: true, exit_code: 0, output: "0" })]);
    }

    // The summary points at it; the report shows the stack and links the sidecar by its name.
    expect(r.stdout).toMatch(/unscored\s+6 trajectories → .*crash\.failed\.jsonl \(why, stacks, transcripts, reward calls; not training data\)/);
    const html = await readFile(join(dir, "crash.html"), "utf8");
    expect(html).toContain("where the env's code threw (× 6): TypeError: grader crashed on &quot;0&quot;");
    expect(html).toMatch(/at parseVerdict \(file:\/\/[^<]*crashing\.mjs/);
    expect(html).toContain('<a href="crash.failed.jsonl">crash.failed.jsonl</a>');
  }, 120_000);

  it("a hook that throws (setupWorkspace): its group fails with the stack in the log, and the trajectories go to the sidecar with cause 'error'", async () => {
    const env = await crashingEnv();
    const out = join(dir, "hook.jsonl");
    // Item 0's reward also throws; item 1's setup throws first.
    const r = await run(["process", env, "--out", out, "--groups", "2", "--concurrency", "1", "--set", "infraRetries=0", "--no-progress"]);
    expect(r.code, r.stderr).toBe(1);
    const lines = r.stderr.split("\n");
    const err = lines.findIndex((l) => /ERROR group failed/.test(l));
    expect(err).toBeGreaterThanOrEqual(0);
    expect(lines[err + 1]).toMatch(/^\s+RangeError: no fixture for item 1$/);
    expect(lines[err + 2]).toMatch(/^\s+at Crashing\.setupWorkspace \(file:\/\/.*crashing\.mjs:\d+:\d+\)$/);
    const failed = (await readFile(join(dir, "hook.failed.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as Record<string, any>);
    const hook = failed.filter((f) => f["cause"] === "error");
    expect(hook).toHaveLength(2);
    expect(hook[0]).toMatchObject({ message: "no fixture for item 1", item: { n: 1 } });
    expect(hook[0]!["stack"]).toMatch(/at Crashing\.setupWorkspace \(file:\/\/.*crashing\.mjs/);
    expect(existsSync(out)).toBe(true);
    expect(await readFile(out, "utf8")).toBe("");
  }, 120_000);
});
