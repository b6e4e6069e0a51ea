/**
 * Issue 39, item 2: a model server that dies mid-run stops `process` and `evaluate` (the model
 * breaker), instead of failing every remaining group for hours: after `modelBreakerFailures`
 * trajectories in a row lost their model calls, the server is re-probed; then the run stops
 * with exit 1 and a summary line saying why, and the warning every trajectory repeats is
 * logged once and counted ("× N").
 */
import { spawn } from "node:child_process";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ModelBreaker } from "../../src/env/model-breaker.js";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const PKG = pathToFileURL(join(ROOT, "dist", "src", "index.js")).href;

const modelFailure = { infraFailure: { cause: "model" as const, message: "chat completion request failed: other side closed" } };
const fine = {};
const aborted = (b: ModelBreaker) => new Promise<void>((resolve) => b.signal.addEventListener("abort", () => resolve(), { once: true }));

describe("the model breaker", () => {
  it("after N trajectories in a row lost their model calls it re-probes; a probe that fails trips it, with the probe's answer in the reason", async () => {
    let probes = 0;
    const b = new ModelBreaker({ failures: 3, url: "http://127.0.0.1:9/v1", probe: async () => {
        probes++;
        throw new Error("connection refused");
      },
    });
    b.observe(modelFailure);
    b.observe(modelFailure);
    b.observe(fine); // a trajectory whose model calls all succeeded ends the streak
    b.observe(modelFailure);
    b.observe(modelFailure);
    expect(probes).toBe(0);
    const stopped = aborted(b);
    b.observe(modelFailure);
    await stopped;
    expect(probes).toBe(1);
    expect(b.reason).toBe("the model server at http://127.0.0.1:9/v1 stopped answering: 3 trajectories in a row failed their model calls (last: chat completion request failed: other side closed); re-probed: connection refused");
  });

  it("a probe that passes lets the run go on; a second streak after it trips the breaker anyway (the server lists its models but cannot complete)", async () => {
    let probes = 0;
    let passed!: () => void;
    const probeDone = new Promise<void>((r) => (passed = r));
    const b = new ModelBreaker({
      failures: 2,
      url: "http://m/v1",
      probe: async () => {
        probes++;
        if (probes === 1) setImmediate(passed);
      },
    });
    b.observe(modelFailure);
    b.observe(modelFailure);
    await probeDone;
    await new Promise((r) => setImmediate(r));
    expect(b.signal.aborted).toBe(false);
    const stopped = aborted(b);
    b.observe(modelFailure);
    b.observe(modelFailure);
    await stopped;
    expect(probes).toBe(2);
    expect(b.reason).toMatch(/^the model server at http:\/\/m\/v1 lists its models, but 2 trajectories in a row failed their model calls, twice in a row/);
  });
});

describe("a model server that dies mid-run (the real command)", () => {
  let dir: string;
  let server: Server;
  let url: string;
  let chatCalls = 0;
  /** Answers the model list and 2 chat calls, then drops every connection, as a crashed server behind a proxy would. */
  const ANSWERED = 2;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "model-breaker-"));
    server = createServer((req, res) => {
      const dead = chatCalls >= ANSWERED;
      if (req.url?.endsWith("/models") && !dead) {
        res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ object: "list", data: [{ id: "m", object: "model" }] }));
        return;
      }
      if (dead) {
        req.socket.destroy();
        return;
      }
      chatCalls++;
      req.resume();
      req.on("end", () =>
        res.writeHead(200, { "content-type": "application/json" }).end(
          JSON.stringify({ id: "c", object: "chat.completion", model: "m", choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "done" } }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }),
        ),
      );
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
    await rm(dir, { recursive: true, force: true });
  });

  async function envFile(): Promise<string> {
    const path = join(dir, "dies.mjs");
    await writeFile(
      path,
      `import { AgentEnv } from ${JSON.stringify(PKG)};
export default class Dies extends AgentEnv {
  static envName = "dies";
  next = 0;
  constructor(config = {}, runtime = {}) { super({ groupSize: 2, maxTurns: 2, pool: { slotsPerContainer: 2 }, ...config }, runtime); }
  getNextItem() { return { n: this.next++ }; }
  async getEvalItems() { return Array.from({ length: 30 }, (_, n) => ({ n })); }
  buildTask(item) { return "say done " + item.n; }
  async computeReward() { return 1; }
}
`,
    );
    return path;
  }

  function run(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const { command, args: base } = slotpoolCommand();
    const child = spawn(command, [...base, ...args], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    return new Promise((resolve) => child.on("exit", (code) => resolve({ code, stdout, stderr })));
  }

  it("process: stops after the breaker's streak with exit 1 and 'stopped early', groups far short of --groups; the repeated warning once, counted", async () => {
    chatCalls = 0;
    const out = join(dir, "dies.jsonl");
    // maxRetries 0: each model call fails at once, so the streak is reached in seconds.
    const r = await run(["process", await envFile(), "--out", out, "--model-url", url, "--model", "m", "--groups", "40", "--concurrency", "1", "--set", "model.maxRetries=0", "--set", "modelBreakerFailures=4", "--no-progress"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toMatch(/stopped early\s+the model server at http:\/\/127\.0\.0\.1:\d+\/v1 stopped answering: 4 trajectories in a row failed their model calls \(last: the model server failed on turn 1: .*\); re-probed: model server http:\/\/127\.0\.0\.1:\d+\/v1\/models did not answer/);
    expect(r.stderr.trim().split("\n").at(-1)).toMatch(/^slotpool process: stopped early: the model server at .* stopped answering/);
    const made = Number(/groups\s+(\d+) made/.exec(r.stdout)![1]);
    expect(made).toBeLessThan(10);
    // The first group's answers were written; the rest of the 40 never started.
    expect((await readFile(out, "utf8")).split("\n").filter(Boolean).length).toBeGreaterThanOrEqual(1);
    // Each trajectory logged the same warning: once in full, then its count.
    const full = r.stderr.split("\n").filter((l) => /WARN {2}model call failed; the trajectory is not scored {2}/.test(l));
    expect(full).toHaveLength(1);
    expect(r.stderr).toMatch(/model call failed; the trajectory is not scored — × \d+ in all/);
    // And the summary's failed groups, each reason once with its count.
    const failedLines = r.stdout.slice(r.stdout.indexOf("failed groups:")).split("\n").filter((l) => l.startsWith("  - "));
    expect(new Set(failedLines).size).toBe(failedLines.length);
  }, 120_000);

  it("evaluate: stops the same way, items not started are skipped", async () => {
    chatCalls = 0;
    const r = await run(["evaluate", await envFile(), "--out-dir", join(dir, "eval"), "--model-url", url, "--model", "m", "--concurrency", "1", "--set", "model.maxRetries=0", "--set", "modelBreakerFailures=4", "--no-progress"]);
    expect(r.code, r.stderr).toBe(1);
    expect(r.stdout).toMatch(/stopped early\s+the model server at .* stopped answering: 4 trajectories in a row failed their model calls/);
    const metrics = JSON.parse(await readFile(join(dir, "eval", "metrics.json"), "utf8")) as { results: { all: Record<string, number> } };
    const samples = (await readFile(join(dir, "eval", "samples.jsonl"), "utf8")).split("\n").filter(Boolean).length;
    expect(metrics.results.all["eval_items"]).toBe(30);
    expect(metrics.results.all["eval_failed"]! + samples).toBeLessThan(30);
  }, 120_000);
});
