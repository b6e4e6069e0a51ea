import { z } from "zod";
import { SlotIdSchema } from "./sandbox.js";
import { ImageReferenceSchema } from "./images.js";

/**
 * Image builds on a sandbox server (`POST /images/build`): a base image and steps (E2B's
 * template steps: RUN, COPY, ENV, WORKDIR, USER), run one by one in a slot the caller holds,
 * whose root is the image so far. Each step's result is an image of its own (the changes it
 * made as one more layer, its user, working directory and environment in the config), kept
 * in the server's build layout and its image store, under a cache key made like Docker's:
 * the parent image's digest, the step, the hash of the files it copies. A build whose steps
 * are unchanged reuses every step and runs nothing.
 *
 * The answer is NDJSON (`ImageBuildEventSchema`): `step` as each step begins (cached or not),
 * `log` lines of what its commands print, then one `done` (the image, by digest and by an
 * `oci:` reference on this server; `pushed` when a destination was given) or `error`.
 *
 * COPY's files travel first, by hash: `PUT /images/contexts/<sha256 hex>` (a gzipped tar of the
 * files, as E2B's SDKs upload them), `GET /images/contexts/<hex>` answers 200 when present.
 */

/**
 * Why a build failed, stable (an `error` event's `code`; E2B's build status carries it as
 * `reason.errorCode`):
 * - `BUILD_STEP_FAILED`: a step's command exited non-zero (or ran as a user the image lacks);
 *   the build's own fault, its log says why;
 * - `BUILD_INVALID_STEP`: a step cannot run as given (RUN without a command, ENV without pairs, …);
 * - `BUILD_FILES_MISSING`: a COPY's files were never uploaded (by their hash);
 * - `BUILD_BASE_UNAVAILABLE`: the base image (or template) could not be had, or this server gives no images;
 * - `BUILD_TIMEOUT`: the build outlasted its `timeout`;
 * - `BUILD_CANCELLED`: its client went away, or the server is shutting down;
 * - `BUILD_PUSH_FAILED`: the image was built but could not be pushed to the registry;
 * - `BUILD_FAILED`: anything else (the build slot could not run the step): the infrastructure's.
 */
export const BUILD_FAILURE_CODES = ["BUILD_STEP_FAILED", "BUILD_INVALID_STEP", "BUILD_FILES_MISSING", "BUILD_BASE_UNAVAILABLE", "BUILD_TIMEOUT", "BUILD_CANCELLED", "BUILD_PUSH_FAILED", "BUILD_FAILED"] as const;
export type BuildFailureCode = (typeof BUILD_FAILURE_CODES)[number];

export const BUILD_STEP_TYPES = ["RUN", "COPY", "ENV", "WORKDIR", "USER", "ARG"] as const;
export type BuildStepType = (typeof BUILD_STEP_TYPES)[number];

const HashSchema = z.string().regex(/^[a-f0-9]{64}$/, "must be a lower-case hex sha256");

export const BuildStepSchema = z
  .object({
    type: z.string().transform((t) => t.toUpperCase()).pipe(z.enum(BUILD_STEP_TYPES)),
    args: z.array(z.string().refine((v) => !v.includes("\0"), "must not contain NUL bytes")).max(10_000).default([]),
    /** COPY: the hash of its files (the context uploaded under it). */
    files_hash: HashSchema.optional(),
    /** Run it even when the cache has it (and every step after it). */
    force: z.boolean().default(false),
  })
  .strict();
export type BuildStep = z.output<typeof BuildStepSchema>;

export const ImageBuildRequestSchema = z
  .object({
    /** The slot the build runs in (held by the caller: reset into each step's parent). */
    slot_id: SlotIdSchema,
    /** The base image. */
    from: ImageReferenceSchema,
    steps: z.array(BuildStepSchema).max(1000).default([]),
    /** Every step runs, whatever the cache holds (E2B's skipCache). */
    force: z.boolean().default(false),
    /** The build's commands reach the internet through the slot's own network namespace (default on, as E2B's builder). */
    allow_network: z.boolean().default(true),
    /** Deadline of the whole build, seconds. */
    timeout: z.number().positive().max(86_400).default(3600),
    /** Where the result is pushed as well (a registry reference `host[:port]/repo:tag`, or `oci:/dir:tag`). */
    push: ImageReferenceSchema.optional(),
  })
  .strict();
export type ImageBuildRequest = z.input<typeof ImageBuildRequestSchema>;

export const ImageBuildEventSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("step"), index: z.number().int(), step: z.string(), cached: z.boolean() }),
  z.object({ type: z.literal("log"), index: z.number().int().optional(), level: z.enum(["info", "warn", "error", "debug"]), message: z.string() }),
  z.object({
    type: z.literal("done"),
    /** The built image's manifest digest. */
    digest: z.string(),
    /** The image on this server (its build layout): any server of this host can read it. */
    reference: z.string(),
    /** Where it was pushed, when asked. */
    pushed: z.string().optional(),
    steps: z.number().int(),
    cached_steps: z.number().int(),
    build_ms: z.number(),
    /** The image's user and working directory (a template's defaults). */
    user: z.string(),
    working_dir: z.string(),
  }),
  z.object({
    type: z.literal("error"),
    message: z.string(),
    /** The failing step's index (E2B's `step`), or "base" / "finalize". */
    step: z.string().optional(),
    /** Why, stable (BUILD_FAILURE_CODES; a server of an earlier version sends none). */
    code: z.string().optional(),
  }),
]);
export type ImageBuildEvent = z.infer<typeof ImageBuildEventSchema>;

export const BuildContextHashSchema = HashSchema;
