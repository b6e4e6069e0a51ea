import type { IncomingMessage } from "node:http";
import { Transform } from "node:stream";
import { pipeline } from "node:stream/promises";
import type { JsonBodyReader } from "../../http/body.js";
import { parseBody } from "../../http/body.js";
import { HttpError } from "../../http/errors.js";
import { sendJson } from "../../http/respond.js";
import type { RouteTable } from "../../http/routes.js";
import { requestTarget } from "../../http/target.js";
import {
  VolumeChmetaRequestSchema,
  VolumeCreateRequestSchema,
  VolumeFileQuerySchema,
  VolumeListDirRequestSchema,
  VolumeMkdirRequestSchema,
  VolumePathRequestSchema,
  VolumeSelectorSchema,
} from "../../protocol/volumes.js";
import { VolumeContent } from "../tools/volume-content.js";
import type { VolumeStore } from "../workspace/volume-store.js";

/** What the routes need from the sandbox service. */
export interface VolumeRouteHost {
  readonly processes: { readonly volumes?: VolumeStore | undefined };
  readonly limits: { readonly maxFileBytes: number };
}

/** A volume file transfer with no byte either way for this long is ended. */
const FILE_IDLE_MS = 300_000;

/**
 * The `/volumes/*` routes (protocol/volumes.ts). File reads and writes are streamed with
 * backpressure; a write is bounded by `--max-file-mb` (the largest file a command may write)
 * and ends when idle. Nothing of a transfer is buffered beyond the streams' own buffers.
 */
export function addVolumeRoutes(table: RouteTable, host: VolumeRouteHost, body: JsonBodyReader): RouteTable {
  const store = (): VolumeStore => {
    const s = host.processes.volumes;
    if (!s) throw new HttpError(503, "this sandbox server keeps no volumes");
    return s;
  };
  let contentOf: VolumeContent | undefined;
  const content = (): VolumeContent => (contentOf ??= new VolumeContent(store()));
  const json = <S extends Parameters<typeof parseBody>[0]>(schema: S) => async (req: IncomingMessage) => parseBody(schema, await body.read(req));
  return table
    .add("POST", "/volumes/create", async (req, res) => {
      const r = await json(VolumeCreateRequestSchema)(req);
      sendJson(res, 200, store().create(r.volume_id, r.name, r.token));
    })
    .add("POST", "/volumes/list", async (req, res) => {
      await body.read(req);
      sendJson(res, 200, { volumes: store().list() });
    })
    .add("POST", "/volumes/get", async (req, res) => {
      sendJson(res, 200, store().get((await json(VolumeSelectorSchema)(req)).volume_id));
    })
    .add("POST", "/volumes/delete", async (req, res) => {
      store().delete((await json(VolumeSelectorSchema)(req)).volume_id);
      sendJson(res, 200, {});
    })
    .add("POST", "/volumes/stat", async (req, res) => {
      const r = await json(VolumePathRequestSchema)(req);
      sendJson(res, 200, content().stat(r.volume_id, r.path));
    })
    .add("POST", "/volumes/list-dir", async (req, res) => {
      const r = await json(VolumeListDirRequestSchema)(req);
      sendJson(res, 200, { entries: content().list(r.volume_id, r.path, r.depth) });
    })
    .add("POST", "/volumes/mkdir", async (req, res) => {
      const r = await json(VolumeMkdirRequestSchema)(req);
      sendJson(res, 200, content().mkdir(r.volume_id, r.path, { force: r.force, mode: r.mode }));
    })
    .add("POST", "/volumes/chmeta", async (req, res) => {
      const r = await json(VolumeChmetaRequestSchema)(req);
      sendJson(res, 200, content().chmeta(r.volume_id, r.path, r.mode));
    })
    .add("POST", "/volumes/remove", async (req, res) => {
      const r = await json(VolumePathRequestSchema)(req);
      content().remove(r.volume_id, r.path);
      sendJson(res, 200, {});
    })
    .add("GET", "/volumes/file", async (req, res) => {
      const q = parseBody(VolumeFileQuerySchema, Object.fromEntries(requestTarget(req.url).query));
      const { handle, size } = await content().openForRead(q.volume_id, q.path);
      res.writeHead(200, { "content-type": "application/octet-stream", "content-length": size });
      req.socket.setTimeout(FILE_IDLE_MS, () => req.socket.destroy());
      // The file's size when opened: a file that grows meanwhile is cut there. The stream closes the file.
      const stream = size > 0 ? handle.createReadStream({ start: 0, end: size - 1 }) : undefined;
      if (!stream) {
        await handle.close();
        res.end();
        return;
      }
      await pipeline(stream, res).catch(() => res.destroy());
    })
    .add("PUT", "/volumes/file", async (req, res) => {
      const q = parseBody(VolumeFileQuerySchema, Object.fromEntries(requestTarget(req.url).query));
      const max = host.limits.maxFileBytes;
      const tooLarge = () => new HttpError(413, `the file is larger than this server's limit of ${max} bytes (--max-file-mb)`);
      if (Number(req.headers["content-length"] ?? 0) > max) throw tooLarge();
      const upload = await content().beginWrite(q.volume_id, q.path, { force: q.force, mode: q.mode });
      let written = 0;
      const bound = new Transform({
        transform(chunk: Buffer, _enc, cb) {
          written += chunk.length;
          cb(written > max ? tooLarge() : null, chunk);
        },
      });
      req.socket.setTimeout(FILE_IDLE_MS, () => req.socket.destroy());
      try {
        // The stream closes the file when it ends (or fails).
        await pipeline(req, bound, upload.handle.createWriteStream());
      } catch (err) {
        // A failed upload leaves nothing (the old file, if any, as it was).
        upload.abort();
        throw err instanceof HttpError ? err : new HttpError(400, `the upload of '${q.path}' failed: ${err instanceof Error ? err.message : String(err)}`);
      }
      sendJson(res, 200, upload.commit());
    });
}
