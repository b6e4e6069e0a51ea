import { isAbsolute, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { Logger } from "pino";
import type { z } from "zod";
import { defineTool } from "../tools/definition.js";
import type { ToolDefinition } from "../tools/types.js";
import { SlotpoolError } from "../protocol/errors.js";

/**
 * External tools: run inside the ToolServer process, where their credentials live, never in
 * a sandbox. A tool module (`slotpool tool-server --tools MODULE`) default-exports an array
 * of them:
 *
 *   export default [{
 *     name: "lookup_weather", description: "...", kind: "external",
 *     parameters: z.object({ city: z.string() }),
 *     async execute(args, ctx) { return `sunny in ${args.city}`; },
 *   }];
 */
export interface ExternalToolContext {
  trajectoryId?: string;
  /** The trajectory's slot and its container's URL, when it holds one. */
  slotId?: string;
  containerAddr?: string;
  timeoutMs: number;
  /** Aborted when the call times out; long work should stop then. */
  signal: AbortSignal;
  logger: Logger;
}

/** A string is a successful output; an object may set any result field. */
export type ExternalToolOutput = string | { success?: boolean; output?: string; error?: string; metadata?: Record<string, unknown> };

export interface ExternalTool<S extends z.ZodType = z.ZodType> extends ToolDefinition<S> {
  kind: "external";
  execute(args: z.output<S>, ctx: ExternalToolContext): Promise<ExternalToolOutput> | ExternalToolOutput;
}

export class ToolModuleError extends SlotpoolError {
  override name = "ToolModuleError";
}

/** Checks one external tool (typed helper for module authors writing TypeScript). */
export function defineExternalTool<S extends z.ZodType>(def: Omit<ExternalTool<S>, "kind"> & { kind?: "external" }): ExternalTool<S> {
  const tool = { ...def, kind: "external" as const } as ExternalTool<S>;
  defineTool(tool);
  if (typeof tool.execute !== "function") throw new ToolModuleError(`external tool '${tool.name}' has no execute(args, ctx) function`);
  return tool;
}

/** Imports a tool module and checks its default export (or `tools` export). */
export async function loadToolModule(modulePath: string): Promise<ExternalTool[]> {
  const abs = isAbsolute(modulePath) ? modulePath : resolve(process.cwd(), modulePath);
  let mod: Record<string, unknown>;
  try {
    mod = (await import(pathToFileURL(abs).href)) as Record<string, unknown>;
  } catch (err) {
    throw new ToolModuleError(`cannot load tool module ${abs}: ${(err as Error).message}`);
  }
  const list = mod["default"] ?? mod["tools"];
  if (!Array.isArray(list)) {
    throw new ToolModuleError(`tool module ${abs} must default-export an array of tools ({name, description, parameters, execute}); got ${typeof list}`);
  }
  return list.map((entry, i) => {
    const t = entry as Partial<ExternalTool>;
    if (!t || typeof t !== "object") throw new ToolModuleError(`tool module ${abs}: entry ${i} is not an object`);
    if (typeof t.name !== "string") throw new ToolModuleError(`tool module ${abs}: entry ${i} has no name`);
    if (!t.parameters || typeof (t.parameters as { safeParse?: unknown }).safeParse !== "function") {
      throw new ToolModuleError(`tool module ${abs}: tool '${t.name}' needs a zod schema in 'parameters'`);
    }
    try {
      return defineExternalTool({ description: "", ...t } as ExternalTool);
    } catch (err) {
      throw new ToolModuleError(`tool module ${abs}: ${(err as Error).message}`);
    }
  });
}
