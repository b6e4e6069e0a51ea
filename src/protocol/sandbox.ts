import { z } from "zod";
import { ImageReferenceSchema, ResetImageSchema, SlotImageSchema } from "./images.js";

/**
 * Wire protocol of the sandbox server (one per container, N slots). The single source of
 * truth for the server (`src/sandbox/`) and its client (`src/pool/`). Field names are the
 * original Python server's, so its clients work unchanged.
 */

export const SlotIdSchema = z
  .string()
  .regex(/^slot_\d+$/, "slot_id must look like slot_0, slot_1, ...");

/**
 * Text that reaches a command line, a file name or the kernel: a NUL byte would cut it
 * there silently (argv and paths are C strings), so it is refused before anything runs.
 */
export const NO_NUL = (what: string) => z.string().refine((s) => !s.includes("\0"), `${what} must not contain a NUL byte (it would silently cut the text there)`);

/** Linux limits: a name (one path component) of at most 255 bytes, a path of at most 4095. */
export const NAME_MAX_BYTES = 255;
export const PATH_MAX_BYTES = 4095;

/**
 * Why a workspace path is refused before anything is touched (undefined: fine): NUL bytes,
 * a name or the whole path over the filesystem's limits, or `..` leading above the
 * workspace root read as written (`a/../../x`). Symlinks are checked where the path is
 * opened (src/sandbox/tools/path-guard.ts); this check keeps a refused path from creating
 * anything on its way.
 */
export function workspacePathProblem(path: string): string | undefined {
  if (path.includes("\0")) return "must not contain a NUL byte";
  if (Buffer.byteLength(path, "utf8") > PATH_MAX_BYTES) return `is longer than ${PATH_MAX_BYTES} bytes (the filesystem's limit)`;
  let rest = path;
  if (path.startsWith("/")) {
    const parts = path.split("/").filter((c) => c !== "" && c !== ".");
    if (parts[0] !== "workspace") return "is outside the workspace: absolute paths must be under /workspace/";
    rest = parts.slice(1).join("/");
  }
  let depth = 0;
  for (const c of rest.split("/")) {
    if (c === "" || c === ".") continue;
    if (Buffer.byteLength(c, "utf8") > NAME_MAX_BYTES) return `has a name longer than ${NAME_MAX_BYTES} bytes (the filesystem's limit): ${JSON.stringify(c.slice(0, 40))}…`;
    depth += c === ".." ? -1 : 1;
    if (depth < 0) return "escapes the workspace ('..' above its root)";
  }
  return undefined;
}

/**
 * What any slot's path must be, whatever the slot's root (undefined: fine): no NUL byte,
 * within the filesystem's limits. Where it may lead depends on the slot: a workspace slot
 * refuses a path outside /workspace (`workspacePathProblem`, checked by the server, which
 * knows the slot), a slot whose root is an image takes any path of its root.
 */
export function slotPathProblem(path: string): string | undefined {
  if (path.includes("\0")) return "must not contain a NUL byte";
  if (Buffer.byteLength(path, "utf8") > PATH_MAX_BYTES) return `is longer than ${PATH_MAX_BYTES} bytes (the filesystem's limit)`;
  for (const c of path.split("/")) {
    if (Buffer.byteLength(c, "utf8") > NAME_MAX_BYTES) return `has a name longer than ${NAME_MAX_BYTES} bytes (the filesystem's limit): ${JSON.stringify(c.slice(0, 40))}…`;
  }
  return undefined;
}

/** A file tool's or artifact route's path on the wire: `slotPathProblem`; the server then applies the slot's own rule. */
export const SlotPathSchema = z
  .string()
  .min(1, "path must not be empty")
  .superRefine((p, ctx) => {
    const problem = slotPathProblem(p);
    if (problem) ctx.addIssue({ code: "custom", message: `path ${problem}` });
  });

export const WorkspacePathSchema = z
  .string()
  .min(1, "path must not be empty")
  .superRefine((p, ctx) => {
    const problem = workspacePathProblem(p);
    if (problem) ctx.addIssue({ code: "custom", message: `path ${problem}` });
  });

// The per-tool argument schemas (and the isolation arguments) live in the tool table,
// tool-table.ts: one entry per built-in tool, read by the server, the executor and the model.

/**
 * Which reset of a slot a caller holds (from /reset, /fork or /health). A call (or artifact
 * request) that names it runs only if the slot has not been reset or forked into since; else
 * it is refused as an infra failure (`command_killed`), never run on an emptied workspace.
 */
export const SlotGenerationSchema = z.number().int().nonnegative();

export const ExecuteRequestSchema = z.object({
  slot_id: SlotIdSchema,
  tool: z.string().min(1, "tool must not be empty"),
  args: z.record(z.string(), z.unknown()).default({}),
  execution_id: z.string().nullable().optional(),
  /** Seconds. */
  timeout: z.number().positive().optional(),
  generation: SlotGenerationSchema.optional(),
});
export type ExecuteRequest = z.input<typeof ExecuteRequestSchema>;

export const ExecuteMetadataSchema = z
  .object({
    exit_code: z.number().int().nullable().optional(),
    sandboxed: z.boolean().optional(),
    /** Set on every result of a server started with --allow-unsandboxed that cannot sandbox: why, in words. */
    unsandboxed: z.string().optional(),
    network_isolated: z.boolean().optional(),
    timeout: z.boolean().optional(),
    truncated: z.boolean().optional(),
    /** Workspace-relative path of the full output when it was truncated. */
    output_file: z.string().optional(),
    /** Workspace-relative path for file tools. */
    path: z.string().optional(),
    duration_ms: z.number().optional(),
    /** Set when the infrastructure ended the call, not the command (protocol/infra.ts): a cause such as `sandbox_start`. */
    infra: z.string().optional(),
  })
  .catchall(z.unknown());
export type ExecuteMetadata = z.infer<typeof ExecuteMetadataSchema>;

export const ExecuteResponseSchema = z.object({
  success: z.boolean(),
  output: z.string(),
  error: z.string(),
  execution_id: z.string().nullable(),
  metadata: ExecuteMetadataSchema,
});
export type ExecuteResponse = z.infer<typeof ExecuteResponseSchema>;

export const BatchRequestSchema = z.array(ExecuteRequestSchema);
export const BatchResponseSchema = z.array(ExecuteResponseSchema);

/** One line of `POST /batch?stream=1` (NDJSON), sent as each call finishes. */
export const BatchStreamLineSchema = ExecuteResponseSchema.extend({
  index: z.number().int().nonnegative(),
});
export type BatchStreamLine = z.infer<typeof BatchStreamLineSchema>;

export const TemplateNameSchema = z
  .string()
  .regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/, "template name must be 1-64 characters of letters, digits, '.', '_' or '-', starting with a letter or digit");

export const ResetRequestSchema = z.object({
  slot_id: SlotIdSchema,
  /** Make the workspace a copy-on-write view of this template (built with POST /templates). */
  template: TemplateNameSchema.optional(),
  /**
   * Make the slot's root this image (protocol/images.ts names its forms), fetched first if
   * the server does not have it; what it cannot fetch is answered `image_unavailable` with
   * the slot left as it was.
   */
  image: ImageReferenceSchema.optional(),
});
export const ResetResponseSchema = z.object({
  success: z.boolean(),
  output: z.string(),
  error: z.string(),
  /** The slot's generation after this reset (older servers do not send it). */
  generation: SlotGenerationSchema.optional(),
  /** With `image`: which image and digest the slot's root is, its runtime, and what fetching it cost when this reset had to. */
  image: ResetImageSchema.optional(),
});
export type ResetResponse = z.infer<typeof ResetResponseSchema>;

/**
 * The isolation a server's slots get, in one place (`/health` → `isolation`): for run
 * summaries and reports. `summary` says it in one line of words.
 */
export const IsolationSummarySchema = z
  .object({
    sandboxed: z.boolean(),
    /** Why not sandboxed (only with --allow-unsandboxed: a server that cannot sandbox otherwise refuses to start). */
    unsandboxed_reason: z.string().optional(),
    /** "filter": every slot process runs under the slots' seccomp filter; "off": --no-seccomp or unsandboxed. Absent from older servers. */
    seccomp: z.enum(["filter", "off"]).optional(),
    /** With the filter: whether ptrace (strace, gdb) is allowed inside slots. */
    ptrace: z.boolean().optional(),
    memory: z.string(),
    memory_mb: z.number(),
    pids: z.string(),
    max_processes: z.number(),
    disk: z.string(),
    disk_mb: z.number(),
    /** What `allow_network: true` gets: its own namespace behind slirp4netns, loopback only, or the server's own network (unsandboxed). */
    network: z.enum(["slirp4netns", "loopback_only", "host_unsandboxed"]),
    summary: z.string(),
  })
  .catchall(z.unknown());
export type IsolationSummary = z.infer<typeof IsolationSummarySchema>;

/**
 * POST /fork: every slot of `into` becomes a copy-on-write copy of `slot_id`'s workspace as
 * it is now (its previous contents dropped as by a reset); the parent keeps running.
 * See docs/fork.md.
 */
export const ForkRequestSchema = z.object({
  slot_id: SlotIdSchema,
  into: z.array(SlotIdSchema).min(1, "into must name at least one child slot").max(256, "into names at most 256 child slots"),
});
export type ForkRequest = z.infer<typeof ForkRequestSchema>;
export const ForkResponseSchema = z.object({
  success: z.literal(true),
  slot_id: z.string(),
  into: z.array(z.string()),
  /** "overlay": copy-on-write layers, O(1) in the workspace's size; "copy": the files were copied. */
  mode: z.enum(["overlay", "copy"]),
  /** Server-side time from the parent's turn in its queue to the last child ready. */
  duration_ms: z.number(),
  /** Each child's generation after the fork, in `into`'s order (older servers do not send it). */
  generations: z.array(SlotGenerationSchema).optional(),
});
export type ForkResponse = z.infer<typeof ForkResponseSchema>;

export const HealthResponseSchema = z
  .object({
    status: z.literal("ok"),
    slots: z.number().int().nonnegative(),
    bwrap_available: z.boolean(),
    // Optional: older servers do not send them, and a client must still talk to those.
    sandbox_unavailable_reason: z.string().optional(),
    fast_path: z.boolean().optional(),
    /** Each slot's generation, in slot order (older servers do not send it). */
    slot_generations: z.array(SlotGenerationSchema).optional(),
    /** "filter": every slot process runs under the slots' seccomp filter; "off": --no-seccomp, or unsandboxed. */
    seccomp: z.enum(["filter", "off"]).optional(),
    /** With the filter: whether slots may use ptrace (strace, gdb). */
    ptrace: z.boolean().optional(),
    /** What `allow_network: true` gets: a user-mode network, or loopback only (and why). */
    internet: z.enum(["slirp4netns", "unavailable"]).optional(),
    internet_unavailable_reason: z.string().optional(),
    cgroups: z.string().optional(),
    slots_busy: z.number().int().nonnegative().optional(),
    isolation: IsolationSummarySchema.optional(),
    /** Task images: whether slots can have image roots here, the images cached, and which image each slot's root is (null: the server's own system). */
    images: z
      .object({
        available: z.boolean(),
        unavailable_reason: z.string().optional(),
        cached: z.array(z.object({ reference: z.string(), digest: z.string(), size_bytes: z.number(), in_use: z.number() })),
        used_bytes: z.number(),
        budget_bytes: z.number(),
      })
      .optional(),
    slot_images: z.array(SlotImageSchema).optional(),
  })
  .catchall(z.unknown());
export type HealthResponse = z.infer<typeof HealthResponseSchema>;

export const SlotStateSchema = z.enum(["idle", "busy", "resetting"]);
export const SlotsResponseSchema = z.object({
  slots: z.array(
    z
      .object({
        slot_id: SlotIdSchema,
        state: SlotStateSchema,
        /** Path as the commands see it (always /workspace); host paths are not exposed. */
        workspace: z.string(),
      })
      .catchall(z.unknown()),
  ),
});
export type SlotsResponse = z.infer<typeof SlotsResponseSchema>;

export const ArtifactReadRequestSchema = z.object({
  slot_id: SlotIdSchema,
  path: SlotPathSchema,
  encoding: z.enum(["text", "base64"]).default("text"),
  max_bytes: z.number().int().positive().optional(),
  include_sha256: z.boolean().optional(),
  generation: SlotGenerationSchema.optional(),
});
export type ArtifactReadRequest = z.input<typeof ArtifactReadRequestSchema>;
export const ArtifactReadResponseSchema = z.object({
  success: z.boolean(),
  content: z.string(),
  encoding: z.enum(["text", "base64"]),
  truncated: z.boolean(),
  bytes: z.number().int().nonnegative(),
  file_size: z.number().int().nonnegative(),
  path: z.string(),
  mime: z.string(),
  sha256: z.string().nullable().optional(),
  error: z.string().optional(),
  /** `metadata.infra`: the call was cut off or refused by the infrastructure (protocol/infra.ts), not the path's fault. */
  metadata: z.record(z.string(), z.unknown()).optional(),
});
export type ArtifactReadResponse = z.infer<typeof ArtifactReadResponseSchema>;

export const ArtifactListRequestSchema = z.object({
  slot_id: SlotIdSchema,
  path: SlotPathSchema.default("."),
  recursive: z.boolean().default(false),
  max_entries: z.number().int().positive().optional(),
  generation: SlotGenerationSchema.optional(),
});
export type ArtifactListRequest = z.input<typeof ArtifactListRequestSchema>;
export const ArtifactEntrySchema = z.object({
  path: z.string(),
  type: z.enum(["file", "dir", "symlink", "other"]),
  size: z.number().int().nonnegative(),
});
export const ArtifactListResponseSchema = z.object({
  success: z.boolean(),
  entries: z.array(ArtifactEntrySchema),
  truncated: z.boolean(),
  path: z.string(),
  error: z.string().optional(),
  /** `metadata.infra`: the call was cut off or refused by the infrastructure (protocol/infra.ts), not the path's fault. */
  metadata: z.record(z.string(), z.unknown()).optional(),
});
export type ArtifactListResponse = z.infer<typeof ArtifactListResponseSchema>;

export const ArtifactArchiveRequestSchema = z.object({
  slot_id: SlotIdSchema,
  path: SlotPathSchema.default("."),
  format: z.literal("tar.gz").default("tar.gz"),
  max_bytes: z.number().int().positive().optional(),
  max_entries: z.number().int().positive().optional(),
  generation: SlotGenerationSchema.optional(),
});
export type ArtifactArchiveRequest = z.input<typeof ArtifactArchiveRequestSchema>;
export const ArtifactArchiveResponseSchema = z.object({
  success: z.boolean(),
  content: z.string(),
  encoding: z.literal("base64"),
  format: z.literal("tar.gz"),
  bytes: z.number().int().nonnegative(),
  entries: z.number().int().nonnegative(),
  path: z.string(),
  error: z.string().optional(),
  /** `metadata.infra`: the call was cut off or refused by the infrastructure (protocol/infra.ts), not the path's fault. */
  metadata: z.record(z.string(), z.unknown()).optional(),
});
export type ArtifactArchiveResponse = z.infer<typeof ArtifactArchiveResponseSchema>;

/** Body of every 4xx/5xx answer of our servers. */
export const ErrorBodySchema = z.object({
  error: z.string(),
  /** For validation errors: the dotted path of the offending field. */
  field: z.string().optional(),
});
export type ErrorBody = z.infer<typeof ErrorBodySchema>;

/** `POST /templates`: build a workspace template once (idempotent by name + content hash). */
export const TemplateBuildRequestSchema = z.object({
  name: TemplateNameSchema,
  /** Shell commands run in order in /workspace (sandboxed, like `bash`); the first failure fails the build. */
  setup: z.array(NO_NUL("a setup command").pipe(z.string().min(1, "a setup command must not be empty"))).max(256),
  /** Files written into /workspace before the commands run: workspace-relative path → UTF-8 content. */
  files: z.record(z.string(), z.string()).optional(),
  /** Wall-clock limit of the whole build, seconds (capped by the server's --max-timeout). */
  timeout: z.number().positive().optional(),
  /**
   * A template on an image (protocol/images.ts): `files` are written relative to the image's
   * WorkingDir, `setup` runs in the image's root as its User (without network), and a reset
   * into the template gives the slot that root: the image with the template's changes on top,
   * every path writable. Without it a template is a workspace tree (the host's system around it).
   */
  image: ImageReferenceSchema.optional(),
});
export type TemplateBuildRequest = z.infer<typeof TemplateBuildRequestSchema>;

export const TemplateInfoSchema = z.object({
  name: z.string(),
  /** sha256 of the setup commands and files (hex). */
  hash: z.string(),
  size_bytes: z.number().int().nonnegative(),
  files: z.number().int().nonnegative(),
  build_ms: z.number().nonnegative(),
  /** Slots whose workspace is a view of this template now (it is not evicted while > 0). */
  in_use: z.number().int().nonnegative(),
  last_used: z.string(),
  /** A template on an image: which image (and digest) it was built on. */
  image: z.object({ reference: z.string(), digest: z.string() }).optional(),
  /** Made of a slot's files (`POST /templates/capture`, protocol/template-capture.ts): kept until deleted, never evicted. */
  captured: z.boolean().optional(),
});
export type TemplateInfo = z.infer<typeof TemplateInfoSchema>;

export const TemplateBuildResponseSchema = z.object({
  success: z.boolean(),
  /** True when this request ran the build; false when the template was already there (or another request built it). */
  built: z.boolean(),
  output: z.string(),
  error: z.string(),
  template: TemplateInfoSchema.optional(),
});
export type TemplateBuildResponse = z.infer<typeof TemplateBuildResponseSchema>;

export const TemplateListResponseSchema = z.object({
  templates: z.array(TemplateInfoSchema),
  budget_bytes: z.number().int().nonnegative(),
  /** How slots get their view: "overlay" (copy-on-write, root) or "copy" (a copy per reset). */
  mode: z.enum(["overlay", "copy"]),
});
export type TemplateListResponse = z.infer<typeof TemplateListResponseSchema>;
