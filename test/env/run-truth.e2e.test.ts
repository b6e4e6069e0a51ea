/**
 * Issue 32: what a run tells its author is true. One `slotpool process` (the built CLI, local
 * provisioner, real sandbox servers) against a scripted model server that fails some calls
 * transiently and some past the retries, with a reward that fails for one trajectory of one
 * item every time: the summary's headline figures equal the JSONL's, the report's tiles equal
 * both, retried model calls and dropped group attempts are counted by cause, no
 * MaxListenersExceededWarning is printed, and a run without --tokenizer says its data has no
 * token ids.
 */
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
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
  dir = await mkdtemp(join(tmpdir(), "run-truth-"));
});
afterAll(async () => {
  await llm?.close();
  await rm(dir, { recursive: true, force: true });
});

function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const { command, args: base } = slotpoolCommand();
  return new Promise((done) => {
    const child = spawn(command, [...base, ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("exit", (code) => done({ code, stdout, stderr }));
  });
}

/**
 * Items 0..5, one per group of 4. Even items are solved (the model writes the number), odd ones
 * not. The reward of item 2 throws for the first trajectory it scores in each try of the group,
 * so that group is dropped (with 3 scored trajectories that must not count).
 */
const ENV = `import { AgentEnv } from ${JSON.stringify(PKG)};
export default class TruthEnv extends AgentEnv {
  static envName = "truth";
  next = 0;
  rewards = new Map();
  constructor(config = {}, runtime = {}) {
    super({ groupSize: 4, totalGroups: 6, maxTurns: 3, infraRetries: 1, pool: { slotsPerContainer: 16, maxContainers: 1 }, ...config }, runtime);
  }
  async getNextItem() { return { n: this.next++ }; }
  buildTask(item) { return "item " + item.n + ": write " + item.n + " to out.txt"; }
  async computeReward(item, result, ctx) {
    const k = (this.rewards.get(item.n) ?? 0) + 1;
    this.rewards.set(item.n, k);
    if (item.n === 2 && k % 4 === 1) throw new Error("grader crashed");
    const r = await ctx.readFile("out.txt");
    return r.ok && r.content.trim() === String(item.n) ? 1 : 0;
  }
}
`;

const HTML_PAGE = "<html><body>502 Bad Gateway</body></html>";

describe("the summary, the JSONL and the report tell the same story", () => {
  it("process against a flaky model: headline figures count what was written; retries, dropped attempts and failed groups have their own lines", async () => {
    const requestsByItem = new Map<number, number>();
    const failedOnce = new Set<string>();
    llm = await startLlmServer({
      respond: (body): ScriptedReply => {
        const n = Number(/^item (\d+)/.exec(taskOf(body))![1]);
        const turn = turnOf(body);
        if (turn === 1) {
          const seen = (requestsByItem.get(n) ?? 0) + 1;
          requestsByItem.set(n, seen);
          // Item 1: the first 8 turn-1 requests fail, i.e. each of the first try's 4 calls fails
          // on both its attempts (maxRetries 1): the try is dropped (cause model), the next one works.
          if (n === 1 && seen <= 8) return { status: 503 };
        }
        // Item 3: each turn's first request answers 200 with an HTML page (a proxy's): retried once.
        const key = `${n}:${turn}`;
        if (n === 3 && !failedOnce.has(key)) {
          failedOnce.add(key);
          return { status: 200, body: HTML_PAGE };
        }
        if (turn === 1) return { toolCalls: [{ name: "bash", arguments: { command: `echo ${n % 2 === 0 ? n : "wrong"} > out.txt` } }] };
        return { text: "done" };
      },
    });
    const envPath = join(dir, "truth-env.mjs");
    await writeFile(envPath, ENV);
    const out = join(dir, "truth.jsonl");
    const r = await runCli(["process", envPath, "--out", out, "--model-url", llm.url, "--model", "m", "--concurrency", "4", "--set", "model.maxRetries=1", "--no-progress"]);
    expect(r.code, r.stderr).toBe(1); // a group was dropped

    // The JSONL: 5 groups of 4 (item 2 dropped); items 0 and 4 solved.
    const lines = (await readFile(out, "utf8")).split("\n").filter(Boolean).map((l) => JSON.parse(l) as { scores: number[] });
    const scores = lines.flatMap((l) => l.scores);
    expect(lines).toHaveLength(5);
    expect(scores).toHaveLength(20);
    const solved = scores.filter((s) => s >= 1).length;
    const mean = scores.reduce((a, b) => a + b, 0) / scores.length;
    expect(solved).toBe(8);

    // The summary's headline equals the file.
    const s = r.stdout;
    expect(s).toMatch(/groups\s+6 made: 5 written, 1 failed, 1 of them dropped for infra failures, 0 filtered/);
    expect(s).toMatch(new RegExp(`trajectories\\s+${scores.length} written · 3 more finished in failed or filtered groups`));
    expect(s).toMatch(new RegExp(`success rate\\s+${((solved / scores.length) * 100).toFixed(1)}% \\(${solved} of ${scores.length} written`));
    expect(s).toMatch(new RegExp(`mean score\\s+${mean.toFixed(3)} \\(of the ${scores.length} written\\)`));
    expect(s).toMatch(/score distribution\s+0: 12 · 1: 8/);
    // Not written, each on its own line: 4 model failures (item 1's first try), 2 reward
    // failures (item 2's two tries); 3 dropped tries; 4 + 2 retried calls, 4 of them failed.
    expect(s).toMatch(/infra failures\s+6 trajectories not scored \(model 4, reward 2\)/);
    expect(s).toMatch(/group attempts dropped\s+3 \(model 1, reward 2\)/);
    expect(s).toMatch(/model calls\s+\d+ completed · 6 retried \(6 retries in all\) · 4 failed after retries/);
    expect(s).toMatch(/model latency p50\/p99\s+\d+(\.\d+)? (ms|s) \/ \d+(\.\d+)? (ms|s)/);
    expect(s).toMatch(/slot-loss restarts\s+0 trajectories restarted/);
    expect(llm.statuses.filter((x) => x === 503)).toHaveLength(8);

    // No token ids: said at the start and in the summary, naming --tokenizer.
    expect(r.stderr).toMatch(/warning: no --tokenizer: .*tokens and masks are empty.*--tokenizer path\/to\/tokenizer\.json/);
    expect(s).toMatch(/token ids\s+none for 20 of 20 written trajectories: .*--tokenizer/);
    // 16 trajectories in flight on one run signal: no listener warning.
    expect(r.stderr).not.toMatch(/MaxListenersExceededWarning/);

    // The report's tiles equal the file and the summary; what was not written has its own tiles.
    const html = await readFile(out.replace(/\.jsonl$/, ".html"), "utf8");
    const tile = (label: string) => new RegExp(`<div class="card[^"]*"><b>([^<]*)</b><span>${label}`).exec(html)?.[1];
    expect(tile("trajectories in")).toBe(String(scores.length));
    expect(tile("success rate")).toBe(`${((solved / scores.length) * 100).toFixed(1)}%`);
    expect(tile("mean score")).toBe(mean.toFixed(3));
    expect(tile("failed groups")).toBe("1");
    expect(tile("infra failures")).toBe("6");
    // The Run panel says the same.
    expect(html).toContain(`${((solved / scores.length) * 100).toFixed(1)}% (${solved} of ${scores.length} written`);
  }, 240_000);
});
