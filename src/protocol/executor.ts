import { z } from "zod";
import { IMAGE_FAILURE_REASONS, ImageReferenceSchema } from "./images.js";
import { ToolCallSchema } from "./tool.js";

/**
 * A tool call as clients send it: `arguments` an object, or, as in OpenAI's `tool_calls`,
 * the JSON text of one (parsed here; text that is not a JSON object is a 400 naming it).
 */
const ExecutorToolCallSchema = ToolCallSchema.extend({
  arguments: z
    .preprocess((v, ctx) => {
      if (typeof v !== "string") return v;
      try {
        const parsed: unknown = JSON.parse(v);
        if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) return parsed;
      } catch {
        // said below
      }
      ctx.addIssue({ code: "custom", message: `arguments is text that is not a JSON object (OpenAI-style arguments must be the JSON text of an object, e.g. '{"command": "ls"}'): ${v.slice(0, 80)}` });
      return {};
    }, z.record(z.string(), z.unknown()))
    .default({}),
});

/** Executor HTTP service (compatible with the original's executor API). */
export const ExecutorExecuteRequestSchema = z.object({
  trajectory_id: z.string().min(1, "trajectory_id must not be empty"),
  tool: ExecutorToolCallSchema,
  timeout_s: z.number().positive().optional(),
});
export const ExecutorReleaseRequestSchema = z.object({
  trajectory_id: z.string().min(1, "trajectory_id must not be empty"),
  reset_workspace: z.boolean().default(true),
});

/** `POST /prepare_workspace`: reset the trajectory's slot into a workspace template (built where missing). */
export const ExecutorPrepareWorkspaceRequestSchema = z.object({
  trajectory_id: z.string().min(1, "trajectory_id must not be empty"),
  template: z.object({
    name: z.string().min(1),
    setup: z.array(z.string()).default([]),
    files: z.record(z.string(), z.string()).optional(),
    timeout_s: z.number().positive().optional(),
    /** A task image (protocol/images.ts): the slot's root; files and setup, when given, are built on it once per container. */
    image: ImageReferenceSchema.optional(),
  }),
});
export const ExecutorPrepareWorkspaceResponseSchema = z.object({
  success: z.boolean(),
  error: z.string(),
  /** The container died meanwhile: start the trajectory again (new trajectory id). */
  slot_lost: z.boolean().optional(),
  /** The container could not get the task image (the sandbox server's reason, protocol/images.ts): an infrastructure failure, never the trajectory's. */
  image_unavailable: z.enum(IMAGE_FAILURE_REASONS).optional(),
});

/**
 * `POST /fork`: the trajectory's slot is forked into new trajectories (`into`, ids not in
 * use), each holding a sibling slot whose workspace is a copy-on-write copy of the parent's
 * as it is now (docs/fork.md). All or nothing.
 */
export const ExecutorForkRequestSchema = z.object({
  trajectory_id: z.string().min(1, "trajectory_id must not be empty"),
  into: z.array(z.string().min(1, "a child trajectory id must not be empty")).min(1, "into must name at least one child trajectory").max(256, "into names at most 256 child trajectories"),
  timeout_s: z.number().positive().optional(),
});
export const ExecutorForkResponseSchema = z.object({
  success: z.boolean(),
  error: z.string(),
  /** The children, each now holding a slot (empty on failure). */
  into: z.array(z.string()),
  /** The parent's container died meanwhile: start the trajectory again (new trajectory id). */
  slot_lost: z.boolean().optional(),
});
export type ExecutorForkResponse = z.infer<typeof ExecutorForkResponseSchema>;

const byTrajectory = { trajectory_id: z.string().min(1, "trajectory_id must not be empty") };
export const ExecutorArtifactReadRequestSchema = z.object({
  ...byTrajectory,
  path: z.string().min(1),
  encoding: z.enum(["text", "base64"]).default("text"),
  max_bytes: z.number().int().positive().optional(),
  include_sha256: z.boolean().optional(),
});
export const ExecutorArtifactListRequestSchema = z.object({
  ...byTrajectory,
  path: z.string().default("."),
  recursive: z.boolean().default(false),
  max_entries: z.number().int().positive().optional(),
});
export const ExecutorArtifactArchiveRequestSchema = z.object({
  ...byTrajectory,
  path: z.string().default("."),
  format: z.literal("tar.gz").default("tar.gz"),
  max_bytes: z.number().int().positive().optional(),
  max_entries: z.number().int().positive().optional(),
});

/** ToolServer (external tools whose credentials live in that process). */
export const ToolServerExecuteRequestSchema = z.object({
  trajectory_id: z.string().optional(),
  tool: ToolCallSchema,
  timeout_s: z.number().positive().optional(),
  slot_id: z.string().optional(),
  container_addr: z.string().optional(),
});
