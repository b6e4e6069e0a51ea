import { afterEach, describe, expect, it } from "vitest";
import { ChatModelPolicy, OraclePolicy, runAgentLoop, ChatCompletionsClient, ChatRequestError, type OpenAIFunctionTool } from "../../src/agent/index.js";
import type { ToolCall, ToolResult } from "../../src/protocol/tool.js";
import { startLlmServer, turnOf, type LlmServer } from "../support/llm-server.js";

const TOOLS: OpenAIFunctionTool[] = [
  { type: "function", function: { name: "terminal", description: "run a shell command", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } },
];

/** A fake slot: records calls, answers `echo X` with X, fails `false`. */
function fakeExecutor() {
  const calls: ToolCall[] = [];
  const execute = async (call: ToolCall): Promise<ToolResult> => {
    calls.push(call);
    const cmd = String(call.arguments?.["command"] ?? "");
    if (cmd === "false") return { success: false, output: "", error: "exit code 1", metadata: { exit_code: 1 }, uniq_id: null };
    return { success: true, output: cmd.replace(/^echo /, "") + "\n", error: "", metadata: { exit_code: 0 }, uniq_id: null };
  };
  return { calls, execute };
}

let server: LlmServer | undefined;
afterEach(async () => {
  await server?.close();
  server = undefined;
});

describe("agent loop over a chat completions endpoint", () => {
  it("runs native tool calls in order, keeps reasoning, records errors, usage and extra body", async () => {
    server = await startLlmServer({
      respond: (body) => {
        const turn = turnOf(body);
        if (turn === 1) return { toolCalls: [{ name: "terminal", arguments: { command: "echo one" } }, { name: "terminal", arguments: { command: "false" } }], reasoning: "let me think" };
        if (turn === 2) return { toolCalls: [{ name: "nope", arguments: {} }] };
        return { text: "done" };
      },
    });
    const exec = fakeExecutor();
    const policy = new ChatModelPolicy({ baseUrl: server.url, model: "m", temperature: 0.3, maxTokens: 77, extraBody: { provider: { order: ["x"] } } });
    const result = await runAgentLoop({ policy, tools: TOOLS, messages: [{ role: "user", content: "task" }], executeTool: exec.execute, maxTurns: 5 });
    await policy.close();

    expect(exec.calls.map((c) => c.arguments?.["command"])).toEqual(["echo one", "false"]);
    expect(result.turnsUsed).toBe(3);
    expect(result.finishReason).toBe("stop");
    expect(result.finalResponse).toBe("done");
    expect(result.messages[1]).toMatchObject({ role: "assistant", reasoning_content: "let me think" });
    expect(result.messages[2]).toMatchObject({ role: "tool", tool_call_id: "call_0_0", content: JSON.stringify({ output: "one\n", exit_code: 0 }) });
    expect(result.toolCalls).toHaveLength(3);
    expect(result.toolErrors).toEqual([
      { turn: 1, tool: "terminal", arguments: '{"command":"false"}', error: "exit code 1", toolResult: "" },
      expect.objectContaining({ turn: 2, tool: "nope", error: expect.stringContaining("unknown tool 'nope'") }),
    ]);
    expect(result.usage.total_tokens).toBeGreaterThan(0);
    const first = server.requests[0]!;
    expect(first).toMatchObject({ model: "m", temperature: 0.3, max_tokens: 77, provider: { order: ["x"] }, tool_choice: "auto" });
    expect(first.tools).toEqual(TOOLS);
    // reasoning is kept in the result but not sent back to the server
    expect(JSON.stringify(server.requests[1]!.messages)).not.toContain("reasoning_content");
    // tool messages go back in OpenAI's shape (no extra fields)
    expect(server.requests[1]!.messages[2]).toEqual({ role: "tool", tool_call_id: "call_0_0", content: JSON.stringify({ output: "one\n", exit_code: 0 }) });
  });

  it("parses Hermes <tool_call> text when tools are described in the prompt", async () => {
    server = await startLlmServer({
      respond: (body) => {
        const turn = turnOf(body);
        if (turn === 1) return { text: 'I will look.\n<tool_call>\n{"name": "terminal", "arguments": {"command": "echo hi"}}\n</tool_call>' };
        if (turn === 2) return { text: "<tool_call>{not json</tool_call>" };
        return { text: "finished" };
      },
    });
    const exec = fakeExecutor();
    const policy = new ChatModelPolicy({ baseUrl: server.url, model: "m", toolCallFormat: "hermes" });
    const result = await runAgentLoop({ policy, tools: TOOLS, messages: [{ role: "system", content: "be brief" }, { role: "user", content: "task" }], executeTool: exec.execute, maxTurns: 5 });
    await policy.close();
    expect(exec.calls).toEqual([{ name: "terminal", arguments: { command: "echo hi" } }]);
    expect(result.finishReason).toBe("stop");
    expect(result.turnsUsed).toBe(3);
    expect(result.toolErrors).toEqual([expect.objectContaining({ turn: 2, tool: "(unparsed tool call)", error: expect.stringContaining("not valid JSON") })]);
    const first = server.requests[0]!;
    expect(first.tools).toBeUndefined();
    expect(first.messages[0]!.content).toContain("be brief");
    expect(first.messages[0]!.content).toContain("<tools>");
    const second = server.requests[1]!;
    expect(second.messages[2]).toMatchObject({ role: "assistant", content: expect.stringContaining("<tool_call>") });
    expect(second.messages[3]).toMatchObject({ role: "user", content: expect.stringContaining("<tool_response>") });
  });

  it("retries 429 and 500 with back-off, does not retry 400, and stops at max turns", async () => {
    server = await startLlmServer({
      respond: (_b, i) => (i === 0 ? { status: 429, retryAfterSeconds: 0 } : i === 1 ? { status: 500 } : { toolCalls: [{ name: "terminal", arguments: { command: "echo x" } }] }),
    });
    const exec = fakeExecutor();
    const policy = new ChatModelPolicy({ baseUrl: server.url, model: "m", initialBackoffMs: 5 });
    const result = await runAgentLoop({ policy, tools: TOOLS, messages: [{ role: "user", content: "t" }], executeTool: exec.execute, maxTurns: 2 });
    expect(server.statuses.slice(0, 3)).toEqual([429, 500, 200]);
    expect(result.finishReason).toBe("max_turns");
    expect(result.turnsUsed).toBe(2);
    expect(policy.client.counters.retries).toBe(2);
    await policy.close();

    await server.close();
    server = await startLlmServer({ respond: () => ({ status: 400, body: '{"error":"bad model"}' }) });
    const bad = new ChatModelPolicy({ baseUrl: server.url, model: "m", initialBackoffMs: 5 });
    const r2 = await runAgentLoop({ policy: bad, tools: TOOLS, messages: [{ role: "user", content: "t" }], executeTool: exec.execute, maxTurns: 2 });
    expect(server.requests).toHaveLength(1);
    expect(r2.finishReason).toBe("error");
    expect(r2.turnsUsed).toBe(0);
    expect(r2.error).toContain("HTTP 400");
    await bad.close();
  });

  it("retries a request that times out and gives up with an actionable error", async () => {
    server = await startLlmServer({ respond: (_b, i) => (i < 2 ? { hangMs: 30_000 } : { text: "ok" }) });
    const client = new ChatCompletionsClient({ baseUrl: server.url, timeoutMs: 150, initialBackoffMs: 5 });
    const c = await client.complete({ model: "m", messages: [{ role: "user", content: "x" }] });
    expect(c.choices[0]!.message.content).toBe("ok");
    expect(client.counters.retries).toBe(2);
    await server.close();
    server = await startLlmServer({ respond: () => ({ hangMs: 30_000 }) });
    const impatient = new ChatCompletionsClient({ baseUrl: server.url, timeoutMs: 100, maxRetries: 1, initialBackoffMs: 5 });
    const err = await impatient.complete({ model: "m", messages: [{ role: "user", content: "x" }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ChatRequestError);
    expect((err as Error).message).toMatch(/timed out after 100 ms.*gave up after 2 attempts/s);
    await Promise.all([client.close(), impatient.close()]);
  });

  it("retries a 200 whose body is an HTML error page like a 5xx, and counts retried calls, failed calls and the latency of completed ones", async () => {
    const html = "<html><body><h1>502 Bad Gateway</h1></body></html>";
    // Call 1: HTML twice, then a completion. Call 2: HTML every time (gives up after 3 tries).
    server = await startLlmServer({ respond: (_b, i) => (i < 2 || i >= 3 ? { status: 200, body: html } : { text: "ok" }) });
    const client = new ChatCompletionsClient({ baseUrl: server.url, maxRetries: 2, initialBackoffMs: 5 });
    const c = await client.complete({ model: "m", messages: [{ role: "user", content: "x" }] });
    expect(c.choices[0]!.message.content).toBe("ok");
    const err = await client.complete({ model: "m", messages: [{ role: "user", content: "y" }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ChatRequestError);
    expect((err as Error).message).toMatch(/not JSON: <html>.*gave up after 3 attempts/s);
    expect(server.requests).toHaveLength(6);
    expect(client.counters).toMatchObject({ requests: 6, retries: 4, retriedCalls: 2, failures: 1, completed: 1 });
    expect(client.latency.summary().count).toBe(1);
    expect(client.latency.summary().p50).toBeGreaterThan(0);
    await client.close();
  });

  it("keeps token ids and logprobs when the server returns them", async () => {
    server = await startLlmServer({ tokenIds: true, respond: (b) => (turnOf(b) === 1 ? { toolCalls: [{ name: "terminal", arguments: { command: "echo a" } }] } : { text: "bye" }) });
    const exec = fakeExecutor();
    const policy = new ChatModelPolicy({ baseUrl: server.url, model: "m" });
    const result = await runAgentLoop({ policy, tools: TOOLS, messages: [{ role: "user", content: "t" }], executeTool: exec.execute, maxTurns: 3 });
    await policy.close();
    expect(result.turns).toHaveLength(2);
    const t2 = result.turns[1]!.tokens!;
    expect(t2.completionTokenIds.length).toBe("bye<|im_end|>".length);
    expect(t2.completionLogprobs).toHaveLength(t2.completionTokenIds.length);
    expect(t2.promptTokenIds!.length).toBeGreaterThan(result.turns[0]!.tokens!.promptTokenIds!.length);
  });

  it("an oracle policy drives the loop with no model", async () => {
    const exec = fakeExecutor();
    const policy = OraclePolicy.fromSteps([{ toolCalls: [{ name: "terminal", arguments: { command: "echo 1" } }] }, { final: "all done" }]);
    const result = await runAgentLoop({ policy, tools: TOOLS, messages: [{ role: "user", content: "t" }], executeTool: exec.execute, maxTurns: 4 });
    expect(result).toMatchObject({ turnsUsed: 2, finishReason: "stop", finalResponse: "all done" });
    expect(exec.calls).toHaveLength(1);
  });
});

