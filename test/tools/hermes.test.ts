import { describe, expect, it } from "vitest";
import {
  HermesParseError,
  ToolCallFormatError,
  formatHermesToolCall,
  formatHermesToolResponse,
  fromOpenAiToolCalls,
  parseHermesToolCalls,
  toOpenAiToolCalls,
} from "../../src/tools/index.js";
import { parseHermesToolCallsStrict } from "../../src/tools/hermes.js";

let n = 0;
const newId = () => `id${++n}`;

describe("Hermes tool-call parsing", () => {
  it("reads strict JSON blocks and keeps the text outside them", () => {
    const text = 'Let me look.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_call>\n<tool_call>{"name":"read_file","arguments":{"path":"a.txt"}}</tool_call>';
    const r = parseHermesToolCalls(text, { newId });
    expect(r.errors).toEqual([]);
    expect(r.content).toBe("Let me look.");
    expect(r.calls.map((c) => [c.name, c.arguments])).toEqual([
      ["bash", { command: "ls -la" }],
      ["read_file", { path: "a.txt" }],
    ]);
    expect(r.calls.every((c) => typeof c.uniq_id === "string")).toBe(true);
  });

  it("reads the name{json} variant", () => {
    const r = parseHermesToolCalls('<tool_call>terminal{"command": "echo hi"}</tool_call>');
    expect(r.errors).toEqual([]);
    expect(r.calls[0]).toMatchObject({ name: "terminal", arguments: { command: "echo hi" } });
  });

  it("accepts arguments given as a JSON string, and a block cut short at the end", () => {
    const r = parseHermesToolCalls('<tool_call>{"name":"bash","arguments":"{\\"command\\":\\"pwd\\"}"}</tool_call><tool_call>{"name":"bash","arguments":{"command":"id"}}');
    expect(r.errors).toEqual([]);
    expect(r.calls.map((c) => c.arguments)).toEqual([{ command: "pwd" }, { command: "id" }]);
  });

  it("reports invalid blocks with clear errors and keeps the good ones", () => {
    const r = parseHermesToolCalls(
      '<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>' +
        '<tool_call>{"arguments": {}}</tool_call>' +
        '<tool_call>{"name":"bash","arguments":[1]}</tool_call>' +
        "<tool_call>just words</tool_call>" +
        '<tool_call>{"name":"bash","arguments":{"command":"ok"}}</tool_call>',
    );
    expect(r.calls).toHaveLength(1);
    expect(r.errors).toHaveLength(4);
    expect(r.errors.every((e) => e instanceof HermesParseError)).toBe(true);
    expect(r.errors[0]!.message).toMatch(/not valid JSON/);
    expect(r.errors[1]!.message).toMatch(/no "name"/);
    expect(r.errors[2]!.message).toMatch(/"arguments" must be a JSON object, got an array/);
    expect(r.errors[3]!.message).toMatch(/expected \{"name"/);
    expect(() => parseHermesToolCallsStrict("<tool_call></tool_call>")).toThrow(/empty <tool_call> block/);
  });

  it("returns no calls for plain text", () => {
    expect(parseHermesToolCalls("The answer is 4.")).toEqual({ content: "The answer is 4.", calls: [], errors: [] });
  });

  it("round-trips through Hermes text and OpenAI tool_calls", () => {
    const calls = [
      { name: "bash", arguments: { command: "echo 'a<b>'" }, uniq_id: "c1" },
      { name: "write_file", arguments: { path: "x", content: "line1\nline2" }, uniq_id: "c2" },
    ];
    const text = calls.map(formatHermesToolCall).join("\n");
    const parsed = parseHermesToolCallsStrict(text).calls;
    expect(parsed.map((c) => [c.name, c.arguments])).toEqual(calls.map((c) => [c.name, c.arguments]));
    const openai = toOpenAiToolCalls(calls);
    expect(openai[0]).toEqual({ id: "c1", type: "function", function: { name: "bash", arguments: JSON.stringify(calls[0]!.arguments) } });
    expect(fromOpenAiToolCalls(openai)).toEqual(calls);
  });

  it("rejects OpenAI tool_calls whose arguments are not a JSON object", () => {
    expect(() => fromOpenAiToolCalls([{ id: "x", type: "function", function: { name: "bash", arguments: "{oops" } }])).toThrow(ToolCallFormatError);
    expect(() => fromOpenAiToolCalls([{ id: "x", type: "function", function: { name: "bash", arguments: "[1]" } }])).toThrow(/JSON object/);
  });

  it("formats a tool response block", () => {
    expect(formatHermesToolResponse("bash", { success: true, output: "hi\n", error: "" })).toBe('<tool_response>\n{"name":"bash","content":"hi\\n"}\n</tool_response>');
  });
});
