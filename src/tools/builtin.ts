import { TOOL_TABLE, type ToolTableEntry } from "../protocol/tool-table.js";
import { defineTool } from "./definition.js";
import type { ToolDefinition } from "./types.js";

/**
 * The sandbox tools every sandbox server offers, derived from the tool table
 * (`protocol/tool-table.ts`): the model sees each entry's schema without its isolation
 * arguments (parametersJsonSchema drops them).
 */
function fromTable(entry: ToolTableEntry): ToolDefinition {
  return defineTool({
    name: entry.name,
    description: entry.description,
    parameters: entry.args,
    kind: "sandbox",
    aliases: entry.aliases,
    isolationArgs: entry.isolationArgs,
    ...(entry.timeoutArg ? { timeoutArg: entry.timeoutArg } : {}),
  });
}

/** Every built-in sandbox tool, in the order they are offered to a model. */
export const BUILTIN_TOOLS: readonly ToolDefinition[] = TOOL_TABLE.map(fromTable);

const byName = (name: string): ToolDefinition => BUILTIN_TOOLS.find((t) => t.name === name)!;
export const bashTool = byName("bash");
export const bashStatefulTool = byName("bash_stateful");
export const tmuxTool = byName("tmux");
export const readFileTool = byName("read_file");
export const writeFileTool = byName("write_file");
