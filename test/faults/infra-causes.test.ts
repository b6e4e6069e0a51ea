/**
 * Issue 29: one rule for infrastructure failures. Driven through the real `slotpool` command
 * (built CLI, local provisioner, real sandbox servers with bubblewrap), with faults injected
 * in the sandbox servers (SLOTPOOL_TEST_FAULTS_DIR, src/sandbox/tools/test-faults.ts): a
 * sandbox that does not start, a server shut down (SIGINT) mid-command and a slot reset from
 * outside mid-command, each in setupWorkspace, in an agent's tool call and in the reward's
 * ToolContext. Each must become an infra failure of its cause, the group dropped and its item
 * tried again: never a zero in the JSONL, never shown to the policy; summary, JSONL and
 * /metrics count them by cause.
 */
import { spawn } from "node:child_process";
import { mkdtemp, mkdir, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const PKG = pathToFileURL(join(ROOT, "dist", "src", "index.js")).href;

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "infra-causes-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/**
 * Items {n}: setupWorkspace writes setup.txt, the oracle's one bash call writes out.txt, the
 * reward reads both with ctx.terminal and scores 1 only if both are right. Every command
 * names its place (setup-N, tool-N, reward-N) so a fault can pick it, and lasts 1 s so a
 * fault fired 300 ms in finds it running. The policy records every tool result it is shown.
 */
async function fixtureEnv(gate: string): Promise<string> {
  const path = join(dir, "env.mjs");
  await writeFile(
    path,
    `import { existsSync, appendFileSync } from "node:fs";
import { AgentEnv } from ${JSON.stringify(PKG)};
export default class Fixture extends AgentEnv {
  static envName = "infra-causes";
  next = 0;
  constructor(config = {}, runtime = {}) {
    super({ groupSize: 1, maxTurns: 3, pool: { slotsPerContainer: 2 }, ...config }, runtime);
  }
  async getNextItem() {
    const n = this.next++;
    // The last item waits until the test has read /metrics.
    if (n === 6) while (!existsSync(${JSON.stringify(gate)})) await new Promise((r) => setTimeout(r, 50));
    return { n };
  }
  buildTask(item) { return "write " + item.n + " to out.txt"; }
  async setupWorkspace(item, ctx) {
    await ctx.terminal("echo ready > setup.txt; sleep 1 # setup-" + item.n);
  }
  oracle(item) {
    return ({ turn, messages }) => {
      if (turn > 1) appendFileSync(${JSON.stringify(join(dir, "shown.txt"))}, messages[messages.length - 1].content + "\\n");
      return turn === 1 ? { toolCalls: [{ name: "bash", arguments: { command: "echo " + item.n + " > out.txt; sleep 1 # tool-" + item.n } }] } : { final: "done" };
    };
  }
  async computeReward(item, result, ctx) {
    const r = await ctx.terminal("cat setup.txt out.txt; sleep 1 # reward-" + item.n);
    return r.exitCode === 0 && r.output.trim() === "ready\\n" + item.n ? 1 : 0;
  }
}
`,
  );
  return path;
}

async function waitFor<T>(what: string, check: () => Promise<T | undefined>, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await check().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

describe("infra failures in setupWorkspace, tool calls and the reward", () => {
  it("a sandbox that does not start, a server shut down mid-command and an outside reset: each an infra failure of its cause, retried, never a 0; summary, JSONL and /metrics count them", async () => {
    const faults = join(dir, "faults");
    await mkdir(faults);
    const planted: Array<[string, string]> = [
      ["sandbox_start", "setup-0"],
      ["sandbox_start", "tool-1"],
      ["sandbox_start", "reward-2"],
      ["shutdown", "setup-3"],
      ["shutdown", "tool-4"],
      ["shutdown", "reward-5"],
      ["reset", "tool-6"],
    ];
    for (const [i, [kind, marker]] of planted.entries()) await writeFile(join(faults, `f${i}`), `${kind} ${marker}`);
    const gate = join(dir, "gate");
    const env = await fixtureEnv(gate);
    const out = join(dir, "out.jsonl");
    const { command, args } = slotpoolCommand();
    const child = spawn(command, [...args, "process", env, "--out", out, "--groups", "7", "--concurrency", "1", "--no-progress", "--metrics-port", "0"], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"],
      env: { ...process.env, SLOTPOOL_TEST_FAULTS_DIR: faults },
    });
    let stdout = "";
    let stderr = "";
    child.stdout!.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr!.on("data", (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    try {
      const url = await waitFor("the metrics URL", async () => /metrics at (\S+)/.exec(stderr)?.[1], 60_000);
      // Items 0-5 done: three sandbox_start and three server_shutdown failures, by stage.
      const metrics = await waitFor("six infra failures in /metrics", async () => {
        const body = await (await fetch(url)).text();
        return body.includes('slotpool_env_infra_failures{cause="server_shutdown"} 3') && body.includes('slotpool_env_infra_failures{cause="sandbox_start"} 3') ? body : undefined;
      }, 150_000);
      expect(metrics).toContain('slotpool_env_infra_failures_by_stage{stage="setup"} 2');
      expect(metrics).toContain('slotpool_env_infra_failures_by_stage{stage="tool"} 2');
      expect(metrics).toContain('slotpool_env_infra_failures_by_stage{stage="reward"} 2');
      expect(metrics).toContain('slotpool_env_infra_failures{cause="reward_tool"} 0');
      await writeFile(gate, "");
      const code = await waitFor("the run's end", async () => ((await Promise.race([exited, new Promise((r) => setTimeout(r, 100, "running"))])) === "running" ? undefined : [await exited]), 90_000);
      expect(code[0], `${stdout}\n${stderr}`).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
    expect(await readdir(faults), "every planted fault fired").toEqual([]);
    const lines = (await readFile(out, "utf8")).split("\n").filter(Boolean).map((l) => JSON.parse(l) as Record<string, any>);
    expect(lines).toHaveLength(7);
    const causes: Record<string, number> = {};
    for (const l of lines) {
      expect(l["scores"], "an infra failure must never be written as a score").toEqual([1]);
      expect(l["slotpool"]["dropped_attempts"]).toBe(1);
      for (const [c, n] of Object.entries(l["slotpool"]["infra_failures"] as Record<string, number>)) causes[c] = (causes[c] ?? 0) + n;
    }
    expect(causes).toMatchObject({ sandbox_start: 3, server_shutdown: 3, command_killed: 1, reward_tool: 0, reward: 0, slot_lost: 0 });
    expect(stdout).toMatch(/infra failures\s+7 trajectories not scored \(sandbox_start 3, command_killed 1, server_shutdown 3\)/);
    expect(stdout).toMatch(/infra failures in\s+setup 2 · tool 3 · reward 2/);
    expect(stdout).toMatch(/success rate\s+100\.0% \(7 of 7 written with score ≥ 1\)/);
    // The policy was never shown a result the infrastructure decided.
    const shown = existsSync(join(dir, "shown.txt")) ? await readFile(join(dir, "shown.txt"), "utf8") : "";
    expect(shown).not.toMatch(/could not start the command|command killed|shutting down/);
    // One result per written trajectory, plus the two whose tool call ran before their reward was cut off.
    expect(shown.trim().split("\n")).toHaveLength(9);
  }, 300_000);
});
