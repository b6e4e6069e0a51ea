/**
 * Issue 32 item 8: the partial summary of a run stopped by Ctrl-C adds up. One `slotpool
 * process` (the built CLI, local provisioner, real sandbox servers) against a scripted model:
 * item 0's first try fails on the model past its retries (2 infra failures, the try dropped),
 * then every trajectory runs one quick command and starts a `sleep 30`. Ctrl-C (SIGINT to the
 * whole process group, as a terminal sends it) comes while the sleeps run: the summary counts
 * the infra failures, the dropped try, the 4 commands that ran and the 4 that were cut, and
 * no "slot reset failed" warning is printed (a reset cut by the shutdown is expected).
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { startLlmServer, taskOf, turnOf, type LlmServer, type ScriptedReply } from "../support/llm-server.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const PKG = pathToFileURL(join(ROOT, "dist", "src", "index.js")).href;

let dir: string;
let llm: LlmServer | undefined;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "interrupted-run-"));
});
afterAll(async () => {
  await llm?.close();
  await rm(dir, { recursive: true, force: true });
});

const ENV = `import { AgentEnv } from ${JSON.stringify(PKG)};
export default class CutEnv extends AgentEnv {
  static envName = "cut";
  next = 0;
  constructor(config = {}, runtime = {}) {
    super({ groupSize: 2, totalGroups: 2, maxTurns: 4, infraRetries: 2, pool: { slotsPerContainer: 8, maxContainers: 1 }, ...config }, runtime);
  }
  async getNextItem() { return { n: this.next++ }; }
  buildTask(item) { return "item " + item.n; }
  async computeReward() { return 1; }
}
`;

describe("a run stopped by Ctrl-C", () => {
  it("prints a partial summary that counts what ran and what was cut, without 'slot reset failed' warnings", async () => {
    let item0Turn1 = 0;
    let sleeping = 0;
    llm = await startLlmServer({
      respond: (body): ScriptedReply => {
        const n = Number(/^item (\d+)/.exec(taskOf(body))![1]);
        const turn = turnOf(body);
        // Item 0's first try: both trajectories' first calls fail on both attempts (maxRetries 1).
        if (n === 0 && turn === 1 && ++item0Turn1 <= 4) return { status: 503 };
        if (turn === 1) return { toolCalls: [{ name: "bash", arguments: { command: "echo ran > ran.txt" } }] };
        if (turn === 2) {
          sleeping++;
          return { toolCalls: [{ name: "bash", arguments: { command: "sleep 30" } }] };
        }
        return { text: "done" };
      },
    });
    const envPath = join(dir, "cut-env.mjs");
    await writeFile(envPath, ENV);
    const out = join(dir, "cut.jsonl");
    const { command, args } = slotpoolCommand();
    // Its own process group, so the SIGINT below reaches the CLI and everything it started, as Ctrl-C does.
    const child = spawn(command, [...args, "process", envPath, "--out", out, "--model-url", llm.url, "--model", "m", "--concurrency", "2", "--set", "model.maxRetries=1", "--no-progress"], {
      cwd: ROOT,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
    });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((done) => child.on("exit", (code) => done(code)));

    // All four trajectories (item 0's second try, item 1) have started their sleep.
    const deadline = Date.now() + 90_000;
    while (sleeping < 4) {
      if (Date.now() > deadline) throw new Error(`the trajectories did not reach their sleep (${sleeping} of 4); stderr:\n${stderr}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    // wait: each sleep call travelling from the model's answer to its slot (no event from the CLI shows it running); cut before it runs, the counts below would differ
    await new Promise((r) => setTimeout(r, 1_500));
    process.kill(-child.pid!, "SIGINT");
    const code = await exited;

    expect(code, stderr).toBe(130);
    expect(stderr).toMatch(/SIGINT: stopping \(partial summary follows/);
    expect(stdout).toMatch(/groups\s+0 made: 0 written, 0 failed, 0 filtered; 2 more cut by the interrupt/);
    expect(stdout).toMatch(/trajectories\s+0 written · 4 cut by the interrupt before they finished/);
    // Item 0's first try: two model failures, that try dropped.
    expect(stdout).toMatch(/infra failures\s+2 trajectories not scored \(model 2\)/);
    expect(stdout).toMatch(/group attempts dropped\s+1 \(model 1\)/);
    // Each of the 4 trajectories ran its echo; its sleep was cut.
    expect(stdout).toMatch(/tool calls\s+4 ran \(every trajectory, written or not, those cut by the interrupt included\) · 4 cut by the interrupt while running/);
    expect(stdout).toMatch(/stopped early\s+interrupted|interrupted/);
    expect(stderr).not.toMatch(/slot reset failed/);
    expect(stderr).not.toMatch(/releasing the slot failed/);
  }, 180_000);
});
