/**
 * /mcp driven by the real MCP TypeScript SDK client over the streamable HTTP transport (one
 * MCP session = one episode in one slot), OpenEnv's plain JSON-RPC at the same path, and the
 * stateless HTTP routes (/health, /metadata, /schema, /state, /reset, /step).
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, SOLVE_SEED_0, startOpenEnv, WRONG_SEED_0, type OpenEnvHarness } from "./support.js";

let h: OpenEnvHarness;

beforeAll(async () => {
  h = await startOpenEnv({ slots: 2, acquireTimeoutMs: 1_500 });
}, 120_000);

afterAll(async () => {
  await h?.stop();
});

async function mcpClient(): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
  const client = new Client({ name: "openenv-test", version: "1" });
  const transport = new StreamableHTTPClientTransport(new URL(`${h.url}/mcp`));
  await client.connect(transport);
  return { client, transport };
}

async function post(path: string, body: unknown): Promise<{ status: number; body: any }> {
  const res = await fetch(`${h.url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return { status: res.status, body: await res.json() };
}

describe("MCP at /mcp (streamable HTTP, the SDK's client)", () => {
  it("tools/list gives the env's tools with their JSON Schemas; tools/call solves the item; submit ends the episode with reward 1", async () => {
    const { client, transport } = await mcpClient();
    expect(transport.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    const { tools } = await client.listTools();
    const bash = tools.find((t) => t.name === "bash")!;
    expect(bash.inputSchema).toEqual(expect.objectContaining({ type: "object", properties: expect.objectContaining({ command: expect.objectContaining({ type: "string" }) }) }));
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(["read_file", "write_file", "submit"]));
    // Listing takes no slot; the first call does.
    expect(h.free()).toBe(2);

    // An MCP session has no reset: its episode is the env's next item, here the server's first (item 0).
    const written = await client.callTool({ name: "write_file", arguments: { path: "hello.txt", content: "hi" } });
    expect(written.isError).toBe(false);
    expect(h.free()).toBe(1);
    const read = await client.callTool({ name: "bash", arguments: { command: "cat hello.txt" } });
    expect(read.structuredContent).toEqual(expect.objectContaining({ output: "hi", exit_code: 0, done: false, reward: null }));
    const failing = await client.callTool({ name: "bash", arguments: { command: "exit 3" } });
    expect(failing.isError).toBe(true);
    expect(failing.structuredContent).toEqual(expect.objectContaining({ exit_code: 3, success: false }));

    await client.callTool({ name: "bash", arguments: { command: SOLVE_SEED_0 } });
    const done = await client.callTool({ name: "submit", arguments: {} });
    expect(done.structuredContent).toEqual(expect.objectContaining({ done: true, reward: 1, metadata: expect.objectContaining({ finish_reason: "stop", steps: 5 }) }));
    await eventually(() => h.free() === 2, "the slot back once the episode is scored");
    const after = await client.callTool({ name: "bash", arguments: { command: "true" } });
    expect(after.isError).toBe(true);
    expect((after.content as Array<{ text: string }>)[0]!.text).toMatch(/is over \(done\)/);
    await transport.terminateSession();
    await client.close();
  });

  it("closing the MCP session (DELETE with its session header) releases its slot", async () => {
    const { client, transport } = await mcpClient();
    await client.callTool({ name: "bash", arguments: { command: "true" } });
    expect(h.free()).toBe(1);
    await transport.terminateSession();
    await client.close();
    await eventually(() => h.free() === 2, "the slot back after the session ended");
  });

  it("two MCP sessions are two slots: one's files are not the other's", async () => {
    const a = await mcpClient();
    const b = await mcpClient();
    await a.client.callTool({ name: "bash", arguments: { command: "echo a > only-a.txt" } });
    const seen = await b.client.callTool({ name: "bash", arguments: { command: "cat only-a.txt" } });
    expect(seen.isError).toBe(true);
    expect(seen.structuredContent).toEqual(expect.objectContaining({ output: expect.stringMatching(/No such file/) }));
    for (const c of [a, b]) {
      await c.transport.terminateSession();
      await c.client.close();
    }
    await eventually(() => h.free() === 2, "both slots back");
  });

  it("one MCP session beyond capacity waits up to the acquire timeout, then its call is a CAPACITY_REACHED tool error; the session lives on", async () => {
    const a = await mcpClient();
    const b = await mcpClient();
    const c = await mcpClient();
    await a.client.callTool({ name: "bash", arguments: { command: "true" } });
    await b.client.callTool({ name: "bash", arguments: { command: "true" } });
    expect(h.free()).toBe(0);
    const started = Date.now();
    const refused = await c.client.callTool({ name: "bash", arguments: { command: "true" } });
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_400);
    expect(refused.isError).toBe(true);
    expect(refused.structuredContent).toEqual({ code: "CAPACITY_REACHED", reward: null });
    expect((refused.content as Array<{ text: string }>)[0]!.text).toMatch(/no slot became free within 1500 ms/);
    await a.transport.terminateSession();
    const served = await c.client.callTool({ name: "bash", arguments: { command: "echo served" } });
    expect(served.structuredContent).toEqual(expect.objectContaining({ output: "served", done: false }));
    for (const x of [a, b, c]) {
      if (x !== a) await x.transport.terminateSession();
      await x.client.close();
    }
    await eventually(() => h.free() === 2, "every slot back");
  });

  it("a call with an unknown MCP session id gets 404, as the transport specifies", async () => {
    const res = await fetch(`${h.url}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-session-id": "no-such-session" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
    });
    expect(res.status).toBe(404);
  });
});

describe("OpenEnv's plain JSON-RPC at POST /mcp (its MCP client's production mode)", () => {
  it("openenv/session/create holds an episode across requests; tools/call runs in it; openenv/session/close releases it", async () => {
    const created = await post("/mcp", { jsonrpc: "2.0", id: 1, method: "openenv/session/create", params: {} });
    const sid = created.body.result.session_id as string;
    expect(sid).toMatch(/^[0-9a-f-]{36}$/);
    const listed = await post("/mcp", { jsonrpc: "2.0", id: 2, method: "tools/list", params: {} });
    expect(listed.body.result.tools.map((t: { name: string }) => t.name)).toContain("bash");
    await post("/mcp", { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "bash", arguments: { command: "echo kept > k.txt" }, session_id: sid } });
    const kept = await post("/mcp", { jsonrpc: "2.0", id: 4, method: "tools/call", params: { name: "bash", arguments: { command: "cat k.txt" }, session_id: sid } });
    expect(kept.body.result.structuredContent.output).toBe("kept");
    expect(h.free()).toBe(1);
    const noSession = await post("/mcp", { jsonrpc: "2.0", id: 5, method: "tools/call", params: { name: "bash", arguments: { command: "true" } } });
    expect(noSession.body.error).toEqual(expect.objectContaining({ code: -32602, message: expect.stringContaining("session_id") }));
    const unknown = await post("/mcp", { jsonrpc: "2.0", id: 6, method: "resources/list", params: {} });
    expect(unknown.body.error.code).toBe(-32601);
    const closed = await post("/mcp", { jsonrpc: "2.0", id: 7, method: "openenv/session/close", params: { session_id: sid } });
    expect(closed.body.result).toEqual({ session_id: sid, closed: true });
    await eventually(() => h.free() === 2, "the slot back after openenv/session/close");
  });
});

describe("the stateless HTTP routes", () => {
  it("/health, /metadata, /schema and /state answer as OpenEnv's do", async () => {
    expect(await (await fetch(`${h.url}/health`)).json()).toEqual({ status: "healthy" });
    const meta = (await (await fetch(`${h.url}/metadata`)).json()) as Record<string, unknown>;
    expect(meta).toEqual(expect.objectContaining({ name: "shell-tasks", description: expect.stringContaining("bash") }));
    expect(Object.keys(meta).sort()).toEqual(["author", "description", "documentation_url", "name", "readme_content", "version"]);
    const schema = (await (await fetch(`${h.url}/schema`)).json()) as Record<string, any>;
    expect(Object.keys(schema).sort()).toEqual(["action", "observation", "reset_observation", "state"]);
    expect(JSON.stringify(schema["action"])).toContain("call_tool");
    expect(schema["state"].properties.step_count.type).toBe("integer");
    // The schemas describe what the server really answers: a reset's observation has every field reset_observation requires.
    const reset = await post("/reset", { seed: 1 });
    for (const field of schema["reset_observation"].required as string[]) expect(reset.body.observation).toHaveProperty(field);
    const step = await post("/step", { action: { type: "call_tool", tool_name: "bash", arguments: { command: "echo hi" } }, seed: 1 });
    for (const field of Object.keys(step.body.observation)) expect(schema["observation"].properties).toHaveProperty(field);
    expect(await (await fetch(`${h.url}/state`)).json()).toEqual(expect.objectContaining({ episode_id: null, step_count: 0 }));
  });

  it("POST /reset answers the item's task; POST /step is a single-step episode, scored: reward 1 right, 0 wrong", async () => {
    const reset = await post("/reset", { seed: 0 });
    expect(reset.status).toBe(200);
    expect(reset.body.observation.task).toContain("notes/day-0.txt");
    // OpenEnv's StepRequest fields beside the action (timeout_s, request_id) are accepted.
    const right = await post("/step", { action: { type: "call_tool", tool_name: "bash", arguments: { command: SOLVE_SEED_0 } }, seed: 0, timeout_s: 30, request_id: "req-1" });
    expect(right.body).toEqual(expect.objectContaining({ done: true, reward: 1 }));
    const wrong = await post("/step", { action: { type: "call_tool", tool_name: "bash", arguments: { command: WRONG_SEED_0 } }, seed: 0 });
    expect(wrong.body).toEqual(expect.objectContaining({ done: true, reward: 0 }));
    const bad = await post("/step", { action: { type: "call_tool" } });
    expect(bad.status).toBe(422);
    expect(bad.body).toEqual(expect.objectContaining({ code: "VALIDATION_ERROR", error: expect.stringContaining("tool_name") }));
    await eventually(() => h.free() === 2, "no slot kept by stateless requests");
  });

  it("POST /step honours OpenEnv's timeout_s: the action is cut off at that bound (the env's own is 30 s); a bad one is a 422", async () => {
    const started = Date.now();
    const slow = await post("/step", { action: { type: "call_tool", tool_name: "bash", arguments: { command: "sleep 20; echo late" } }, seed: 0, timeout_s: 1 });
    // bound: cut at timeout_s 1, not after the command's 20 s: 15 s leaves a loaded box room.
    expect(Date.now() - started).toBeLessThan(15_000);
    expect(slow.status).toBe(200);
    expect(slow.body.observation.result.is_error).toBe(true);
    expect(slow.body.observation.result.data).not.toContain("late");
    expect(JSON.stringify(slow.body.observation.result.content)).toMatch(/tim(ed out|eout)/i);
    const bad = await post("/step", { action: { type: "call_tool", tool_name: "bash", arguments: { command: "true" } }, timeout_s: -1 });
    expect(bad.status).toBe(422);
    expect(bad.body).toEqual(expect.objectContaining({ code: "VALIDATION_ERROR", error: expect.stringContaining("timeout_s") }));
    await eventually(() => h.free() === 2, "no slot kept");
  }, 60_000);
});

describe("MCP sessions that idle out, and a lost slot", () => {
  let q: OpenEnvHarness;
  beforeAll(async () => {
    // Long enough that connecting and the first call never idle out on a loaded box, short enough to wait for.
    q = await startOpenEnv({ slots: 2, idleTimeoutMs: 1_500 });
  }, 120_000);
  afterAll(async () => {
    await q?.stop();
  });

  it("an idle MCP session ends: its slot is released and its session id is gone (404)", async () => {
    const client = new Client({ name: "openenv-test", version: "1" });
    const transport = new StreamableHTTPClientTransport(new URL(`${q.url}/mcp`));
    await client.connect(transport);
    await client.callTool({ name: "bash", arguments: { command: "true" } });
    expect(q.free()).toBe(1);
    await eventually(() => q.free() === 2, "the idle session's slot back");
    const res = await fetch(`${q.url}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-session-id": transport.sessionId! },
      body: JSON.stringify({ jsonrpc: "2.0", id: 9, method: "tools/list" }),
    });
    expect(res.status).toBe(404);
    await client.close();
  });

  it("a slot lost under an MCP session is a tool error marked as an infrastructure failure, with no reward", async () => {
    const client = new Client({ name: "openenv-test", version: "1" });
    const transport = new StreamableHTTPClientTransport(new URL(`${q.url}/mcp`));
    await client.connect(transport);
    await client.callTool({ name: "bash", arguments: { command: SOLVE_SEED_0 } });
    q.killContainers();
    const lost = await client.callTool({ name: "bash", arguments: { command: "true" } });
    expect(lost.isError).toBe(true);
    expect(lost.structuredContent).toEqual({ code: "EXECUTION_ERROR", infra_failure: true, cause: "slot_lost", reward: null });
    expect((lost.content as Array<{ text: string }>)[0]!.text).toMatch(/^infrastructure failure \(slot_lost\)/);
    await transport.terminateSession();
    await client.close();
  }, 60_000);
});
