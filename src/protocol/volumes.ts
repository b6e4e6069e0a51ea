import { z } from "zod";

/**
 * Volumes (sandbox server routes `/volumes/*`): named persistent directories kept in the
 * server's volumes directory (`--volumes-dir`, shared by every container of a pool: the
 * local provisioner's one folder, a Nomad host volume), outliving every slot. A process
 * session may mount volumes (`/processes/start`'s `volumes`); the content routes read and
 * write them from outside any slot. The E2B server's `Volume` API is built on them
 * (src/e2b, docs/e2b.md).
 *
 * Routes (JSON in and out unless said; errors `{error, field?}`: 400 a bad field, 404 no
 * such volume or path, 409 a name or path that exists, or a directory where a file is meant):
 *   POST /volumes/create    {volume_id, name, token}           → VolumeInfo
 *   POST /volumes/list      {}                                  → {volumes: VolumeInfo[]}
 *   POST /volumes/get       {volume_id}                         → VolumeInfo
 *   POST /volumes/delete    {volume_id}                         → {}
 *   POST /volumes/stat      {volume_id, path}                   → VolumeEntry
 *   POST /volumes/list-dir  {volume_id, path, depth?}           → {entries: VolumeEntry[]}
 *   POST /volumes/mkdir     {volume_id, path, force?, uid?, gid?, mode?} → VolumeEntry (201 in E2B's terms)
 *   POST /volumes/chmeta    {volume_id, path, uid?, gid?, mode?} → VolumeEntry
 *   POST /volumes/remove    {volume_id, path}                   → {}
 *   GET  /volumes/file?volume_id=&path=                         → the file's bytes (streamed)
 *   PUT  /volumes/file?volume_id=&path=&force=&uid=&gid=&mode=  (body: the bytes) → VolumeEntry
 * A volume path is absolute from the volume's root (`/dir/file`; a relative one is taken from
 * the root); `..` above the root and symlinks leading out of the volume are refused.
 */

export const VolumeIdSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/, "a volume id is letters, digits, '_' and '-' (at most 128)");
/** E2B's volume names: letters, digits, '.', '_' and '-'. */
export const VolumeNameSchema = z.string().regex(/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/, "a volume name is letters, digits, '.', '_' and '-' (at most 128), starting with a letter or digit");
const VolumePath = z
  .string()
  .max(4096)
  .refine((p) => !p.includes("\0"), "must not contain NUL bytes");
const Id = z.number().int().min(0).max(4294967294);
const Mode = z.number().int().min(0).max(0o7777);

/** Where a session sees a volume: an absolute path outside the system directories and /proc, /dev. */
export const VolumeMountPathSchema = z
  .string()
  .max(1024)
  .regex(/^\/[^\0]*$/, "a mount path is absolute")
  .refine((p) => !p.split("/").includes(".."), "a mount path has no '..'")
  .refine((p) => !/^\/(usr|bin|sbin|lib|lib32|lib64|libx32|etc|proc|dev|sys|run|tmp|workspace|opt\/slotpool)?(\/|$)/.test(p.replace(/\/+$/, "") + "/"), "a volume cannot be mounted at /, /tmp, /workspace or over a system directory (/usr, /etc, /proc, /dev, ...)");

export const VolumeMountSchema = z.object({ volume_id: VolumeIdSchema, path: VolumeMountPathSchema }).strict();
export type VolumeMount = z.infer<typeof VolumeMountSchema>;

export const VolumeCreateRequestSchema = z.object({ volume_id: VolumeIdSchema, name: VolumeNameSchema, token: z.string().min(16).max(256) }).strict();
export const VolumeSelectorSchema = z.object({ volume_id: VolumeIdSchema }).strict();
export const VolumePathRequestSchema = z.object({ volume_id: VolumeIdSchema, path: VolumePath }).strict();
export const VolumeListDirRequestSchema = VolumePathRequestSchema.extend({ depth: z.number().int().min(1).max(32).default(1) }).strict();
export const VolumeMkdirRequestSchema = VolumePathRequestSchema.extend({ force: z.boolean().default(false), uid: Id.optional(), gid: Id.optional(), mode: Mode.optional() }).strict();
export const VolumeChmetaRequestSchema = VolumePathRequestSchema.extend({ uid: Id.optional(), gid: Id.optional(), mode: Mode.optional() }).strict();

const QueryBool = z.enum(["true", "false", "1", "0"]).transform((v) => v === "true" || v === "1");
const QueryId = z.coerce.number().int().min(0).max(4294967294);
export const VolumeFileQuerySchema = z
  .object({
    volume_id: VolumeIdSchema,
    path: VolumePath,
    force: QueryBool.default(false),
    uid: QueryId.optional(),
    gid: QueryId.optional(),
    mode: z.coerce.number().int().min(0).max(0o7777).optional(),
  })
  .strict();

export const VolumeInfoSchema = z.object({ volume_id: z.string(), name: z.string(), token: z.string(), created_at: z.string() });
export type VolumeInfo = z.infer<typeof VolumeInfoSchema>;

/** One entry, as E2B's volume content API describes it (times as ISO strings). */
export const VolumeEntrySchema = z.object({
  name: z.string(),
  path: z.string(),
  type: z.enum(["file", "directory", "symlink", "unknown"]),
  size: z.number(),
  mode: z.number(),
  uid: z.number(),
  gid: z.number(),
  atime: z.string(),
  mtime: z.string(),
  ctime: z.string(),
  target: z.string().optional(),
});
export type VolumeEntry = z.infer<typeof VolumeEntrySchema>;

/** `/processes/start`'s volumes: each is bound read-write at its path in the session's sandbox. */
export const SessionVolumesSchema = z.array(VolumeMountSchema).max(16);