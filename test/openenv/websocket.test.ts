/**
 * `slotpool openenv-server`'s WebSocket /ws, spoken as OpenEnv's EnvClient speaks it, over a
 * real pool (sandbox servers, bubblewrap) serving examples/shell-tasks: one episode per
 * connection in a slot of its own, scored by the env's computeReward in that slot.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { silentLogger } from "../../src/observability/logger.js";
import { OpenEnvServer } from "../../src/openenv/server.js";
import ShellTasksEnv from "../../examples/shell-tasks/env.js";
import { eventually, SOLVE_SEED_0, startOpenEnv, WRONG_SEED_0, WsClient, type OpenEnvHarness } from "./support.js";

let h: OpenEnvHarness;

beforeAll(async () => {
  h = await startOpenEnv({ slots: 2, acquireTimeoutMs: 1_500 });
}, 120_000);

afterAll(async () => {
  await h?.stop();
});

describe("OpenEnv over WebSocket /ws", () => {
  it("reset answers the task's messages and tools; solving it by tool calls and submit gets reward 1, with the reward's metadata", async () => {
    const c = await WsClient.connect(h.wsUrl);
    const reset = await c.reset({ seed: 0 });
    expect(reset.type).toBe("observation");
    expect(reset.data.done).toBe(false);
    expect(reset.data.reward).toBeNull();
    const obs = reset.data.observation;
    expect(obs.task).toContain("notes/day-0.txt");
    expect(obs.messages.map((m: { role: string }) => m.role)).toEqual(["system", "user"]);
    const names = obs.available_tools.map((t: { name: string }) => t.name);
    expect(names).toEqual(expect.arrayContaining(["bash", "read_file", "write_file", "submit"]));
    expect(obs.available_tools.find((t: { name: string }) => t.name === "bash").input_schema.properties.command.type).toBe("string");

    const ran = await c.call("bash", { command: SOLVE_SEED_0 + " && cat notes/day-0.txt" });
    expect(ran.type).toBe("observation");
    expect(ran.data.done).toBe(false);
    expect(ran.data.observation.tool_name).toBe("bash");
    expect(ran.data.observation.result.data).toBe("release 0 approved");
    expect(ran.data.observation.result.structured_content.exit_code).toBe(0);
    expect(ran.data.observation.error).toBeNull();

    const state = await c.send({ type: "state" });
    expect(state).toEqual({ type: "state", data: expect.objectContaining({ episode_id: obs.episode_id, step_count: 1, done: false, reward: null }) });

    const submitted = await c.call("submit", { answer: "done" });
    expect(submitted.data.done).toBe(true);
    expect(submitted.data.reward).toBe(1);
    expect(submitted.data.metadata).toEqual(expect.objectContaining({ finish_reason: "stop", steps: 2 }));
    expect((await c.send({ type: "state" })).data).toEqual(expect.objectContaining({ step_count: 2, done: true, reward: 1 }));

    // The episode is over: another call is refused, and the session lives on for the next reset.
    const late = await c.call("bash", { command: "true" });
    expect(late).toEqual({ type: "error", data: expect.objectContaining({ code: "SESSION_ERROR", message: expect.stringMatching(/is over \(done\): send reset/) }) });
    const again = await c.reset({ seed: 0 });
    expect(again.data.observation.task).toBe(obs.task);
    // A new episode is a fresh slot: the last one's file is gone.
    const fresh = await c.call("bash", { command: "test -e notes/day-0.txt && echo present || echo absent" });
    expect(fresh.data.observation.result.data).toBe("absent");
    await c.close();
  });

  it("a wrong answer gets reward 0, and the turn limit ends an episode with its reward", async () => {
    const c = await WsClient.connect(h.wsUrl);
    await c.reset({ seed: 0 });
    await c.call("bash", { command: WRONG_SEED_0 });
    const submitted = await c.call("submit");
    expect(submitted.data).toEqual(expect.objectContaining({ done: true, reward: 0 }));

    const reset = await c.reset({ seed: 0 });
    const maxTurns = reset.data.observation.max_turns as number;
    expect(maxTurns).toBe(12);
    let last;
    for (let i = 0; i < maxTurns; i++) {
      last = await c.call("bash", { command: i === 0 ? SOLVE_SEED_0 : "true" });
      expect(last.data.done).toBe(i === maxTurns - 1);
    }
    expect(last!.data).toEqual(expect.objectContaining({ done: true, reward: 1 }));
    expect(last!.data.metadata.finish_reason).toBe("max_turns");
    await c.close();
  });

  it("the same seed or episode_id gives the same item (set up by setupWorkspace); resets without one walk the items in order", async () => {
    const c = await WsClient.connect(h.wsUrl);
    // Reset runs the env's setupWorkspace for the item: item 1 (fix-script) finds its broken calc.sh.
    await c.reset({ seed: 1 });
    expect((await c.call("bash", { command: "test -s calc.sh && echo present" })).data.observation.result.data).toBe("present");
    const a = (await c.reset({ seed: 2 })).data.observation;
    const b = (await c.reset({ seed: 2 })).data.observation;
    expect(b.task).toBe(a.task);
    expect(a.item_index).toBe(2);
    const named = (await c.reset({ episode_id: "ep-x" })).data.observation;
    expect(named.episode_id).toBe("ep-x");
    const replay = (await c.reset({ episode_id: "ep-x" })).data.observation;
    expect(replay.item_index).toBe(named.item_index);
    expect(replay.task).toBe(named.task);
    const next = (await c.reset()).data.observation;
    expect(next.item_index).toBe(named.item_index + 1);
    await c.close();
  });

  it("two concurrent episodes are isolated: each has its own slot and workspace", async () => {
    const [a, b] = await Promise.all([WsClient.connect(h.wsUrl), WsClient.connect(h.wsUrl)]);
    await Promise.all([a.reset({ seed: 0 }), b.reset({ seed: 0 })]);
    expect(h.free()).toBe(0);
    await a.call("bash", { command: "echo from-a > mine.txt && " + SOLVE_SEED_0 });
    const seen = await b.call("bash", { command: "cat mine.txt 2>&1; ls" });
    expect(seen.data.observation.result.data).toMatch(/No such file/);
    expect(seen.data.observation.result.data).not.toMatch(/notes/);
    const [ra, rb] = await Promise.all([a.call("submit"), b.call("submit")]);
    expect(ra.data.reward).toBe(1);
    expect(rb.data.reward).toBe(0);
    await Promise.all([a.close(), b.close()]);
    await eventually(() => h.free() === 2, "both slots back in the pool");
  });

  it("a bad message gets an error frame and the session lives on", async () => {
    const c = await WsClient.connect(h.wsUrl);
    expect(await c.send("{not json")).toEqual({ type: "error", data: expect.objectContaining({ code: "INVALID_JSON" }) });
    expect(await c.send({ type: "dance" })).toEqual({ type: "error", data: expect.objectContaining({ code: "UNKNOWN_TYPE", message: expect.stringContaining("dance") }) });
    // As OpenEnv's frames, a VALIDATION_ERROR lists every problem (pydantic's errors() layout) beside the message.
    expect(await c.send({ type: "step", data: { type: "call_tool" } })).toEqual({
      type: "error",
      data: expect.objectContaining({ code: "VALIDATION_ERROR", message: expect.stringContaining("tool_name"), errors: [expect.objectContaining({ loc: ["tool_name"], msg: expect.any(String) })] }),
    });
    expect(await c.send({ type: "reset", data: { seed: -1 } })).toEqual({ type: "error", data: expect.objectContaining({ code: "VALIDATION_ERROR", message: expect.stringContaining("seed") }) });
    expect(await c.call("bash", { command: "true" })).toEqual({ type: "error", data: expect.objectContaining({ code: "SESSION_ERROR", message: expect.stringContaining("send reset first") }) });
    // Still alive: a reset and a step work, an unknown tool is an observation naming the tools, a bad argument too.
    await c.reset({ seed: 0 });
    const unknown = await c.call("rm_rf", {});
    expect(unknown.data.observation.error).toEqual({ error_type: "tool_not_found", message: expect.stringContaining("available tools: bash") });
    const badArgs = await c.call("bash", { command: 42 });
    expect(badArgs.data.observation.error.error_type).toBe("invalid_args");
    expect((await c.send({ type: "state" })).data.step_count).toBe(2);
    const listed = await c.send({ type: "step", data: { type: "list_tools" } });
    expect(listed.data.observation.tools.map((t: { name: string }) => t.name)).toContain("submit");
    await c.close();
  });

  it("MCP messages inside the WebSocket reach the same episode", async () => {
    const c = await WsClient.connect(h.wsUrl);
    const listed = await c.send({ type: "mcp", data: { jsonrpc: "2.0", id: 1, method: "tools/list" } });
    expect(listed.type).toBe("mcp");
    expect(listed.data.id).toBe(1);
    expect(listed.data.result.tools.find((t: { name: string }) => t.name === "bash").inputSchema.properties.command).toBeDefined();
    await c.reset({ seed: 0 });
    const ran = await c.send({ type: "mcp", data: { jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "bash", arguments: { command: SOLVE_SEED_0 } } } });
    expect(ran.data.result.isError).toBe(false);
    expect((await c.send({ type: "state" })).data.step_count).toBe(1);
    const done = await c.send({ type: "mcp", data: { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "submit", arguments: {} } } });
    expect(done.data.result.structuredContent).toEqual(expect.objectContaining({ done: true, reward: 1 }));
    const bad = await c.send({ type: "mcp", data: { id: 4, method: "tools/list" } });
    expect(bad.data.error.code).toBe(-32600);
    await c.close();
  });

  it("WebSocket /mcp (as OpenEnv's servers have it): bare JSON-RPC, one connection = one episode in one slot, released when it closes", async () => {
    await eventually(() => h.free() === 2, "a quiet pool");
    const ws = new WebSocket(`${h.url.replace(/^http/, "ws")}/mcp`);
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
    });
    const answers: Array<Record<string, any>> = [];
    const waiting: Array<(a: Record<string, any>) => void> = [];
    ws.on("message", (d) => {
      const a = JSON.parse(d.toString()) as Record<string, any>;
      const w = waiting.shift();
      if (w) w(a);
      else answers.push(a);
    });
    const rpc = (m: unknown) => {
      ws.send(typeof m === "string" ? m : JSON.stringify(m));
      return answers.length ? Promise.resolve(answers.shift()!) : new Promise<Record<string, any>>((r) => waiting.push(r));
    };
    const listed = await rpc({ jsonrpc: "2.0", id: 1, method: "tools/list", params: {} });
    expect(listed.result.tools.map((t: { name: string }) => t.name)).toEqual(expect.arrayContaining(["bash", "submit"]));
    expect(h.free()).toBe(2);
    const ran = await rpc({ jsonrpc: "2.0", id: 2, method: "tools/call", params: { name: "bash", arguments: { command: SOLVE_SEED_0 + " && echo ok" } } });
    expect(ran).toEqual(expect.objectContaining({ id: 2, result: expect.objectContaining({ isError: false, structuredContent: expect.objectContaining({ output: "ok" }) }) }));
    expect(h.free()).toBe(1);
    expect((await rpc("{nope")).error.code).toBe(-32700);
    // The same episode: the file written by the first call is there.
    const seen = await rpc({ jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "bash", arguments: { command: "cat notes/day-0.txt" } } });
    expect(seen.result.structuredContent.output).toBe("release 0 approved");
    // Closing with the episode running (no submit) releases its slot.
    ws.close();
    await eventually(() => h.free() === 2, "the slot back once the connection closed");
  });

  it("beyond capacity a reset waits up to the acquire timeout, then gets CAPACITY_REACHED; a freed slot serves the next reset", async () => {
    const [a, b, c] = await Promise.all([WsClient.connect(h.wsUrl), WsClient.connect(h.wsUrl), WsClient.connect(h.wsUrl)]);
    await a.reset();
    await b.reset();
    const started = Date.now();
    const refused = await c.reset();
    expect(refused).toEqual({ type: "error", data: expect.objectContaining({ code: "CAPACITY_REACHED", message: expect.stringMatching(/no slot became free within 1500 ms/), waited_ms: 1500, active_sessions: 2, max_sessions: 2 }) });
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_400);
    await a.close();
    const served = await c.reset();
    expect(served.type).toBe("observation");
    await Promise.all([b.close(), c.close()]);
  });

  it("a reset beyond capacity waits: a slot freed within the bound serves it, no error", async () => {
    await eventually(() => h.free() === 2, "a quiet pool");
    const [a, b, c] = await Promise.all([WsClient.connect(h.wsUrl), WsClient.connect(h.wsUrl), WsClient.connect(h.wsUrl)]);
    await a.reset();
    await b.reset();
    const started = Date.now();
    const waiting = c.reset({ seed: 1 });
    // wait: the waiting reset reaching the server (no event shows it waiting); short of the 1500 ms bound, leaving the close (its slot's reset) time on a loaded box.
    await new Promise((r) => setTimeout(r, 200));
    await a.close();
    const served = await waiting;
    expect(served.type).toBe("observation");
    expect(served.data.observation.item_index).toBe(1);
    // It was served by the freed slot, not refused at the 1500 ms bound.
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
    expect(h.free()).toBe(0);
    await Promise.all([b.close(), c.close()]);
    await eventually(() => h.free() === 2, "both slots back");
  });

  it("closing and dropping the connection each release the slot (the pool's free count returns; idling out: below)", async () => {
    await eventually(() => h.free() === 2, "a quiet pool");
    const a = await WsClient.connect(h.wsUrl);
    await a.reset();
    expect(h.free()).toBe(1);
    await a.close();
    await eventually(() => h.free() === 2, "the slot back after close");

    const b = await WsClient.connect(h.wsUrl);
    await b.reset();
    expect(h.free()).toBe(1);
    b.ws.terminate();
    await eventually(() => h.free() === 2, "the slot back after a dropped connection");
  });
});

describe("OpenEnv sessions that idle out, and a lost slot", () => {
  let q: OpenEnvHarness;
  /**
   * A second server with a short idle timeout, for the idle test only (its own env on q's
   * pool, so q's items keep their order): the other tests' sessions must not idle out between
   * two messages on a loaded box (a 400 ms timeout once fired in the middle of the lost-slot test).
   */
  let idle: OpenEnvServer;
  let idleEnv: ShellTasksEnv;
  let idleWsUrl: string;
  beforeAll(async () => {
    q = await startOpenEnv({ slots: 2 });
    idleEnv = new ShellTasksEnv({}, { backend: q.backend, logger: silentLogger() });
    await idleEnv.start();
    idle = new OpenEnvServer({ env: idleEnv, logger: silentLogger(), idleTimeoutMs: 1_500 });
    idleWsUrl = `${(await idle.listen(0, "127.0.0.1")).replace(/^http/, "ws")}/ws`;
  }, 120_000);
  afterAll(async () => {
    await idle?.close();
    await idleEnv?.close();
    await q?.stop();
  });

  it("an idle session gets a SESSION_ERROR frame, its slot is released and the connection closed", async () => {
    const c = await WsClient.connect(idleWsUrl);
    await c.reset();
    expect(q.free()).toBe(1);
    const frame = await c.next();
    expect(frame).toEqual({ type: "error", data: expect.objectContaining({ code: "SESSION_ERROR", message: expect.stringMatching(/idle for 1500 ms/) }) });
    await eventually(() => c.closed && q.free() === 2, "the idle session closed and its slot back");
  });

  it("a seed selects the same item on another server of the same env (reproducible across servers)", async () => {
    const here = await WsClient.connect(q.wsUrl);
    const there = await WsClient.connect(h.wsUrl);
    for (const seed of [3, 1]) {
      const [a, b] = await Promise.all([here.reset({ seed }), there.reset({ seed })]);
      expect(a.data.observation.item_index).toBe(seed);
      expect(a.data.observation.task).toBe(b.data.observation.task);
      expect(a.data.observation.messages).toEqual(b.data.observation.messages);
    }
    const distinct = new Set<string>();
    for (const seed of [0, 1, 2, 3]) distinct.add((await here.reset({ seed })).data.observation.task);
    expect(distinct.size).toBe(4);
    await Promise.all([here.close(), there.close()]);
  });

  it("a lost slot is an EXECUTION_ERROR that says it is an infrastructure failure, never a reward; the session lives on", async () => {
    const c = await WsClient.connect(q.wsUrl);
    await c.reset({ seed: 0 });
    await c.call("bash", { command: SOLVE_SEED_0 });
    q.killContainers();
    const lost = await c.call("bash", { command: "true" });
    expect(lost).toEqual({ type: "error", data: expect.objectContaining({ code: "EXECUTION_ERROR", infra_failure: true, cause: "slot_lost", message: expect.stringMatching(/^infrastructure failure \(slot_lost\).*no reward/) }) });
    expect((await c.send({ type: "state" })).data).toEqual(expect.objectContaining({ done: true, reward: null }));
    // The pool replaces the container; a new episode runs there.
    const again = await c.reset({ seed: 0 });
    expect(again.type).toBe("observation");
    await c.close();
  }, 60_000);
});
