import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  DuplicateToolError,
  InvalidToolDefinitionError,
  ToolArgumentsError,
  ToolRegistry,
  UnknownToolError,
  defineTool,
  toOpenAiTool,
} from "../../src/tools/index.js";
import { toolFromOpenAiSchema } from "../../src/tools/definition.js";
import { BROWSER_TOOL_NAMES } from "../../src/protocol/browser-tools.js";

describe("ToolRegistry", () => {
  const reg = ToolRegistry.withBuiltins();

  it("holds the built-in sandbox tools", () => {
    expect(reg.names()).toEqual(["bash", "bash_stateful", "tmux", "read_file", "write_file", ...BROWSER_TOOL_NAMES]);
    for (const t of reg.list()) expect(t.kind).toBe("sandbox");
  });

  it("resolves the Hermes aliases terminal → bash and terminal_stateful → bash_stateful", () => {
    expect(reg.resolve("terminal")?.name).toBe("bash");
    expect(reg.resolve("terminal_stateful")?.name).toBe("bash_stateful");
    expect(reg.validate("terminal", { command: "ls" }).tool.name).toBe("bash");
  });

  it("names an unknown tool and lists the available ones", () => {
    expect(() => reg.get("web_search")).toThrow(UnknownToolError);
    expect(() => reg.get("web_search")).toThrow(/unknown tool 'web_search'; available tools: bash, bash_stateful, tmux, read_file, write_file/);
  });

  it("turns zod parameters into OpenAI function schemas without isolation arguments", () => {
    const tools = reg.openAiTools();
    expect(tools).toHaveLength(5 + BROWSER_TOOL_NAMES.length);
    const bash = tools.find((t) => t.function.name === "bash")!;
    expect(bash.type).toBe("function");
    expect(bash.function.parameters["type"]).toBe("object");
    expect(bash.function.parameters["required"]).toEqual(["command"]);
    const props = bash.function.parameters["properties"] as Record<string, unknown>;
    expect(Object.keys(props).sort()).toEqual(["command", "timeout"]);
    expect(bash.function.parameters["$schema"]).toBeUndefined();
    // a tool whose schema declares a isolation argument still never offers it
    const leaky = defineTool({
      name: "leaky",
      description: "x",
      kind: "sandbox",
      parameters: z.object({ q: z.string(), allow_network: z.boolean() }),
    });
    const schema = toOpenAiTool(leaky).function.parameters;
    expect(Object.keys(schema["properties"] as object)).toEqual(["q"]);
    expect(schema["required"]).toEqual(["q"]);
  });

  it("validates arguments with a clear error naming the field", () => {
    const bad = reg.check("bash", { command: 42 });
    expect(bad.ok).toBe(false);
    if (!bad.ok) {
      expect(bad.error).toBeInstanceOf(ToolArgumentsError);
      expect(bad.error.message).toMatch(/invalid arguments for tool 'bash': command: .*string/);
    }
    expect(() => reg.validate("write_file", { path: "a.txt" })).toThrow(/write_file.*content/);
    expect(() => reg.validate("tmux", { action: "explode" })).toThrow(/action/);
  });

  it("strips isolation arguments the model tries to set", () => {
    const v = reg.validate("bash", { command: "curl x", allow_network: true, require_sandbox: false, require_stateful_sandbox: false });
    expect(v.args).toEqual({ command: "curl x" });
    expect(v.strippedIsolationArgs.sort()).toEqual(["allow_network", "require_sandbox", "require_stateful_sandbox"]);
  });

  it("rejects duplicate names and aliases, and bad definitions", () => {
    const r = new ToolRegistry();
    r.register(defineTool({ name: "a", description: "", kind: "sandbox", parameters: z.object({}), aliases: ["b"] }));
    expect(() => r.register(defineTool({ name: "b", description: "", kind: "sandbox", parameters: z.object({}) }))).toThrow(DuplicateToolError);
    expect(() => defineTool({ name: "has space", description: "", kind: "sandbox", parameters: z.object({}) })).toThrow(InvalidToolDefinitionError);
    expect(() => defineTool({ name: "s", description: "", kind: "sandbox", parameters: z.string() })).toThrow(/object of named parameters/);
  });

  it("builds external tools from an OpenAI schema and validates against it", () => {
    const ext = toolFromOpenAiSchema({
      type: "function",
      function: { name: "lookup_weather", description: "weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } },
    });
    expect(ext.kind).toBe("external");
    const r = new ToolRegistry([ext]);
    expect(r.check("lookup_weather", { city: "Oslo" }).ok).toBe(true);
    expect(r.check("lookup_weather", { city: 3 }).ok).toBe(false);
    expect(r.openAiTools()[0]!.function.parameters["required"]).toEqual(["city"]);
  });

  it("subsets by names and aliases", () => {
    expect(reg.subset(["terminal", "read_file"]).names()).toEqual(["bash", "read_file"]);
    expect(() => reg.subset(["nope"])).toThrow(UnknownToolError);
  });
});
