/**
 * POST /run for NeMo Gym 0.7, checked with NeMo Gym's own pydantic models (the nemo-gym
 * package from the package index, .build/python-nemo-gym): its run request (responses_create_params)
 * is answered as its verify response — a Responses-API output whose items carry the token ids
 * and logprobs its model servers put on `message.generation_token_ids` (which /run reads), a
 * float reward, and for an infrastructure failure `mask_sample: true` with a failure_kind of its
 * vocabulary instead of `reward: null`, which its models refuse.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startLlmServer, turnOf, type ChatRequestBody, type LlmServer } from "../support/llm-server.js";
import { pythonClients } from "../support/python-clients.js";
import { freePort, SOLVE_SEED_0, startOpenEnv, type OpenEnvHarness } from "./support.js";

const run = promisify(execFile);
const CHECKS = fileURLToPath(new URL("./python/nemo_gym_checks.py", import.meta.url));
const py = pythonClients("python-nemo-gym");

async function checks(server: string, model: string, ...names: string[]): Promise<Record<string, Record<string, any>>> {
  const { stdout } = await run(py.python!, [CHECKS, server, model, ...names], { timeout: 300_000 });
  return Object.fromEntries(stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, any>).map((r) => [r["check"], r]));
}

describe.skipIf(py.python === null)(`NeMo Gym's models read POST /run${py.reason ? ` (skipped: ${py.reason})` : ""}`, () => {
  let h: OpenEnvHarness;
  let llm: LlmServer | undefined;
  let port = 0;
  beforeAll(async () => {
    port = await freePort();
    h = await startOpenEnv({ slots: 2, limits: { modelUrlAllow: [`http://127.0.0.1:${port}/v1`] } });
  }, 120_000);
  afterAll(async () => {
    await llm?.close();
    await h?.stop();
  });

  it("a scored rollout: BaseVerifyResponse validates it; each model turn's ids (from message.generation_token_ids) on its last output item", async () => {
    llm = await startLlmServer({ port, tokenIds: "nemo-gym", respond: (body: ChatRequestBody) => (turnOf(body) === 1 ? { toolCalls: [{ name: "bash", arguments: { command: SOLVE_SEED_0 } }] } : { text: "done" }) });
    const r = (await checks(h.url, llm.url, "scored"))["scored"]!;
    expect(r, JSON.stringify(r)).toEqual(expect.objectContaining({ ok: true, reward: 1, mask_sample: false, failure_kind: null }));
    expect(r["types"]).toEqual(["function_call", "function_call_output", "message"]);
    expect(r["token_items"]).toBe(2);
    expect(r["turn_ids"]).toEqual([true, true]);
    expect(r).toEqual(expect.objectContaining({ logprobs_match: true, prompt_ids: true }));
    expect(r["input_roles"]).toEqual(["system", "user"]);
    await llm.close();
    llm = undefined;
  }, 400_000);

  it("an infra failure: mask_sample true, a failure_kind of NeMo Gym's vocabulary, the reason, and a float reward its model accepts", async () => {
    llm = await startLlmServer({ port, respond: () => ({ status: 500 }) });
    const r = (await checks(h.url, llm.url, "infra"))["infra"]!;
    expect(r, JSON.stringify(r)).toEqual(expect.objectContaining({ ok: true, reward: 0, mask_sample: true, kind_known: true, status: "infra_failure" }));
    expect(r["failure_reason"]).toMatch(/model server/);
  }, 400_000);
});
