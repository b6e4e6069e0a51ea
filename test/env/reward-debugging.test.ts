/**
 * Issue 32, items 3 and 4: the agent's tool calls and the reward's own commands have separate,
 * documented timeouts (30 s and 60 s by default), and what the reward ran — each call, its
 * output and exit code — is recorded with the trajectory: in the JSONL line and the report.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { runProcessMode } from "../../src/env/run-modes/process.js";
import { REWARD_OUTPUT_KEPT } from "../../src/env/reward-calls.js";
import { silentLogger } from "../../src/observability/logger.js";
import type { AgentResult } from "../../src/agent/agent-loop.js";
import type { ToolContext } from "../../src/env/tool-context.js";
import { fakeBackend } from "./support/fake-backend.js";
import { WriteFileEnv, type FileItem } from "./support/counting-env.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "reward-debugging-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** A reward that runs "hidden tests" (here: cat and a long echo) and scores by their exit code. */
class HiddenTestEnv extends WriteFileEnv {
  override async computeReward(item: FileItem, _result: AgentResult, ctx: ToolContext): Promise<number> {
    const r = await ctx.terminal(`cat ${item.path}`);
    await ctx.terminal(`echo ${"x".repeat(REWARD_OUTPUT_KEPT * 2)}`);
    const missing = await ctx.terminal("cat no-such-file");
    return r.exitCode === 0 && missing.exitCode === 1 ? 1 : 0;
  }
}

describe("defaults an env author can live with", () => {
  it("an agent's tool call times out after 30 s unless configured, the reward's commands after 60 s (each its own setting)", () => {
    const c = AgentEnvConfigSchema.parse({});
    expect(c.executor.defaultTimeoutS).toBe(30);
    expect(c.rewardTimeoutS).toBe(60);
    expect(() => AgentEnvConfigSchema.parse({ rewardTimeoutS: 601 })).toThrow();
  });
});

describe("reward debugging", () => {
  it("the reward's own calls reach the executor with the reward timeout, and their output and exit codes are in the JSONL and the report (cut)", async () => {
    const backend = fakeBackend();
    const env = new HiddenTestEnv({ groupSize: 2, totalGroups: 1, rewardTimeoutS: 45, executor: { defaultTimeoutS: 20 } }, { backend, logger: silentLogger() });
    await env.start();
    const out = join(dir, "hidden.jsonl");
    const r = await runProcessMode(env, { out });
    await env.close();
    expect(r.written).toBe(1);

    // The agent's call (printf) got the tool timeout; the reward's (cat, echo) the reward timeout.
    const byCommand = (re: RegExp) => backend.executor.calls.filter((c) => re.test(String(c.call.arguments?.["command"])));
    expect(byCommand(/^printf/).map((c) => c.timeoutMs)).toEqual([20_000, 20_000]);
    expect(byCommand(/^cat /).every((c) => c.timeoutMs === 45_000)).toBe(true);

    const line = JSON.parse((await readFile(r.out, "utf8")).trim()) as { scores: number[]; slotpool: { trajectories: Array<{ reward_calls?: Array<Record<string, unknown>> }> } };
    expect(line.scores).toEqual([1, 1]);
    for (const t of line.slotpool.trajectories) {
      const calls = t.reward_calls!;
      expect(calls).toHaveLength(3);
      expect(calls[0]).toMatchObject({ tool: "bash", success: true, exit_code: 0, output: "hello 0" });
      expect(JSON.parse(calls[0]!["arguments"] as string)).toMatchObject({ command: "cat out_0.txt" });
      // A long output is cut, head and tail kept, saying how much is missing.
      expect((calls[1]!["output"] as string).length).toBeLessThan(REWARD_OUTPUT_KEPT + 100);
      expect(calls[1]!["output"]).toMatch(/characters cut/);
      expect(calls[2]).toMatchObject({ success: false, exit_code: 1, error: "cat: no-such-file: No such file" });
    }
    const html = await readFile(r.report!.path, "utf8");
    expect(html).toContain("reward's tool calls: 3, 1 failed");
    expect(html).toContain("cat: no-such-file: No such file");
  });
});
