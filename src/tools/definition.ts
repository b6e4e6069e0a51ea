import { z } from "zod";
import { InvalidToolDefinitionError } from "./errors.js";
import { isIsolationArg } from "./isolation-args.js";
import type { ToolResult } from "../protocol/tool.js";
import type { OpenAIFunctionTool, ToolDefinition, ToolOutput } from "./types.js";

/** OpenAI's rule for function names. */
const TOOL_NAME = /^[a-zA-Z0-9_-]{1,64}$/;

/** Checks a definition once, so a bad one fails at registration rather than mid-rollout. */
export function defineTool<S extends z.ZodType>(def: ToolDefinition<S>): ToolDefinition<S> {
  for (const name of [def.name, ...(def.aliases ?? [])]) {
    if (!TOOL_NAME.test(name)) {
      throw new InvalidToolDefinitionError(
        `tool name '${name}' is not allowed: use 1-64 letters, digits, '_' or '-' (the OpenAI function-name rule)`,
      );
    }
  }
  if (def.kind !== "sandbox" && def.kind !== "external" && def.kind !== "in-process") {
    throw new InvalidToolDefinitionError(`tool '${def.name}' has kind '${String(def.kind)}'; use 'sandbox', 'external' or 'in-process'`);
  }
  if (def.kind === "in-process" && typeof def.run !== "function") {
    throw new InvalidToolDefinitionError(`in-process tool '${def.name}' has no run(args, ctx) function`);
  }
  if (def.slotCommand !== undefined && (def.kind !== "sandbox" || typeof def.slotCommand !== "function")) {
    throw new InvalidToolDefinitionError(`tool '${def.name}': slotCommand must be a function (args) => string, on a tool of kind 'sandbox'`);
  }
  const schema = parametersJsonSchema(def);
  if (schema["type"] !== "object") {
    throw new InvalidToolDefinitionError(`tool '${def.name}' must take an object of named parameters (its schema has type '${String(schema["type"])}')`);
  }
  return def;
}

/** The tool's parameters as the JSON Schema the model sees (isolation arguments never appear). */
export function parametersJsonSchema(def: ToolDefinition): Record<string, unknown> {
  const schema: Record<string, unknown> = def.jsonSchema
    ? { ...def.jsonSchema }
    : (z.toJSONSchema(def.parameters, { io: "input", unrepresentable: "any" }) as Record<string, unknown>);
  delete schema["$schema"];
  const props = schema["properties"];
  if (props && typeof props === "object") {
    const kept = Object.fromEntries(Object.entries(props as Record<string, unknown>).filter(([k]) => !isIsolationArg(k)));
    schema["properties"] = kept;
    if (Array.isArray(schema["required"])) {
      schema["required"] = (schema["required"] as unknown[]).filter((k) => typeof k === "string" && !isIsolationArg(k));
    }
  }
  return schema;
}

/** One OpenAI chat-completions `tools[]` entry. */
export function toOpenAiTool(def: ToolDefinition): OpenAIFunctionTool {
  return {
    type: "function",
    function: { name: def.name, description: def.description, parameters: parametersJsonSchema(def) },
  };
}

/**
 * A definition for a tool known only by its OpenAI schema (e.g. listed by a ToolServer's
 * `GET /tools`): arguments are checked against that JSON Schema when zod can read it, and
 * accepted as any object otherwise (the ToolServer validates them again).
 */
export function toolFromOpenAiSchema(tool: OpenAIFunctionTool, kind: ToolDefinition["kind"] = "external"): ToolDefinition {
  const jsonSchema = tool.function.parameters ?? { type: "object", properties: {} };
  let parameters: z.ZodType;
  try {
    parameters = z.fromJSONSchema(jsonSchema as Parameters<typeof z.fromJSONSchema>[0]);
  } catch {
    parameters = z.record(z.string(), z.unknown());
  }
  return defineTool({
    name: tool.function.name,
    description: tool.function.description ?? "",
    parameters,
    kind,
    jsonSchema: { type: "object", ...jsonSchema },
  });
}

/** An in-process tool's ToolOutput as the ToolResult that goes into the conversation. */
export function toolOutputResult(out: ToolOutput, uniqId: string | null = null): ToolResult {
  if (typeof out === "string") return { success: true, output: out, error: "", metadata: {}, uniq_id: uniqId };
  const success = out.success ?? true;
  return { success, output: out.output ?? "", error: out.error ?? "", metadata: out.metadata ?? {}, uniq_id: uniqId };
}
