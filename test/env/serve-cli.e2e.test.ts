/**
 * `slotpool serve` end to end: the example env, a model behind the scripted OpenAI-compatible
 * server (its answers come from the env's own oracle, wrong on purpose for every other
 * rollout so scores differ), real local sandboxes, and the Atropos API double as trainer.
 */
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import ShellTasksEnv, { type ShellTask } from "../../examples/shell-tasks/env.js";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import type { ChatMessage } from "../../src/agent/messages.js";
import { startAtroposDouble, type AtroposDouble } from "../support/atropos-double.js";
import { startLlmServer, taskOf, turnOf, type ChatRequestBody, type LlmServer, type ScriptedReply } from "../support/llm-server.js";

let api: AtroposDouble;
let llm: LlmServer;

/** Finds which item a conversation is about by rebuilding the task texts. */
function modelFromOracle(): (body: ChatRequestBody) => Promise<ScriptedReply> {
  const env = new ShellTasksEnv({}, {});
  const items = new Map<string, ShellTask>();
  for (let id = 0; id < 64; id++) {
    const item = env.getNextItem();
    items.set(env.buildTask(item), item);
  }
  let firstTurns = 0;
  return async (body) => {
    const item = items.get(taskOf(body));
    if (!item) return { status: 400, body: "unknown task" };
    const turn = turnOf(body);
    const wrong = body.messages.some((m) => m.role === "assistant" && m.content === "I give up.");
    if (turn === 1 && firstTurns++ % 2 === 1) return { text: "I give up." };
    if (wrong) return { text: "I give up." };
    const step = await env.oracle(item)({ turn, messages: body.messages as ChatMessage[], tools: [] });
    if (!step || "final" in step) return { text: step?.final ?? "" };
    return { toolCalls: step.toolCalls };
  };
}

beforeAll(async () => {
  api = await startAtroposDouble();
  llm = await startLlmServer({ tokenIds: true, respond: modelFromOracle() });
});
afterAll(async () => {
  await llm?.close();
  await api?.close();
});

describe("slotpool serve (example env, scripted model, Atropos double)", () => {
  it("waits for the trainer, then sends groups with real token ids and differing scores", async () => {
    const { command, args } = slotpoolCommand();
    const child = spawn(
      command,
      [...args, "serve", "examples/shell-tasks/env.js", "--atropos-url", api.url, "--model-url", llm.url, "--model", "scripted", "--groups", "2", "--group-size", "2", "--no-progress", "--allow-inexact-tokens"],
      { stdio: ["ignore", "pipe", "pipe"], env: process.env },
    );
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    const exited = new Promise<number | null>((r) => child.on("exit", (code) => r(code)));

    // The env registers before the trainer exists: it is told to wait, and retries.
    const deadline = Date.now() + 20_000;
    while (api.requests.filter((r) => r.path === "/register-env").length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(api.envs).toHaveLength(0);
    await api.registerTrainer({ batch_size: 4, max_token_len: 100_000, num_steps: 100 });
    await api.getBatch();

    const code = await exited;
    expect(stderr).not.toMatch(/Error/);
    expect(code).toBe(0);
    expect(stdout).toMatch(/sent\s+2 groups \(env_id 0/);
    expect(api.envs[0]).toMatchObject({ name: "shell-tasks", group_size: 2, max_token_length: 2048, weight: 1 });
    const sent = api.requests.filter((r) => r.path === "/scored_data").map((r) => r.body as Record<string, unknown>);
    expect(sent.length).toBeGreaterThanOrEqual(2);
    for (const g of sent) {
      expect([...(g["scores"] as number[])].sort()).toEqual([0, 1]);
      expect(g["env_id"]).toBe(0);
      const tokens = g["tokens"] as number[][];
      const masks = g["masks"] as number[][];
      for (let i = 0; i < 2; i++) {
        expect(tokens[i]!.length).toBeGreaterThan(10);
        expect(masks[i]).toHaveLength(tokens[i]!.length);
      }
    }
    // the status poll is a GET with a JSON body
    expect(api.requests.find((r) => r.path === "/status-env")).toMatchObject({ method: "GET", query: "", body: { env_id: 0 } });
  }, 60_000);
});
