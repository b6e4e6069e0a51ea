import { z } from "zod";
import type { ToolStep } from "./episode.js";
import type { ValidationIssue } from "./errors.js";

/**
 * OpenEnv's wire format (huggingface/OpenEnv, `src/openenv/core/env_server/types.py` and
 * `mcp_types.py`): the WebSocket messages a client sends, the actions of a tool-calling
 * environment, and how a step's answer is laid out.
 */

export const ResetDataSchema = z.looseObject({
  seed: z.number().int().min(0).optional(),
  episode_id: z.string().min(1).max(255).optional(),
});

export const ListToolsActionSchema = z.object({ type: z.literal("list_tools"), metadata: z.record(z.string(), z.unknown()).optional() }).strict();
export const CallToolActionSchema = z
  .object({
    type: z.literal("call_tool"),
    tool_name: z.string().min(1),
    arguments: z.record(z.string(), z.unknown()).default({}),
    metadata: z.record(z.string(), z.unknown()).optional(),
  })
  .strict();
export const ActionSchema = z.discriminatedUnion("type", [ListToolsActionSchema, CallToolActionSchema]);
export type Action = z.output<typeof ActionSchema>;

export const WsMessageSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("reset"), data: ResetDataSchema.default({}) }).strict(),
  z.object({ type: z.literal("step"), data: z.record(z.string(), z.unknown()) }).strict(),
  z.object({ type: z.literal("state") }).strict(),
  z.object({ type: z.literal("mcp"), data: z.record(z.string(), z.unknown()) }).strict(),
  z.object({ type: z.literal("close") }).strict(),
]);
export type WsMessage = z.output<typeof WsMessageSchema>;
export const WS_MESSAGE_TYPES = ["reset", "step", "state", "mcp", "close"] as const;

/** `{observation, reward, done, metadata?}`: what reset and step answer (the data of an observation frame). */
export interface StepAnswer {
  observation: Record<string, unknown>;
  reward: number | null;
  done: boolean;
  metadata?: Record<string, unknown>;
}

/**
 * A call_tool step as OpenEnv's CallToolObservation: `result` in FastMCP's layout, whose
 * `data` (the tool's output text) is what OpenEnv's MCPToolClient.call_tool returns; `error`
 * only when the call never reached the tool (tool_not_found, invalid_args).
 */
export function callToolAnswer(step: ToolStep, text: string): StepAnswer {
  const exit = step.result.metadata["exit_code"];
  const metadata = step.done ? step.metadata : {};
  return {
    observation: {
      tool_name: step.toolName,
      result: {
        data: step.result.output,
        content: [{ type: "text", text }],
        structured_content: { output: step.result.output, success: step.result.success, ...(typeof exit === "number" ? { exit_code: exit } : {}), ...(step.result.error ? { error: step.result.error } : {}) },
        is_error: !step.result.success,
      },
      error: step.error ?? null,
      metadata,
    },
    reward: step.reward,
    done: step.done,
    metadata,
  };
}

/** Every problem of a refused message, as OpenEnv's VALIDATION_ERROR frames list them (pydantic's errors() layout). */
export function validationIssues(error: z.ZodError): ValidationIssue[] {
  return error.issues.map((i) => ({ type: i.code, loc: i.path.map((p) => (typeof p === "number" ? p : String(p))), msg: i.message }));
}

/** One line naming what is wrong with a message (zod's first issue, with its field). */
export function firstProblem(error: z.ZodError): string {
  const issue = error.issues[0]!;
  const where = issue.path.map(String).join(".");
  return where ? `${where}: ${issue.message}` : issue.message;
}

/** The JSON Schemas of /schema: actions, observations (and, as OpenEnv >= 0.10 publishes it, reset's own), and state of a slotpool env served over OpenEnv. */
export function schemas(): { action: unknown; observation: unknown; reset_observation: unknown; state: unknown } {
  const tool = { type: "object", properties: { name: { type: "string" }, description: { type: "string" }, input_schema: { type: "object" } }, required: ["name", "description", "input_schema"] };
  return {
    reset_observation: {
      type: "object",
      description: "what reset answers: the task of the episode's item, its chat messages and the tools",
      properties: {
        episode_id: { type: "string" },
        task: { type: "string" },
        messages: { type: "array", items: { type: "object", properties: { role: { type: "string" }, content: { anyOf: [{ type: "string" }, { type: "null" }] } }, required: ["role"] } },
        available_tools: { type: "array", items: tool },
        max_turns: { type: "integer", minimum: 1 },
        item_index: { type: "integer", minimum: 0 },
      },
      required: ["episode_id", "task", "messages", "available_tools", "max_turns", "item_index"],
    },
    action: z.toJSONSchema(ActionSchema, { io: "input" }),
    observation: {
      type: "object",
      description: "reset: the task (episode_id, task, messages, available_tools, max_turns, item_index); call_tool: tool_name, result {data, content, structured_content, is_error}, error; list_tools: tools",
      properties: {
        episode_id: { type: "string" },
        task: { type: "string" },
        messages: { type: "array", items: { type: "object" } },
        available_tools: { type: "array", items: { $ref: "#/$defs/tool" } },
        tools: { type: "array", items: { $ref: "#/$defs/tool" } },
        tool_name: { type: "string" },
        result: { type: "object", properties: { data: { type: "string" }, content: { type: "array" }, structured_content: { type: "object" }, is_error: { type: "boolean" } } },
        error: { anyOf: [{ type: "null" }, { type: "object", properties: { error_type: { enum: ["tool_not_found", "invalid_args"] }, message: { type: "string" } } }] },
        metadata: { type: "object" },
      },
      $defs: { tool },
    },
    state: {
      type: "object",
      properties: {
        episode_id: { anyOf: [{ type: "string" }, { type: "null" }] },
        step_count: { type: "integer", minimum: 0, description: "tool calls of the episode so far" },
        done: { type: "boolean" },
        reward: { anyOf: [{ type: "number" }, { type: "null" }] },
        max_turns: { type: "integer" },
        item_index: { type: "integer" },
      },
      required: ["episode_id", "step_count"],
    },
  };
}
