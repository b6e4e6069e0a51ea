import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runProcessMode } from "../../src/env/run-modes/process.js";
import { freeOutputPath } from "../../src/env/run-modes/output-path.js";
import { runEvaluateMode } from "../../src/env/run-modes/evaluate.js";
import { formatSummary } from "../../src/env/run-modes/summary.js";
import { pythonJsonDumps } from "../../src/env/atropos/python-json.js";
import { loadTokenizerJson, tokensFromTokenizer } from "../../src/env/tokens.js";
import { silentLogger } from "../../src/observability/logger.js";
import { fakeBackend } from "./support/fake-backend.js";
import { WriteFileEnv } from "./support/counting-env.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "run-modes-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("process mode", () => {
  it("writes one Atropos process-mode line per group and never overwrites an existing file", async () => {
    const out = join(dir, "groups.jsonl");
    await writeFile(out, "keep me\n");
    const backend = fakeBackend();
    const env = new WriteFileEnv({ groupSize: 2, totalGroups: 3, groupConcurrency: 2 }, { backend, logger: silentLogger() });
    await env.start();
    const seen: number[] = [];
    const report = await runProcessMode(env, { out, onGroup: (_o, s) => seen.push(s.groups) });
    await env.close();
    expect(report.out).toBe(join(dir, "groups_1.jsonl"));
    expect(report.report?.path).toBe(join(dir, "groups_1.html"));
    expect(await readFile(out, "utf8")).toBe("keep me\n");
    expect(seen).toEqual([1, 2, 3]);
    expect(report.written).toBe(3);
    expect(report.stats.successRate).toBe(1);
    expect(report.stats.toolCalls).toBe(6);
    // slots released after every trajectory
    expect(backend.executor.released).toHaveLength(6);

    const text = await readFile(report.out, "utf8");
    const lines = text.split("\n");
    expect(lines.pop()).toBe("");
    expect(lines).toHaveLength(3);
    for (const line of lines) {
      const g = JSON.parse(line) as Record<string, unknown>;
      // Python json.dumps separators, no env_id in process mode, the five explicit nulls
      expect(line).toBe(pythonJsonDumps(g));
      expect(line.startsWith('{"tokens": [[], []], "masks": [[], []], "scores": [1, 1], "messages": [[{"role": "system"') || line.startsWith('{"tokens": [[], []], "masks": [[], []], "scores": [1, 1], "messages": [[{"role": "user"')).toBe(true);
      // Atropos's keys, plus one optional key of ours for the report (Atropos's readers ignore unknown keys).
      expect(Object.keys(g).sort()).toEqual(["distill_logprobs", "distill_token_ids", "generation_params", "group_overrides", "masks", "messages", "overrides", "ref_logprobs", "scores", "slotpool", "tokens"]);
      const extras = g["slotpool"] as { version: number; trajectories: Array<{ tool_calls: Array<{ tool: string; duration_ms: number }>; attempts: number }> };
      expect(extras.version).toBe(1);
      expect(extras.trajectories).toHaveLength(2);
      expect(extras.trajectories[0]!.attempts).toBe(1);
      expect(extras.trajectories[0]!.tool_calls[0]!.duration_ms).toBeGreaterThanOrEqual(0);
      expect(g["ref_logprobs"]).toBeNull();
      expect((g["messages"] as unknown[][])[0]!.length).toBeGreaterThanOrEqual(4);
    }
  });

  it("python-style JSON keeps non-ASCII and uses ', ' and ': '", () => {
    expect(pythonJsonDumps({ a: [1, 2.5, "é✓"], b: { c: null, d: true } })).toBe('{"a": [1, 2.5, "é✓"], "b": {"c": null, "d": true}}');
    expect(freeOutputPath(join(dir, "nope.jsonl"))).toBe(join(dir, "nope.jsonl"));
  });

  it("counts failed groups with their reason instead of dropping them silently", async () => {
    const backend = fakeBackend();
    backend.executor.loseAllCalls = true;
    const env = new WriteFileEnv({ groupSize: 2, totalGroups: 1, slotLossRetries: 1, infraRetries: 0 }, { backend, logger: silentLogger() });
    env.setupWorkspace = async () => {};
    await env.start();
    const report = await runProcessMode(env, { out: join(dir, "failed.jsonl") });
    await env.close();
    expect(report.written).toBe(0);
    expect(report.stats.failedGroups).toBe(1);
    expect(report.stats.droppedGroups).toBe(1);
    expect(report.stats.infraFailures.slot_lost).toBe(2);
    expect(report.stats.slotLosses).toBe(4);
    expect(report.stats.retries).toBe(2);
    const table = formatSummary("t", report.stats);
    expect(table).toMatch(/groups\s+1 made: 0 written, 1 failed, 1 of them dropped for infra failures, 0 filtered/);
    expect(table).toMatch(/infra failures\s+2 trajectories not scored \(slot_lost 2\)/);
    expect(table).toMatch(/slot losses\s+4/);
    expect(table).toContain("trajectory lost its slot 2 times (slotLossRetries = 1)");
  });
});

describe("evaluate mode", () => {
  it("writes metrics.json shaped like evaluate_log and samples.jsonl", async () => {
    const env = new WriteFileEnv({ name: "wf" }, { backend: fakeBackend(), logger: silentLogger() });
    env.getEvalItems = async () => [0, 1, 2].map((id) => ({ id, path: `e${id}.txt`, content: `c${id}` }));
    await env.start();
    const seen: number[] = [];
    const report = await runEvaluateMode(env, { outDir: join(dir, "eval"), onTrajectory: (t) => seen.push(t.score) });
    await env.close();
    expect(seen).toEqual([1, 1, 1]);
    const metrics = JSON.parse(await readFile(report.metricsPath, "utf8")) as { config_general: Record<string, unknown>; results: Record<string, Record<string, number>> };
    expect(metrics.config_general).toMatchObject({ model_name: "oracle", generation_parameters: { max_new_tokens: 2048 } });
    expect(metrics.results["atropos|wf_eval|0"]).toMatchObject({ eval_items: 3, mean_score: 1, solve_rate: 1 });
    expect(metrics.results["all"]).toEqual(metrics.results["atropos|wf_eval|0"]);
    const samples = (await readFile(report.samplesPath, "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { score: number; messages: unknown[] });
    expect(samples).toHaveLength(3);
    expect(samples.every((s) => s.score === 1 && s.messages.length >= 4)).toBe(true);
  });
});

describe("tokens from a local tokenizer.json", () => {
  it("loads a HF tokenizer.json offline and masks everything but the assistant's output", async () => {
    const vocab: Record<string, number> = { "[UNK]": 0, "<|im_start|>": 1, "<|im_end|>": 2, user: 3, assistant: 4, hi: 5, there: 6, "\n": 7 };
    const tokenizerJson = {
      version: "1.0",
      truncation: null,
      padding: null,
      added_tokens: [
        { id: 1, content: "<|im_start|>", single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
        { id: 2, content: "<|im_end|>", single_word: false, lstrip: false, rstrip: false, normalized: false, special: true },
      ],
      normalizer: null,
      pre_tokenizer: { type: "Whitespace" },
      post_processor: null,
      decoder: null,
      model: { type: "WordLevel", vocab, unk_token: "[UNK]" },
    };
    const path = join(dir, "tokenizer.json");
    await writeFile(path, JSON.stringify(tokenizerJson));
    const tok = await loadTokenizerJson(path);
    expect(tok.encode("<|im_start|>user hi<|im_end|>")).toEqual([1, 3, 5, 2]);
    const seq = tokensFromTokenizer(
      [
        { role: "user", content: "hi" },
        { role: "assistant", content: "there" },
      ],
      tok,
    );
    expect(seq.source).toBe("tokenizer");
    expect(seq.tokens).toEqual([1, 3, 5, 2, 1, 4, 6, 2]);
    expect(seq.masks).toEqual([-100, -100, -100, -100, -100, -100, 6, 2]);
    expect(seq.logprobs).toBeUndefined();
    await expect(loadTokenizerJson(join(dir, "missing.json"))).rejects.toThrow(/cannot read tokenizer .*tokenizer.json file/);
  });
});
