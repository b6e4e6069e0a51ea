/**
 * Issue 39, item 1: the model's own `timeout` on `bash` is what its call gets, clamped to the
 * env's bounds (executor.minTimeoutS..maxTimeoutS), and executor.defaultTimeoutS only for a
 * call that names none — in an env run, in every ToolContext (setup, in-process tools, the
 * reward) and in OpenEnv steps. The tool schema the model sees promises exactly that.
 *
 * First with the in-memory backend (which timeout each call reaches the executor with), then
 * for real: sandbox servers that kill a command at the bound its call was given.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { AgentResult } from "../../src/agent/agent-loop.js";
import type { OracleScript } from "../../src/agent/oracle-policy.js";
import { AgentEnv } from "../../src/env/agent-env.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { defineEnvTool } from "../../src/env/env-tools.js";
import { EnvConfigError } from "../../src/env/errors.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import type { ToolContext } from "../../src/env/tool-context.js";
import { parseToolExecutorConfig, ToolExecutorConfigError } from "../../src/executor/config.js";
import { silentLogger } from "../../src/observability/logger.js";
import { OpenEnvServer } from "../../src/openenv/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import type { ToolDefinition } from "../../src/tools/types.js";
import { fakeBackend } from "./support/fake-backend.js";

const log = silentLogger();

interface Item {
  calls: Array<Record<string, unknown>>;
}

/** Plays the item's bash calls in one turn; setup, an in-process tool and the reward ask for timeouts of their own. */
class TimeoutEnv extends AgentEnv<Item> {
  static override envName = "timeouts";
  items: Item[] = [];
  readonly seen: Record<string, unknown[]> = {};

  getNextItem(): Item | null {
    return this.items.shift() ?? null;
  }
  buildTask(): string {
    return "run the commands";
  }
  override async setupWorkspace(_item: Item, ctx: ToolContext): Promise<void> {
    await ctx.terminal("echo setup-asks-1000", { timeout: 1000 });
    await ctx.callTool("bash", { command: "echo setup-asks-half", timeout: 0.5 });
  }
  override envTools(): readonly ToolDefinition[] {
    return [
      defineEnvTool({
        name: "probe",
        description: "runs a command through its ToolContext",
        parameters: z.object({}),
        run: async (_args, ctx) => (await ctx.terminal("echo tool-asks-none")).output,
      }),
    ];
  }
  async computeReward(_item: Item, result: AgentResult, ctx: ToolContext): Promise<number> {
    await ctx.terminal("echo reward-asks-300", { timeout: 300 });
    await ctx.terminal("echo reward-asks-none");
    const outputs = result.messages.filter((m) => m.role === "tool").map((m) => String(m.content));
    (this.seen["outputs"] ??= []).push(...outputs);
    return 1;
  }
  override oracle(item: Item): OracleScript {
    return ({ turn }) => (turn === 1 ? { toolCalls: [...item.calls.map((a) => ({ name: "bash", arguments: a })), { name: "probe", arguments: {} }] } : { final: "done" });
  }
}

describe("the model's timeout, within the env's bounds (in-memory backend)", () => {
  it("each call gets the timeout it asked for, clamped to executor.minTimeoutS..maxTimeoutS, and defaultTimeoutS only when it names none", async () => {
    const backend = fakeBackend();
    const env = new TimeoutEnv({ groupSize: 1, rewardTimeoutS: 45, executor: { defaultTimeoutS: 20, minTimeoutS: 2, maxTimeoutS: 100 } }, { backend, logger: log });
    env.items.push({
      calls: [
        { command: "echo asks-5", timeout: 5 },
        { command: "echo asks-150", timeout: 150 },
        { command: "echo asks-half", timeout: 0.5 },
        { command: "echo asks-none" },
      ],
    });
    await env.start();
    const outcome = await env.collectTrajectories(env.getNextItem()!);
    await env.close();
    expect(outcome.ok).toBe(true);
    const timeoutOf = (text: string) => backend.executor.calls.find((c) => String(c.call.arguments?.["command"]).endsWith(text))?.timeoutMs;
    // The agent's own calls: its value within 2..100 s, else the default.
    expect(timeoutOf("asks-5")).toBe(5_000);
    expect(timeoutOf("asks-150")).toBe(100_000);
    expect(timeoutOf("asks-half")).toBe(2_000);
    expect(timeoutOf("echo asks-none")).toBe(20_000);
    // setupWorkspace's and an in-process tool's ToolContext: the same bounds.
    expect(timeoutOf("setup-asks-1000")).toBe(100_000);
    expect(timeoutOf("setup-asks-half")).toBe(2_000);
    expect(timeoutOf("tool-asks-none")).toBe(20_000);
    // The reward's commands are the author's: its own default, the floor, not the model's ceiling.
    expect(timeoutOf("reward-asks-300")).toBe(300_000);
    expect(timeoutOf("reward-asks-none")).toBe(45_000);
  });

  it("bounds that contradict each other are a config error naming the fields", () => {
    expect(() => new TimeoutEnv({ executor: { minTimeoutS: 50, maxTimeoutS: 10 } })).toThrow(EnvConfigError);
    expect(() => new TimeoutEnv({ executor: { minTimeoutS: 50, maxTimeoutS: 10 } })).toThrow(/executor\.minTimeoutS \(50\) must not be above executor\.maxTimeoutS \(10\)/);
    expect(() => new TimeoutEnv({ executor: { defaultTimeoutS: 30, maxTimeoutS: 10 } })).toThrow(/executor\.defaultTimeoutS \(30\) must lie within executor\.minTimeoutS\.\.executor\.maxTimeoutS \(1\.\.10\)/);
    expect(() => parseToolExecutorConfig({ minTimeoutS: 5, defaultTimeoutS: 2 })).toThrow(ToolExecutorConfigError);
    expect(() => new TimeoutEnv({ executor: { maxTimeoutS: 601 } })).toThrow(/executor\.maxTimeoutS/);
  });
});

describe("the model's timeout on real sandbox servers", () => {
  let backend: ToolBackend;
  beforeAll(async () => {
    const provisioner = new LocalProvisioner({ slotsPerContainer: 2 });
    backend = await poolBackend(AgentEnvConfigSchema.parse({ pool: { slotsPerContainer: 2, minContainers: 1, maxContainers: 1, acquireTimeoutMs: 60_000 } }), provisioner, log);
  }, 120_000);
  afterAll(async () => {
    await backend?.close();
  });

  it("a call asking for 1 s is cut off; one asking for 20 s runs past the env's 2 s default", async () => {
    const env = new TimeoutEnv({ groupSize: 1, executor: { defaultTimeoutS: 2 } }, { backend, logger: log });
    // A command that outlives its call's bound prints nothing after the sleep; one within it does.
    env.items.push({ calls: [{ command: "sleep 6; echo slept-past-1s", timeout: 1 }] });
    env.items.push({ calls: [{ command: "sleep 3; echo slept-3s-of-20", timeout: 20 }] });
    await env.start();
    try {
      const cut = await env.collectTrajectories(env.getNextItem()!);
      expect(cut.ok).toBe(true);
      const cutCall = cut.trajectories[0]!.result.toolCalls[0]!;
      expect(cutCall.success).toBe(false);
      expect(env.seen["outputs"]!.join("\n")).not.toContain("slept-past-1s");
      const ran = await env.collectTrajectories(env.getNextItem()!);
      expect(ran.ok).toBe(true);
      expect(ran.trajectories[0]!.result.toolCalls[0]!.success).toBe(true);
      expect(env.seen["outputs"]!.join("\n")).toContain("slept-3s-of-20");
    } finally {
      await env.close();
    }
  }, 120_000);

  it("an OpenEnv step: the call's own timeout is honoured (the env's default is 30 s), and timeout_s wins over it", async () => {
    const env = new TimeoutEnv({ groupSize: 1, executor: { defaultTimeoutS: 30 } }, { backend, logger: log });
    for (let i = 0; i < 4; i++) env.items.push({ calls: [] });
    await env.start();
    const server = new OpenEnvServer({ env, logger: log });
    const url = await server.listen(0, "127.0.0.1");
    const step = async (body: Record<string, unknown>) => {
      const res = await fetch(`${url}/step`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      expect(res.status).toBe(200);
      return (await res.json()) as { observation: { result: { is_error: boolean; data?: unknown; content?: unknown } } };
    };
    try {
      const own = await step({ action: { type: "call_tool", tool_name: "bash", arguments: { command: "sleep 6; echo slept-past-1s", timeout: 1 } }, seed: 0 });
      expect(own.observation.result.is_error).toBe(true);
      expect(JSON.stringify(own.observation.result)).not.toContain("slept-past-1s");
      const stepWins = await step({ action: { type: "call_tool", tool_name: "bash", arguments: { command: "sleep 3; echo slept-3s", timeout: 1 } }, seed: 1, timeout_s: 20 });
      expect(stepWins.observation.result.is_error).toBe(false);
      expect(JSON.stringify(stepWins.observation.result)).toContain("slept-3s");
    } finally {
      await server.close();
      await env.close();
    }
  }, 120_000);
});
