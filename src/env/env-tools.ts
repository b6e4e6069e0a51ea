import type { z } from "zod";
import { builtinTool } from "../protocol/tool-table.js";
import type { ToolCall, ToolResult } from "../protocol/tool.js";
import { defineTool, toolOutputResult } from "../tools/definition.js";
import { isSlotLostError } from "../pool/errors.js";
import { DuplicateToolError, InvalidToolDefinitionError, type ToolArgumentsError, type UnknownToolError } from "../tools/errors.js";
import type { ToolRegistry } from "../tools/registry.js";
import type { ToolDefinition, ToolOutput } from "../tools/types.js";
import type { ToolContext } from "./tool-context.js";
import { ToolContextInfraError } from "./errors.js";

/**
 * An env's own tools (a `submit`, a `run_tests`), offered to the model beside the built-ins
 * and routed by the same registry, short of writing a backend:
 *  - `run(args, ctx)`: in the env's process, with the trajectory's ToolContext;
 *  - `command(args)`: a shell command run in the trajectory's slot (as `bash`, with its isolation arguments).
 * See docs/tools.md.
 */
interface EnvToolBase<S extends z.ZodObject> {
  name: string;
  description: string;
  parameters: S;
  aliases?: readonly string[];
}
export interface InProcessToolSpec<S extends z.ZodObject> extends EnvToolBase<S> {
  run(args: z.output<S>, ctx: ToolContext): Promise<ToolOutput> | ToolOutput;
}
export interface SlotToolSpec<S extends z.ZodObject> extends EnvToolBase<S> {
  command(args: z.output<S>): string;
}
export type EnvToolSpec<S extends z.ZodObject> = InProcessToolSpec<S> | SlotToolSpec<S>;

/**
 * Checks an env tool once, where it is written: a bad name, a name or alias a built-in tool
 * already has, or neither `run` nor `command` (or both) throws here, not mid-rollout.
 */
export function defineEnvTool<S extends z.ZodObject>(spec: EnvToolSpec<S>): ToolDefinition<S> {
  for (const name of [spec.name, ...(spec.aliases ?? [])]) {
    const builtin = builtinTool(name);
    if (builtin) {
      throw new DuplicateToolError(`env tool '${spec.name}': the name '${name}' is the built-in tool '${builtin.name}'${builtin.name === name ? "" : "'s alias"}; pick another name`);
    }
  }
  const run = "run" in spec ? spec.run : undefined;
  const command = "command" in spec ? spec.command : undefined;
  if ((run === undefined) === (command === undefined)) {
    throw new InvalidToolDefinitionError(`env tool '${spec.name}' needs exactly one of run(args, ctx) (in-process) or command(args) (in the slot)`);
  }
  const base = { name: spec.name, description: spec.description, parameters: spec.parameters, ...(spec.aliases ? { aliases: spec.aliases } : {}) };
  return run
    ? defineTool<S>({ ...base, kind: "in-process", run: run as ToolDefinition<S>["run"] })
    : defineTool<S>({ ...base, kind: "sandbox", slotCommand: command! });
}

/**
 * Adds an env's tools to the backend's registry (where the executor routes them) and returns
 * what takes them out again, so a backend shared by env instances one after another does not
 * keep the previous one's tools. A name another tool already has there is refused, naming both.
 */
export function registerEnvTools(registry: ToolRegistry, tools: readonly ToolDefinition[]): () => void {
  const added: ToolDefinition[] = [];
  const removeAll = () => {
    for (const t of added.splice(0)) registry.unregister(t);
  };
  for (const t of tools) {
    for (const name of [t.name, ...(t.aliases ?? [])]) {
      const taken = registry.resolve(name);
      if (taken) {
        removeAll();
        throw new DuplicateToolError(`env tool '${t.name}': the name '${name}' is already taken by the ${taken.kind} tool '${taken.name}' in this backend's registry (another env's tool on a shared backend, or the ToolServer's); pick another name`);
      }
    }
    registry.register(t);
    added.push(t);
  }
  return removeAll;
}

/**
 * Runs an in-process tool for one call: arguments checked against its schema (isolation
 * arguments dropped), its output as a ToolResult. Its own exceptions become a failed result
 * the model reads, as a failing command's would; a lost slot and a ctx call the
 * infrastructure cut off (ToolContextInfraError) propagate.
 */
export async function runInProcessTool(registry: ToolRegistry, tool: ToolDefinition, args: Record<string, unknown> | undefined, ctx: ToolContext, uniqId: string | null): Promise<ToolResult> {
  const checked = registry.check(tool.name, args);
  if (!checked.ok) return failed(checked.error, uniqId);
  try {
    return toolOutputResult(await tool.run!(checked.args, ctx), uniqId);
  } catch (err) {
    if (isSlotLostError(err) || err instanceof ToolContextInfraError) throw err;
    return { success: false, output: "", error: `tool '${tool.name}' failed: ${(err as Error).message}`, metadata: {}, uniq_id: uniqId };
  }
}

function failed(error: UnknownToolError | ToolArgumentsError, uniqId: string | null): ToolResult {
  return { success: false, output: "", error: error.message, metadata: { tool_error: error.name }, uniq_id: uniqId };
}

/**
 * The env's routing of one model call, by the registry's definition (resolved here once):
 * an in-process tool runs with `ctx`; every other tool goes to the executor under its
 * canonical name (an unknown name too, so the executor's error lists the known tools).
 */
export function routeToolCall(registry: ToolRegistry, call: ToolCall, ctx: ToolContext, viaExecutor: (call: ToolCall) => Promise<ToolResult>): Promise<ToolResult> {
  const def = registry.resolve(call.name);
  if (def?.kind === "in-process") return runInProcessTool(registry, def, call.arguments, ctx, call.uniq_id ?? null);
  return viaExecutor(def && def.name !== call.name ? { ...call, name: def.name } : call);
}
