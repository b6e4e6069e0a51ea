/**
 * End to end: env → agent → executor → pool → sandbox server (real processes, bubblewrap),
 * with the scripted LLM server in both tool-call styles, and a container killed mid-trajectory.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { silentLogger } from "../../src/observability/logger.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { startLlmServer, taskOf, turnOf, type ChatRequestBody, type LlmServer } from "../support/llm-server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { WriteFileEnv } from "./support/counting-env.js";

const log = silentLogger();
let provisioner: LocalProvisioner;

/** SIGKILLs every sandbox server, as crashed containers: the slots on them are lost. */
function killContainers(): void {
  for (const p of provisioner.processes()) process.kill(p.pid, "SIGKILL");
}
let backend: ToolBackend;
let llm: LlmServer | undefined;

/** A model that solves the task: turn 1 writes the file, turn 2 answers. */
function solver(style: "native" | "hermes") {
  return (body: ChatRequestBody) => {
    const m = /create (\S+) containing exactly '([^']*)'/.exec(taskOf(body))!;
    const cmd = `printf '%s' '${m[2]}' > ${m[1]}`;
    if (turnOf(body) > 1) return style === "native" ? { text: "done" } : { text: "All done." };
    if (style === "native") return { toolCalls: [{ name: "terminal", arguments: { command: cmd } }], reasoning: "write it" };
    return { text: `Writing.\n<tool_call>\n${JSON.stringify({ name: "bash", arguments: { command: cmd } })}\n</tool_call>` };
  };
}

beforeAll(async () => {
  provisioner = new LocalProvisioner({ slotsPerContainer: 4 });
  backend = await poolBackend(AgentEnvConfigSchema.parse({ pool: { slotsPerContainer: 4, minContainers: 1, maxContainers: 2, acquireTimeoutMs: 30_000 }, executor: { defaultTimeoutS: 30 } }), provisioner, log);
});

afterAll(async () => {
  await llm?.close();
  await backend?.close();
});

describe("AgentEnv end to end", () => {
  for (const style of ["native", "hermes"] as const) {
    it(`collects a scored group with a model using ${style} tool calls; reward runs in the agent's slot`, async () => {
      llm = await startLlmServer({ respond: solver(style), tokenIds: style === "native" });
      const env = new WriteFileEnv({ groupSize: 3, model: { url: llm.url, name: "scripted", toolCallFormat: style }, maxTurns: 4 }, { backend, logger: log });
      await env.start();
      const item = env.getNextItem();
      const outcome = await env.collectTrajectories(item);
      await env.close();
      await llm.close();
      llm = undefined;

      expect(outcome.ok).toBe(true);
      if (!outcome.ok) return;
      expect(outcome.group.scores).toEqual([1, 1, 1]);
      expect(env.rewardOutputs).toEqual(["hello 0", "hello 0", "hello 0"]);
      expect(env.setupCalls).toHaveLength(3);
      expect(new Set(outcome.trajectories.map((t) => t.trajectoryId)).size).toBe(3);
      for (const t of outcome.trajectories) {
        expect(t.result.toolCalls).toHaveLength(1);
        expect(t.result.toolErrors).toEqual([]);
        expect(t.attempts).toBe(1);
      }
      expect(outcome.group.messages).toHaveLength(3);
      if (style === "native") {
        // token ids came from the server: prompt masked, completions trained
        const t = outcome.trajectories[0]!.tokens!;
        expect(t.source).toBe("inference-server");
        expect(t.tokens.length).toBe(t.masks.length);
        expect(t.masks.filter((m) => m !== -100).length).toBeGreaterThan(0);
        expect(t.masks[0]).toBe(-100);
        expect(outcome.group.inference_logprobs).toHaveLength(3);
        expect(outcome.group.messages![0]![1]).toMatchObject({ role: "assistant", reasoning_content: "write it" });
      } else {
        expect(outcome.group.tokens).toEqual([[], [], []]);
      }
      // every slot went back to the pool
      expect(backend.poolStats!().slots.held).toBe(0);
    });
  }

  it("a slot left by a wrong answer scores 0, and the workspace was reset between trajectories", async () => {
    const env = new WriteFileEnv({ groupSize: 2, maxTurns: 3 }, { backend, logger: log });
    await env.start();
    // A previous trajectory's seed file must not be visible: each run starts from an empty slot.
    const policyEnv = Object.assign(env, {
      oracle: () => ({ turn }: { turn: number }) => (turn === 1 ? { toolCalls: [{ name: "bash", arguments: { command: "ls; echo wrong > out_0.txt" } }] } : { final: "x" }),
    });
    const outcome = await policyEnv.collectTrajectories({ id: 0, path: "out_0.txt", content: "hello 0" });
    await env.close();
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) return;
    expect(outcome.group.scores).toEqual([0, 0]);
    for (const t of outcome.trajectories) {
      const listing = JSON.parse(t.result.messages.find((m) => m.role === "tool")!.content!) as { output: string };
      expect(listing.output.trim()).toBe("seed_0.txt");
    }
  });

  it("ToolContext: upload, download, list, archive and any tool by name, all in the trajectory's own slot", async () => {
    const env = new WriteFileEnv({ groupSize: 2, maxTurns: 3 }, { backend, logger: log });
    const seen: Array<Record<string, unknown>> = [];
    env.computeReward = async (item, _result, ctx) => {
      const bytes = Buffer.from([0, 1, 2, 250, 255]);
      const up = await ctx.uploadFile("bin/blob.dat", bytes);
      const down = await ctx.downloadFile("bin/blob.dat");
      const listing = await ctx.listFiles(".", { recursive: true });
      const viaName = await ctx.callTool("terminal", { command: `wc -c < ${item.path}` });
      const stateful = await ctx.callTool("bash_stateful", { command: "cd bin && export X=42" });
      const stateful2 = await ctx.callTool("bash_stateful", { command: "pwd; echo $X" });
      const archive = await ctx.archive(".");
      const missing = await ctx.readFile("nope.txt");
      const slow = await ctx.terminal("sleep 5", { timeout: 1 });
      seen.push({ up: up.success, down: [...down], files: listing.entries.map((e) => e.path).sort(), viaName: viaName.output.trim(), stateful: stateful.success, stateful2: stateful2.output.trim().split("\n"), archive: archive.success && archive.entries > 0, missing: missing.ok, slowTimedOut: slow.timedOut || slow.exitCode !== 0 });
      return 1;
    };
    await env.start();
    const outcome = await env.collectTrajectories(env.getNextItem());
    await env.close();
    expect(outcome.ok).toBe(true);
    expect(seen).toHaveLength(2);
    for (const s of seen) {
      expect(s).toMatchObject({ up: true, down: [0, 1, 2, 250, 255], viaName: String("hello 0".length), stateful: true, archive: true, missing: false, slowTimedOut: true });
      expect(s["files"]).toEqual(expect.arrayContaining(["bin/blob.dat", "out_0.txt", "seed_0.txt"]));
      expect((s["stateful2"] as string[])[0]).toMatch(/bin$/);
      expect((s["stateful2"] as string[])[1]).toBe("42");
    }
  }, 60_000);

  it("restarts a trajectory from scratch on a new slot when its container dies mid-trajectory", async () => {
    let killed = false;
    const env = new WriteFileEnv({ groupSize: 1, maxTurns: 4, slotLossRetries: 2 }, { backend, logger: log });
    Object.assign(env, {
      oracle: (item: { path: string; content: string }) => async ({ turn }: { turn: number }) => {
        if (turn === 1) return { toolCalls: [{ name: "bash", arguments: { command: "echo started" } }] };
        if (turn === 2 && !killed) {
          killed = true;
          // the container dies between two tool calls of this trajectory
          killContainers();
          return { toolCalls: [{ name: "bash", arguments: { command: "sleep 0.2; echo after" } }] };
        }
        if (turn === 2) return { toolCalls: [{ name: "bash", arguments: { command: `printf '%s' '${item.content}' > ${item.path}` } }] };
        return { final: "ok" };
      },
    });
    await env.start();
    const outcome = await env.collectTrajectories(env.getNextItem());
    await env.close();
    expect(killed).toBe(true);
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) return;
    const t = outcome.trajectories[0]!;
    expect(t.attempts).toBe(2);
    expect(t.slotLosses).toHaveLength(1);
    expect(t.slotLosses[0]).toMatch(/lost/);
    expect(t.score).toBe(1);
  }, 60_000);

  it("drops the group as an infra failure (slot_lost), with the reason, when slot losses exceed the retries", async () => {
    const env = new WriteFileEnv({ groupSize: 2, maxTurns: 4, slotLossRetries: 0, infraRetries: 0 }, { backend, logger: log });
    Object.assign(env, {
      oracle: () => async ({ turn }: { turn: number }) => {
        if (turn === 1) {
          // wait: the oracle's own pace, so both trajectories hold their slots before the first to reach turn 2 kills the containers
          await new Promise((r) => setTimeout(r, 50));
          return { toolCalls: [{ name: "bash", arguments: { command: "echo one" } }] };
        }
        if (turn === 2) {
          killContainers();
          return { toolCalls: [{ name: "bash", arguments: { command: "sleep 0.2" } }] };
        }
        return { final: "x" };
      },
    });
    await env.start();
    const outcome = await env.collectTrajectories(env.getNextItem());
    await env.close();
    expect(outcome.ok).toBe(false);
    if (outcome.ok) return;
    expect(outcome.kind).toBe("infra");
    expect(outcome.reason).toMatch(/had an infrastructure failure: slot_lost: trajectory lost its slot 1 times \(slotLossRetries = 0\)/);
    expect(outcome.infraFailures.some((f) => f.cause === "slot_lost")).toBe(true);
    expect(outcome.unfinished.slotLosses).toBeGreaterThanOrEqual(1);
  }, 60_000);
});
