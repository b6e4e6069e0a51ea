/**
 * Env-layer benchmarks:
 *
 *  (a) main job throughput: the shell-tasks example env with its oracle policy on the local
 *      provisioner (real sandbox servers): groups/s, trajectories/s, tool latency p50/p99.
 *  (b) agent-loop overhead: one trajectory of N turns against the scripted LLM server with a
 *      no-op tool: ms per turn (HTTP round trip + parsing + bookkeeping), native and Hermes text.
 *
 * Run: npm run build && npx tsx test/bench/env-bench.ts
 * Knobs (env): BENCH_GROUPS (a: default 16), BENCH_GROUP_SIZE (a: default 8),
 * BENCH_CONCURRENCY (a: groups in flight, default 4), BENCH_TURNS (b: default 200).
 */
import ShellTasksEnv from "../../examples/shell-tasks/env.js";
import { ChatModelPolicy, runAgentLoop, type OpenAIFunctionTool } from "../../src/agent/index.js";
import { runProcessMode } from "../../src/env/run-modes/process.js";
import { silentLogger } from "../../src/observability/logger.js";
import { startLlmServer, turnOf } from "../support/llm-server.js";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";

const GROUPS = Number(process.env["BENCH_GROUPS"] ?? 16);
const GROUP_SIZE = Number(process.env["BENCH_GROUP_SIZE"] ?? 8);
const CONCURRENCY = Number(process.env["BENCH_CONCURRENCY"] ?? 4);
const TURNS = Number(process.env["BENCH_TURNS"] ?? 200);

async function mainJob(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "env-bench-"));
  const env = new ShellTasksEnv(
    { groupSize: GROUP_SIZE, groupConcurrency: CONCURRENCY, pool: { slotsPerContainer: 16, minContainers: Math.ceil((GROUP_SIZE * CONCURRENCY) / 16), maxContainers: Math.ceil((GROUP_SIZE * CONCURRENCY) / 16) + 1 } },
    { logger: silentLogger() },
  );
  const t0 = performance.now();
  await env.start();
  const startMs = performance.now() - t0;
  const t1 = performance.now();
  const report = await runProcessMode(env, { out: join(dir, "bench.jsonl"), groups: GROUPS });
  const s = (performance.now() - t1) / 1000;
  await env.close();
  await rm(dir, { recursive: true, force: true });
  const st = report.stats;
  console.log(
    `(a) main job: ${GROUPS} groups × ${GROUP_SIZE} (concurrency ${CONCURRENCY}): start ${startMs.toFixed(0)} ms, run ${s.toFixed(2)} s → ` +
      `${(GROUPS / s).toFixed(2)} groups/s, ${(st.trajectories / s).toFixed(1)} trajectories/s, ${st.toolCalls} tool calls, ` +
      `tool latency p50 ${st.latencyPercentile(50).toFixed(1)} ms p99 ${st.latencyPercentile(99).toFixed(1)} ms, success ${(st.successRate * 100).toFixed(1)}%`,
  );
}

async function loopOverhead(style: "native" | "hermes"): Promise<void> {
  const llm = await startLlmServer({
    respond: (b) =>
      turnOf(b) >= TURNS
        ? { text: "done" }
        : style === "native"
          ? { toolCalls: [{ name: "noop", arguments: { i: turnOf(b) } }] }
          : { text: `<tool_call>{"name": "noop", "arguments": {"i": ${turnOf(b)}}}</tool_call>` },
  });
  const tools: OpenAIFunctionTool[] = [{ type: "function", function: { name: "noop", description: "x", parameters: { type: "object", properties: {} } } }];
  const policy = new ChatModelPolicy({ baseUrl: llm.url, model: "m", toolCallFormat: style });
  const t0 = performance.now();
  const r = await runAgentLoop({
    policy,
    tools,
    messages: [{ role: "user", content: "go" }],
    maxTurns: TURNS,
    executeTool: async () => ({ success: true, output: "ok", error: "", metadata: {}, uniq_id: null }),
  });
  const ms = performance.now() - t0;
  await policy.close();
  await llm.close();
  console.log(`(b) agent loop (${style}): ${r.turnsUsed} turns in ${ms.toFixed(0)} ms → ${(ms / r.turnsUsed).toFixed(2)} ms/turn (conversation grows to ${r.messages.length} messages)`);
}

await mainJob();
await loopOverhead("native");
await loopOverhead("hermes");
