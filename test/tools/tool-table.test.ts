/**
 * The tool table is the one source: the model's schemas, the registry's checks and the
 * sandbox server's checks all come from the same entry, so they cannot drift apart again
 * (they had: an empty command was refused by the executor only).
 */
import { describe, expect, it } from "vitest";
import { ISOLATION_ARG_NAMES, TOOL_TABLE, builtinTool, builtinToolNames } from "../../src/protocol/tool-table.js";
import { BUILTIN_TOOLS } from "../../src/tools/builtin.js";
import { parametersJsonSchema } from "../../src/tools/definition.js";
import { ToolRegistry } from "../../src/tools/registry.js";

describe("the tool table", () => {
  it("each built-in ToolDefinition is its table entry: same schema object, aliases, description, isolation arguments", () => {
    expect(BUILTIN_TOOLS.map((t) => t.name)).toEqual(TOOL_TABLE.map((e) => e.name));
    for (const entry of TOOL_TABLE) {
      const def = BUILTIN_TOOLS.find((t) => t.name === entry.name)!;
      expect(def.parameters).toBe(entry.args);
      expect(def.aliases).toEqual(entry.aliases);
      expect(def.description).toBe(entry.description);
      expect(def.isolationArgs).toEqual(entry.isolationArgs);
    }
  });

  it("resolves every alias to its tool and claims each name once", () => {
    expect(builtinTool("terminal")?.name).toBe("bash");
    expect(builtinTool("terminal_stateful")?.name).toBe("bash_stateful");
    expect(builtinTool("Bash")).toBeUndefined();
    const names = TOOL_TABLE.flatMap((e) => [e.name, ...e.aliases]);
    expect(new Set(names).size).toBe(names.length);
    expect(builtinToolNames().sort()).toEqual([...names].sort());
  });

  it("the model's JSON Schema has the described arguments and never a isolation argument", () => {
    for (const def of BUILTIN_TOOLS) {
      const schema = parametersJsonSchema(def) as { properties: Record<string, { description?: string }>; required?: string[] };
      for (const p of ISOLATION_ARG_NAMES) expect(Object.keys(schema.properties)).not.toContain(p);
      // The seed's browser_back, browser_close and browser_get_images take no argument; every other tool has some.
      if (!["browser_back", "browser_close", "browser_get_images"].includes(def.name)) expect(Object.keys(schema.properties).length, def.name).toBeGreaterThan(0);
      for (const [name, prop] of Object.entries(schema.properties)) expect(prop.description, `${def.name}.${name}`).toBeTruthy();
    }
    expect(parametersJsonSchema(BUILTIN_TOOLS[0]!)).toMatchObject({ type: "object", required: ["command"], properties: { command: { type: "string", minLength: 1 } } });
  });

  it("the executor's check and the server's check agree on each call", () => {
    const registry = ToolRegistry.withBuiltins();
    const calls: Array<[string, Record<string, unknown>, boolean]> = [
      ["bash", { command: "ls" }, true],
      ["bash", { command: "" }, false],
      ["bash", { command: "a\0b" }, false],
      ["terminal_stateful", { command: "" }, false],
      ["tmux", { action: "dance" }, false],
      ["tmux", { action: "send_keys", keys: "x\0" }, false],
      // Where a path may lead depends on the slot's root (a workspace, or an image's whole root,
      // docs/images.md): the server refuses this one for a workspace slot, naming args.path
      // (test/sandbox/file-routes.test.ts), before anything is opened.
      ["read_file", { path: "a/../../etc/passwd" }, true],
      ["read_file", { path: "a\0b" }, false],
      ["read_file", { path: "/workspace/a.txt" }, true],
      ["write_file", { path: "a.txt" }, false],
      ["write_file", { path: "a.txt", content: "" }, true],
    ];
    for (const [name, args, ok] of calls) {
      expect(registry.check(name, args).ok, `executor: ${name} ${JSON.stringify(args)}`).toBe(ok);
      expect(builtinTool(name)!.args.safeParse(args).success, `server: ${name} ${JSON.stringify(args)}`).toBe(ok);
    }
  });
});
