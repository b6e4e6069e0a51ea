/**
 * POST /run: one rollout of the env's own agent loop against the OpenAI-compatible endpoint
 * the request names (a scripted server here), answered as the scored trajectory with the
 * token ids and logprobs the server sent; a failing endpoint or a slot lost on every attempt is an
 * infra failure, not a score; a slot lost once restarts the rollout.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { renderPrompt, startLlmServer, taskOf, testTokenize, turnOf, type ChatRequestBody, type LlmServer, type LlmServerOptions } from "../support/llm-server.js";
import { eventually, freePort, SOLVE_SEED_0, startOpenEnv, WRONG_SEED_0, type OpenEnvHarness } from "./support.js";

let h: OpenEnvHarness;
let llm: LlmServer | undefined;
/** The one model endpoint the server allows (--model-url-allow): each test's scripted server listens there. */
let port = 0;
const startLlm = (options: Omit<LlmServerOptions, "port">) => startLlmServer({ ...options, port });

beforeAll(async () => {
  port = await freePort();
  h = await startOpenEnv({ slots: 2, limits: { modelUrlAllow: [`http://127.0.0.1:${port}/v1`] } });
}, 120_000);

afterAll(async () => {
  await llm?.close();
  await h?.stop();
});

async function run(body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${h.url}/run`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

/** Turn 1 runs `command`, turn 2 answers "done". */
function scripted(command: string) {
  return (body: ChatRequestBody) => (turnOf(body) === 1 ? { toolCalls: [{ name: "bash", arguments: { command } }] } : { text: "done" });
}

describe("POST /run", () => {
  it("runs the env's agent loop on the given endpoint and answers the scored trajectory with the ids and logprobs the server sent", async () => {
    llm = await startLlm({ respond: scripted(SOLVE_SEED_0), tokenIds: true });
    const r = await run({ seed: 0, model: { base_url: llm.url, model: "scripted", temperature: 0.7, max_tokens: 64, top_p: 0.9 } });
    expect(r.status).toBe(200);
    const t = r.body;
    expect(t).toEqual(expect.objectContaining({ status: "scored", reward: 1, infra_failure: null, done: true, finish_reason: "stop", item_index: 0 }));
    expect(t.messages.map((m: { role: string }) => m.role)).toEqual(["system", "user", "assistant", "tool", "assistant"]);
    expect(t.tool_calls).toEqual([expect.objectContaining({ turn: 1, tool: "bash", success: true, exit_code: 0 })]);

    // The request carried the sampling fields: temperature and max_tokens as such, the rest as they were.
    expect(llm.requests[0]).toEqual(expect.objectContaining({ model: "scripted", temperature: 0.7, max_tokens: 64, top_p: 0.9 }));
    expect(taskOf(llm.requests[0]!)).toContain("notes/day-0.txt");

    expect(t.turns).toHaveLength(2);
    for (const [i, turn] of (t.turns as Array<Record<string, number[]>>).entries()) {
      expect(turn["prompt_token_ids"]).toEqual(testTokenize(renderPrompt(llm.requests[i]!.messages)));
      const ids = turn["completion_token_ids"]!;
      expect(turn["logprobs"]).toEqual(ids.map((_, k) => -0.01 * ((k % 7) + 1)));
    }
    expect(t.turns[1].completion_token_ids).toEqual(testTokenize("done<|im_end|>"));
    expect(String.fromCharCode(...t.turns[0].completion_token_ids)).toContain('<tool_call>\n{"name": "bash"');
    await eventually(() => h.free() === 2, "the rollout's slot back");
  });

  it("reads NeMo Gym's token fields (message.prompt_token_ids / generation_token_ids / generation_log_probs), which once were lost", async () => {
    await llm?.close();
    llm = await startLlm({ respond: scripted(SOLVE_SEED_0), tokenIds: "nemo-gym" });
    const r = await run({ seed: 0, model: { base_url: llm.url, model: "scripted" } });
    expect(r.body).toEqual(expect.objectContaining({ status: "scored", reward: 1 }));
    for (const [i, turn] of (r.body.turns as Array<Record<string, number[]>>).entries()) {
      expect(turn["prompt_token_ids"]).toEqual(testTokenize(renderPrompt(llm.requests[i]!.messages)));
      expect(turn["completion_token_ids"]!.length).toBeGreaterThan(0);
      expect(turn["logprobs"]).toEqual(turn["completion_token_ids"]!.map((_, k) => -0.01 * ((k % 7) + 1)));
    }
    await eventually(() => h.free() === 2, "the rollout's slot back");
  });

  it("a wrong rollout scores 0; an item given in the request is rolled out as it is", async () => {
    await llm?.close();
    llm = await startLlm({ respond: scripted(WRONG_SEED_0) });
    const wrong = await run({ item: { id: 7, kind: "create-file", variant: 0 }, model: { base_url: llm.url, model: "scripted" } });
    expect(wrong.body).toEqual(expect.objectContaining({ status: "scored", reward: 0, item_index: null }));
    // No ids from a server that sends none: none are made up.
    expect(wrong.body.turns[0]).toEqual({ turn: 1, finish_reason: "tool_calls" });
  });

  it("an endpoint that keeps failing makes the rollout an infra failure with no reward, saying what failed", async () => {
    await llm?.close();
    llm = await startLlm({ respond: () => ({ status: 500 }) });
    const r = await run({ seed: 0, model: { base_url: llm.url, model: "scripted", max_retries: 0 } });
    expect(r.status).toBe(200);
    expect(r.body).toEqual(expect.objectContaining({ status: "infra_failure", reward: null, finish_reason: "error" }));
    expect(r.body.infra_failure).toEqual({ cause: "model", message: expect.stringMatching(/the model server failed on turn 1/) });
    await eventually(() => h.free() === 2, "the slot back after the failed rollout");
  });

  it("a slot lost mid-rollout restarts the rollout (slot_losses, attempts); lost every time, it is an infra failure (slot_lost) with no reward", async () => {
    await llm?.close();
    // The first attempt's turn 2 finds its sandbox servers crashed; the restarted rollout runs on the replacement.
    let kills = 0;
    llm = await startLlm({
      respond: (body) => {
        if (turnOf(body) === 2 && kills < 1) {
          kills++;
          h.killContainers();
        }
        return scripted(SOLVE_SEED_0)(body);
      },
    });
    const restarted = await run({ seed: 0, model: { base_url: llm.url, model: "scripted" } });
    expect(restarted.body).toEqual(expect.objectContaining({ status: "scored", reward: 1, infra_failure: null, attempts: 2 }));
    expect(restarted.body.slot_losses).toHaveLength(1);

    await llm.close();
    llm = await startLlm({
      respond: (body) => {
        if (turnOf(body) === 2) h.killContainers();
        return scripted(SOLVE_SEED_0)(body);
      },
    });
    const lost = await run({ seed: 0, model: { base_url: llm.url, model: "scripted" } });
    expect(lost.status).toBe(200);
    expect(lost.body).toEqual(expect.objectContaining({ status: "infra_failure", reward: null }));
    expect(lost.body.infra_failure).toEqual({ cause: "slot_lost", message: expect.any(String) });
    await eventually(() => h.free() === 2, "the pool whole again", 60_000);
  }, 120_000);

  it("a bad request is a 422 naming the field", async () => {
    const r = await run({ seed: 0, model: { base_url: "not a url", model: "m" } });
    expect(r.status).toBe(422);
    expect(r.body).toEqual(expect.objectContaining({ code: "VALIDATION_ERROR", error: expect.stringContaining("model.base_url") }));
    const both = await run({ seed: 0, item: {}, model: { base_url: `http://127.0.0.1:${port}/v1`, model: "m" } });
    expect(both.status).toBe(422);
    expect(both.body.error).toMatch(/not both/);
  });
});
