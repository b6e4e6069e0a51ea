import { z } from "zod";
import { SlotIdSchema } from "./sandbox.js";
import { TOOL_INFRA_CAUSES } from "./infra.js";
import { SessionVolumesSchema } from "./volumes.js";

/**
 * Process sessions (sandbox server routes `/processes/*`): a long-lived process in a slot,
 * outside the slot's call queue, whose output is streamed, whose stdin can be fed and that
 * can be signalled, listed and re-attached to. The E2B-compatible API (src/e2b) runs every
 * command through them; they live until they exit, are killed, or the slot is reset.
 *
 * `POST /processes/start` and `POST /processes/connect` answer with NDJSON lines
 * (`ProcessEventSchema`): `start` first, then `stdout`/`stderr` chunks (base64) as the
 * process prints, then `end`.
 */

const Base64Schema = z.string().regex(/^[A-Za-z0-9+/]*={0,2}$/, "must be base64");
/** Arguments reach the program as C strings: a NUL byte cannot be passed on. */
const Arg = z.string().refine((v) => !v.includes("\0"), "must not contain NUL bytes");

export const ProcessStartRequestSchema = z
  .object({
    slot_id: SlotIdSchema,
    /** Program and its arguments (run inside the slot's sandbox, no shell added). */
    cmd: Arg.pipe(z.string().min(1, "cmd must not be empty")),
    args: z.array(Arg).max(10_000).default([]),
    envs: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "environment variable names are letters, digits and _"), Arg).default({}),
    /** Working directory inside the sandbox (default /workspace). */
    cwd: Arg.optional(),
    /** Keep stdin open for `/processes/input` (else it reads /dev/null). */
    stdin: z.boolean().default(false),
    tag: z.string().max(256).optional(),
    /** Internet through the slot's own network namespace where the server offers it (else loopback only, as a bash call's). */
    allow_network: z.boolean().default(false),
    /** Also mount the slot's workspace at this path (E2B code expects /home/user). */
    workspace_alias: z.string().regex(/^\/home\/[A-Za-z0-9._-]+$/, "workspace_alias must be /home/<name>").optional(),
    /** Volumes (protocol/volumes.ts) bound read-write into the session's sandbox, each at its path. */
    volumes: SessionVolumesSchema.default([]),
    /**
     * In a slot whose root is a task image: run as this user of the image (a name or a uid, from
     * its /etc/passwd) instead of the image's User, with that user's HOME; an unknown name ends
     * the command with exit 126 (E2B's `user`). Ignored in a plain slot, which has one uid.
     */
    user: z.string().regex(/^[A-Za-z0-9._][A-Za-z0-9._-]{0,63}$/, "user must be a user name or a uid").optional(),
  })
  .strict();
export type ProcessStartRequest = z.input<typeof ProcessStartRequestSchema>;

export const ProcessSelectorSchema = z.object({ slot_id: SlotIdSchema, pid: z.number().int().min(1) }).strict();
export type ProcessSelector = z.infer<typeof ProcessSelectorSchema>;

export const ProcessInputRequestSchema = ProcessSelectorSchema.extend({ data: Base64Schema }).strict();
export type ProcessInputRequest = z.infer<typeof ProcessInputRequestSchema>;

export const ProcessSignalRequestSchema = ProcessSelectorSchema.extend({ signal: z.enum(["SIGTERM", "SIGKILL", "SIGINT", "SIGHUP"]) }).strict();
export type ProcessSignalRequest = z.infer<typeof ProcessSignalRequestSchema>;

export const ProcessSlotRequestSchema = z.object({ slot_id: SlotIdSchema }).strict();

export const ProcessInfoSchema = z.object({
  pid: z.number().int(),
  tag: z.string().optional(),
  cmd: z.string(),
  args: z.array(z.string()),
  envs: z.record(z.string(), z.string()),
  cwd: z.string().optional(),
});
export type ProcessInfo = z.infer<typeof ProcessInfoSchema>;

export const ProcessListResponseSchema = z.object({ processes: z.array(ProcessInfoSchema) });
export type ProcessListResponse = z.infer<typeof ProcessListResponseSchema>;

export const ProcessEventSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("start"), pid: z.number().int() }),
  z.object({ type: z.enum(["stdout", "stderr"]), data: Base64Schema }),
  z.object({
    type: z.literal("end"),
    /** Exit status; -1 when a signal ended the process. */
    exit_code: z.number().int(),
    /** The signal that ended it (e.g. "SIGKILL"), or null. */
    signal: z.string().nullable(),
    error: z.string().optional(),
    /**
     * Set when the infrastructure ended the process, not the program (protocol/infra.ts):
     * `command_killed` (the slot was reset from outside), `server_shutdown`, `sandbox_start`
     * (its sandbox could not start). Such an end is never the program's result.
     */
    infra: z.enum(TOOL_INFRA_CAUSES).optional(),
  }),
]);
export type ProcessEvent = z.infer<typeof ProcessEventSchema>;
