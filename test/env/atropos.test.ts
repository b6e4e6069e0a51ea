import { afterEach, describe, expect, it } from "vitest";
import { getEventListeners } from "node:events";
import { AtroposClient } from "../../src/env/atropos/client.js";
import { filterGroupForSend } from "../../src/env/atropos/group-filter.js";
import { runEnvManager } from "../../src/env/atropos/env-manager.js";
import { RunStats } from "../../src/env/run-stats.js";
import { TokensInexactError, TokensUnavailableError } from "../../src/env/errors.js";
import type { ScoredDataGroup } from "../../src/env/scored-group.js";
import { silentLogger } from "../../src/observability/logger.js";
import { startAtroposDouble, SCORED_DATA_KEYS, type AtroposDouble } from "../support/atropos-double.js";
import { startLlmServer, taskOf, turnOf, type LlmServer } from "../support/llm-server.js";
import { fakeBackend } from "./support/fake-backend.js";
import { WriteFileEnv } from "./support/counting-env.js";

const log = silentLogger();
let api: AtroposDouble | undefined;
let llm: LlmServer | undefined;
afterEach(async () => {
  await api?.close();
  await llm?.close();
  api = undefined;
  llm = undefined;
});

const group = (over: Partial<ScoredDataGroup> = {}): ScoredDataGroup => ({ tokens: [[1, 2], [3, 4]], masks: [[-100, 2], [-100, 4]], scores: [1, 0], ...over });

describe("Atropos client", () => {
  it("registers after the trainer starts, reads /info, polls /status-env as a GET with a JSON body", async () => {
    api = await startAtroposDouble();
    const client = new AtroposClient({ url: api.url, registerPollMs: 20 });
    const reg = client.registerEnv({ max_token_length: 2048, desired_name: "myenv", weight: 1, group_size: 2, min_batch_allocation: null });
    // answered "wait for trainer to start", and retried
    const deadline = Date.now() + 10_000;
    while (api.requests.filter((r) => r.path === "/register-env").length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(api.requests.filter((r) => r.path === "/register-env").length).toBeGreaterThanOrEqual(2);
    await api.registerTrainer({ batch_size: 8, max_token_len: 512, num_steps: 50, starting_step: 3 });
    await api.getBatch();
    const r = await reg;
    expect(r).toEqual({ env_id: 0, wandb_name: "myenv_0", checkpoint_dir: "/ckpt", starting_step: 3, checkpoint_interval: 100, num_steps: 50 });
    expect(api.requests.find((q) => q.path === "/register-env")!.body).toEqual({ max_token_length: 2048, desired_name: "myenv", weight: 1, group_size: 2, min_batch_allocation: null });
    expect(await client.info()).toEqual({ batch_size: 8, max_token_len: 512 });
    const st = await client.statusEnv(0);
    expect(st).toMatchObject({ current_step: 3, queue_size: 0, self_queue_size: 0, max_group_size: 2, env_weight: 1 });
    const poll = api.requests.find((q) => q.path === "/status-env")!;
    expect(poll.method).toBe("GET");
    expect(poll.query).toBe("");
    expect(poll.body).toEqual({ env_id: 0 });
    await client.close();
  });

  it("waiting for the trainer under the run's signal leaves no listener behind (no MaxListenersExceededWarning however long it waits)", async () => {
    api = await startAtroposDouble();
    const client = new AtroposClient({ url: api.url, registerPollMs: 5 });
    const run = new AbortController();
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on("warning", onWarning);
    try {
      const reg = client.registerEnv({ max_token_length: 2048, desired_name: "myenv", weight: 1, group_size: 2, min_batch_allocation: null }, run.signal);
      // Past Node's 10 listeners per signal: the old wait left one per poll.
      while (api.requests.filter((r) => r.path === "/register-env").length < 15) await new Promise((r) => setTimeout(r, 5));
      expect(getEventListeners(run.signal, "abort").length).toBeLessThanOrEqual(1);
      await api.registerTrainer({ batch_size: 8, max_token_len: 512, num_steps: 50, starting_step: 0 });
      await api.getBatch();
      await reg;
      expect(getEventListeners(run.signal, "abort").length).toBeLessThanOrEqual(1);
      await new Promise((r) => setImmediate(r)); // warnings are emitted on the next tick
      expect(warnings).not.toContain("MaxListenersExceededWarning");
    } finally {
      process.off("warning", onWarning);
      await client.close();
    }
  });

  it("sends one group to /scored_data, a list to /scored_data_list, gzips only large bodies, retries 5xx, drops 4xx", async () => {
    api = await startAtroposDouble();
    await api.registerTrainer({ batch_size: 4 });
    await api.getBatch();
    const client = new AtroposClient({ url: api.url, maxWaitMs: 20 });
    await client.registerEnv({ max_token_length: 100, desired_name: "e", weight: 1, group_size: 2 });

    const small = await client.sendScoredData(group());
    expect(small).toMatchObject({ sent: true, gzipped: false, response: { status: "received" } });
    const big = group({ tokens: [Array(600).fill(7), Array(600).fill(7)], masks: [Array(600).fill(-100), Array(600).fill(7)] });
    const r2 = await client.sendScoredData([big]);
    expect(r2).toMatchObject({ sent: true, gzipped: true, response: { status: "received", groups_processed: 1 } });
    const bigReq = api.requests.filter((q) => q.path === "/scored_data_list")[0]!;
    expect(bigReq.headers["content-encoding"]).toBe("gzip");
    expect(bigReq.rawBytes).toBeLessThan(1024);
    expect(bigReq.body).toEqual([{ ...big, env_id: 0 }]); // the double inflated it
    const single = api.requests.find((q) => q.path === "/scored_data")!;
    expect(single.body).toEqual({ ...group(), env_id: 0 });

    api.failNext("/scored_data", 503, 2);
    expect(await client.sendScoredData(group())).toMatchObject({ sent: true });
    expect(api.requests.filter((q) => q.path === "/scored_data")).toHaveLength(4);

    const before = api.requests.length;
    const rejected = await client.sendScoredData(group({ messages: [[{ role: "user" } as never], []] }));
    expect(rejected).toMatchObject({ sent: false, status: 422 });
    expect(api.requests.length).toBe(before + 1);
    expect(api.queue).toHaveLength(3);
    // stored items hold all 14 keys
    expect(Object.keys(api.queue[0]!).sort()).toEqual([...SCORED_DATA_KEYS].sort());
    await expect(client.sendScoredData(group({ scores: [NaN, 1] }))).rejects.toThrow(/finite/);
    await client.close();
  });
});

describe("send filters (BaseEnv handle_send_to_api)", () => {
  const base = { groupSize: 2, ensureScoresAreNotSame: true, dropOverLength: true, includeMessages: false };
  it("skips wrong sizes, equal scores and over-long sequences; sets the five nulls", () => {
    expect(filterGroupForSend(group({ scores: [1, 1] }), base)).toMatchObject({ send: false, reason: expect.stringContaining("equal") });
    expect(filterGroupForSend(group({ scores: [1, 1] }), { ...base, ensureScoresAreNotSame: false }).send).toBe(true);
    expect(filterGroupForSend(group(), { ...base, groupSize: 4 })).toMatchObject({ send: false, reason: expect.stringContaining("expected 4") });
    expect(filterGroupForSend(group({ group_overrides: { group_size: 2 } }), { ...base, groupSize: 4 }).send).toBe(true);
    expect(filterGroupForSend(group({ group_overrides: null }), base)).toMatchObject({ send: false, reason: expect.stringContaining("explicitly null") });
    expect(filterGroupForSend(group(), { ...base, maxTokenLen: 2 })).toMatchObject({ send: false, reason: expect.stringContaining("max_token_len 2") });
    expect(filterGroupForSend(group(), { ...base, maxTokenLen: 2, dropOverLength: false }).send).toBe(true);
    expect(filterGroupForSend(group(), { ...base, maxTokenLen: 3 }).send).toBe(true);
    const ok = filterGroupForSend(group(), base);
    if (!ok.send) throw new Error("expected send");
    expect(ok.group).toEqual({ ...group(), ref_logprobs: null, overrides: null, group_overrides: null, distill_token_ids: null, distill_logprobs: null });
    expect("advantages" in ok.group).toBe(false);
    const filled = filterGroupForSend(group(), { ...base, includeMessages: true, decode: (ids) => ids.join(",") });
    expect(filled.send && filled.group.messages).toEqual([[{ role: "user", content: "1,2" }], [{ role: "user", content: "3,4" }]]);
  });
});

/** A model that solves even-numbered trajectories only, so scores differ within a group. */
function halfSolver() {
  let n = 0;
  return (body: Parameters<Parameters<typeof startLlmServer>[0]["respond"]>[0]) => {
    const m = /create (\S+) containing exactly '([^']*)'/.exec(taskOf(body))!;
    if (turnOf(body) > 1) return { text: "done" };
    const right = n++ % 2 === 0;
    return { toolCalls: [{ name: "bash", arguments: { command: `printf '%s' '${right ? m[2] : "wrong"}' > ${m[1]}` } }] };
  };
}

describe("serve: env manager against the trajectory API", () => {
  it("registers, sends scored groups with every field, and stops at --groups", async () => {
    api = await startAtroposDouble();
    await api.registerTrainer({ batch_size: 4, max_token_len: 100_000, num_steps: 100 });
    await api.getBatch();
    llm = await startLlmServer({ tokenIds: true, respond: halfSolver() });
    const env = new WriteFileEnv({ name: "wf", groupSize: 2, model: { url: llm.url, name: "m", temperature: 0.5, maxTokens: 300 }, trainer: { allowInexactTokens: true } }, { backend: fakeBackend(), logger: log });
    await env.start();
    const client = new AtroposClient({ url: api.url });
    const stats = new RunStats();
    const report = await runEnvManager(env as never, client, { logger: log, stats, maxGroups: 2, pollMs: 10 });
    await client.close();
    await env.close();
    expect(report.sent).toBe(2);
    expect(report.registration.env_id).toBe(0);
    const sends = api.requests.filter((r) => r.path === "/scored_data");
    expect(sends.length).toBeGreaterThanOrEqual(2);
    const body = sends[0]!.body as Record<string, unknown>;
    expect(Object.keys(body).sort()).toEqual(
      ["tokens", "masks", "scores", "inference_logprobs", "messages", "generation_params", "ref_logprobs", "overrides", "group_overrides", "distill_token_ids", "distill_logprobs", "env_id"].sort(),
    );
    expect(body["env_id"]).toBe(0);
    expect(body["scores"]).toEqual([1, 0]);
    expect(body["generation_params"]).toEqual({ temperature: 0.5, max_tokens: 300 });
    for (const k of ["ref_logprobs", "overrides", "group_overrides", "distill_token_ids", "distill_logprobs"]) expect(body[k]).toBeNull();
    const tokens = body["tokens"] as number[][];
    const masks = body["masks"] as number[][];
    const lps = body["inference_logprobs"] as number[][];
    for (let i = 0; i < 2; i++) {
      expect(masks[i]).toHaveLength(tokens[i]!.length);
      expect(lps[i]).toHaveLength(tokens[i]!.length);
      // masked positions: -100 and logprob 1.0; trained positions: the token id itself
      masks[i]!.forEach((m, j) => {
        if (m === -100) expect(lps[i]![j]).toBe(1.0);
        else expect(m).toBe(tokens[i]![j]);
      });
      expect(masks[i]!.some((m) => m !== -100)).toBe(true);
    }
    const msgs = body["messages"] as Array<Array<{ role: string; content: unknown }>>;
    expect(msgs[0]![0]).toMatchObject({ role: "user" });
    for (const seq of msgs) for (const m of seq) expect("content" in m && "role" in m).toBe(true);
    expect(api.queue.length).toBeGreaterThanOrEqual(2);
    expect(stats.groups).toBeGreaterThanOrEqual(2);
  });

  it("backs off while the trainer's queue is full and resumes when it drains; equal-score groups are not sent", async () => {
    api = await startAtroposDouble();
    await api.registerTrainer({ batch_size: 4, max_token_len: 100_000, num_steps: 100 });
    await api.getBatch();
    api.setQueueSize(6); // 6 groups × 2 ≥ 3 batches × 4: back off
    llm = await startLlmServer({ tokenIds: true, respond: halfSolver() });
    const env = new WriteFileEnv({ name: "wf", groupSize: 2, model: { url: llm.url, name: "m" }, trainer: { allowInexactTokens: true } }, { backend: fakeBackend(), logger: log });
    await env.start();
    const client = new AtroposClient({ url: api.url });
    const stats = new RunStats();
    const run = runEnvManager(env as never, client, { logger: log, stats, maxGroups: 1, pollMs: 10 });
    const deadline = Date.now() + 10_000;
    while (api.requests.filter((r) => r.path === "/status-env").length < 6 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    expect(api.requests.filter((r) => r.path === "/status-env").length).toBeGreaterThan(5);
    expect(llm.requests).toHaveLength(0); // no rollouts started while the queue is full
    expect(api.requests.filter((r) => r.path.startsWith("/scored_data"))).toHaveLength(0);
    api.setQueueSize(null);
    const report = await run;
    await client.close();
    await env.close();
    expect(report.sent).toBe(1);
  });

  it("runs evaluate() and saveCheckpoint() when the trainer's step crosses stepsPerEval / checkpoint_interval", async () => {
    api = await startAtroposDouble();
    await api.registerTrainer({ batch_size: 2, max_token_len: 100_000, num_steps: 100, save_checkpoint_interval: 1 });
    await api.getBatch();
    // Rollouts after the first sent group wait until the evaluation has begun: the trainer's
    // step moves 0 → 1 asynchronously, and without this gate the second group could be sent
    // (ending the run) before the manager's next status poll saw the new step.
    let sentGroups = 0;
    let evaluationBegan!: () => void;
    const evaluating = new Promise<void>((r) => (evaluationBegan = r));
    const solver = halfSolver();
    llm = await startLlmServer({
      tokenIds: true,
      respond: async (body) => {
        if (taskOf(body).includes("TASK 99")) evaluationBegan();
        else if (sentGroups >= 1) await evaluating;
        return solver(body);
      },
    });
    const env = new WriteFileEnv({ name: "wf", groupSize: 2, groupConcurrency: 1, trainer: { stepsPerEval: 1, allowInexactTokens: true }, model: { url: llm.url, name: "m" } }, { backend: fakeBackend(), logger: log });
    const checkpoints: Array<[number, string]> = [];
    env.saveCheckpoint = async (step, dir) => {
      checkpoints.push([step, dir]);
    };
    env.getEvalItems = async () => [{ id: 99, path: "e.txt", content: "e" }];
    await env.start();
    const client = new AtroposClient({ url: api.url });
    const report = await runEnvManager(env as never, client, {
      logger: log,
      stats: new RunStats(),
      maxGroups: 2,
      pollMs: 10,
      onGroup: (_o, delivery) => {
        // the trainer consumes the first group: its step goes 0 → 1
        if (delivery === "sent" && ++sentGroups === 1) void api!.getBatch();
      },
    });
    await client.close();
    await env.close();
    expect(report.evaluations).toBeGreaterThanOrEqual(1);
    expect(checkpoints[0]).toEqual([1, "/ckpt"]);
    expect(llm.requests.some((r) => taskOf(r).includes("TASK 99"))).toBe(true);
  });

  it("refuses to send Phase 1 (not token-exact) ids to a trainer unless the user opts in", async () => {
    api = await startAtroposDouble();
    await api.registerTrainer({ batch_size: 4, max_token_len: 100_000, num_steps: 100 });
    await api.getBatch();
    llm = await startLlmServer({ tokenIds: true, respond: halfSolver() });
    const env = new WriteFileEnv({ name: "wf", groupSize: 2, model: { url: llm.url, name: "m" } }, { backend: fakeBackend(), logger: log });
    await env.start();
    const client = new AtroposClient({ url: api.url });
    const saved = process.env["SLOTPOOL_ALLOW_INEXACT_TOKENS"];
    delete process.env["SLOTPOOL_ALLOW_INEXACT_TOKENS"];
    try {
      await expect(runEnvManager(env as never, client, { logger: log, stats: new RunStats(), maxGroups: 1, pollMs: 10 })).rejects.toThrow(TokensInexactError);
      expect(api.requests.filter((r) => r.path.startsWith("/scored_data"))).toHaveLength(0);
      // The environment variable opts in, as ATROPOS_ALLOW_DUMMY_MANAGED_SERVER does for Atropos.
      process.env["SLOTPOOL_ALLOW_INEXACT_TOKENS"] = "1";
      const report = await runEnvManager(env as never, client, { logger: log, stats: new RunStats(), maxGroups: 1, pollMs: 10 });
      expect(report.sent).toBe(1);
    } finally {
      if (saved === undefined) delete process.env["SLOTPOOL_ALLOW_INEXACT_TOKENS"];
      else process.env["SLOTPOOL_ALLOW_INEXACT_TOKENS"] = saved;
      await client.close();
      await env.close();
    }
  });

  it("refuses to send groups without token ids (oracle policy, no tokenizer)", async () => {
    api = await startAtroposDouble();
    await api.registerTrainer({ batch_size: 4 });
    await api.getBatch();
    const backend = fakeBackend();
    const env = new WriteFileEnv({ name: "wf", groupSize: 2, trainer: { ensureScoresAreNotSame: false } }, { backend, logger: log });
    await env.start();
    const client = new AtroposClient({ url: api.url });
    await expect(runEnvManager(env as never, client, { logger: log, stats: new RunStats(), maxGroups: 1, pollMs: 10 })).rejects.toBeInstanceOf(TokensUnavailableError);
    expect(api.requests.filter((r) => r.path.startsWith("/scored_data"))).toHaveLength(0);
    await client.close();
    await env.close();
  });
});
