import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { pipeline } from "node:stream/promises";
import { z } from "zod";
import { readJsonBody } from "../http/body.js";
import { requestTarget } from "../http/target.js";
import { VolumeNameSchema, type VolumeInfo } from "../protocol/volumes.js";
import { E2bApiError } from "./errors.js";
import type { SandboxVolumes } from "./volume-backend.js";

/**
 * E2B's volume APIs over the sandbox servers' volumes (volume-backend.ts), in the shapes the
 * SDKs' `Volume` uses (e2b 2.51 / 2.63):
 * - on the control plane (API key): `POST /volumes {name}` → 201 `{volumeID, name, token,
 *   domain}`, `GET /volumes` → `[{volumeID, name}]`, `GET /volumes/{id}` → with its token,
 *   `DELETE /volumes/{id}` → 204 (404 unknown, 409 while a live sandbox mounts it);
 * - the volume content API (`E2B_VOLUME_API_URL`, else `https://api.<domain>`), opened by the
 *   volume's token (`Authorization: Bearer`): `/volumecontent/{id}/dir` (GET list, POST make),
 *   `/path` (GET stat, PATCH mode, DELETE), `/file` (GET read, PUT write; streamed).
 * Errors are E2B's `{code, message}`: 404 a missing path (the SDK's VolumePathNotFoundError),
 * 409 an existing one.
 */

const CONTENT_PATH = /^\/volumecontent\/([^/]+)\/(dir|path|file)$/;
const MetadataBody = z.object({ uid: z.number().int().optional(), gid: z.number().int().optional(), mode: z.number().int().min(0).max(0o7777).optional() });

export interface VolumeApiOptions {
  volumes: SandboxVolumes;
  /** The domain handed out with each volume (content requests go to `api.<domain>` without E2B_VOLUME_API_URL). */
  domain: () => string | undefined;
  /** Whether a live sandbox mounts the volume (it cannot be deleted then). */
  mounted: (volumeId: string) => string | undefined;
}

export class VolumeApi {
  constructor(private readonly options: VolumeApiOptions) {}

  /** `/volumes…` of the control plane (the API key was checked); false when the path is not one. */
  async control(req: IncomingMessage, res: ServerResponse, path: string): Promise<boolean> {
    const v = this.options.volumes;
    if (path === "/volumes" && req.method === "POST") {
      const body = VolumeCreateBody.safeParse(await readJsonBody(req, 64 * 1024));
      if (!body.success) throw new E2bApiError(400, `invalid request: name: ${body.error.issues[0]!.message}`, "name");
      send(res, 201, this.withToken(await v.create(body.data.name)));
      return true;
    }
    if (path === "/volumes" && req.method === "GET") {
      send(res, 200, (await v.list()).map((x) => ({ volumeID: x.volume_id, name: x.name })));
      return true;
    }
    const m = /^\/volumes\/([^/]+)$/.exec(path);
    if (!m) return false;
    const id = decodeURIComponent(m[1]!);
    if (req.method === "GET") {
      send(res, 200, this.withToken(await this.existing(id)));
      return true;
    }
    if (req.method === "DELETE") {
      await this.existing(id);
      const user = this.options.mounted(id);
      if (user) throw new E2bApiError(409, `volume '${id}' is mounted by sandbox '${user}': kill it first`);
      await v.delete(id);
      send(res, 204);
      return true;
    }
    throw new E2bApiError(405, `method ${req.method} not allowed on ${path}`);
  }

  /** Whether `path` is the volume content API's. */
  static isContent(path: string): boolean {
    return CONTENT_PATH.test(path);
  }

  /** The volume content API (opened by the volume's token). */
  async content(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { path, query } = requestTarget(req.url);
    const m = CONTENT_PATH.exec(path)!;
    const id = decodeURIComponent(m[1]!);
    const what = m[2]!;
    const volume = await this.authorized(req, id);
    const v = this.options.volumes;
    const p = query.get("path");
    if (p === null || p === "") throw new E2bApiError(400, "path is required", "path");
    const mode = query.has("mode") ? intParam(query.get("mode")!, "mode") : undefined;
    const force = query.get("force") === "true";
    const key = `${req.method} ${what}`;
    if (key === "GET dir") return send(res, 200, (await v.listDir(volume.volume_id, p, query.has("depth") ? intParam(query.get("depth")!, "depth") : 1)));
    if (key === "POST dir") return send(res, 201, await v.mkdir(volume.volume_id, p, force, mode));
    if (key === "GET path") return send(res, 200, await v.stat(volume.volume_id, p));
    if (key === "PATCH path") {
      const body = MetadataBody.safeParse(await readJsonBody(req, 64 * 1024));
      if (!body.success) throw new E2bApiError(400, `invalid request: ${body.error.issues[0]!.path.join(".")}: ${body.error.issues[0]!.message}`);
      return send(res, 200, await v.chmeta(volume.volume_id, p, body.data.mode));
    }
    if (key === "DELETE path") {
      await v.remove(volume.volume_id, p);
      return send(res, 204);
    }
    if (key === "GET file") {
      const abort = new AbortController();
      res.once("close", () => abort.abort());
      const file = await v.read(volume.volume_id, p, abort.signal);
      res.writeHead(200, { "content-type": "application/octet-stream", ...(file.length !== undefined ? { "content-length": file.length } : {}) });
      await pipeline(file.body, res).catch(() => res.destroy());
      return;
    }
    if (key === "PUT file") {
      const length = req.headers["content-length"] !== undefined ? Number(req.headers["content-length"]) : undefined;
      return send(res, 201, await v.write(volume.volume_id, p, req, { force, mode, length }));
    }
    throw new E2bApiError(405, `method ${req.method} not allowed on ${path}`);
  }

  private async existing(id: string): Promise<VolumeInfo> {
    try {
      return await this.options.volumes.get(id);
    } catch (err) {
      if (err instanceof E2bApiError && (err.status === 404 || err.status === 400)) throw new E2bApiError(404, `volume '${id}' not found`);
      throw err;
    }
  }

  /** The volume whose token the request carries (401 without a token, 403 with another; 404 no such volume). */
  private async authorized(req: IncomingMessage, id: string): Promise<VolumeInfo> {
    const auth = req.headers.authorization;
    const token = typeof auth === "string" && /^Bearer\s+/i.test(auth) ? auth.replace(/^Bearer\s+/i, "") : undefined;
    if (!token) throw new E2bApiError(401, "missing Authorization: Bearer <the volume's token>");
    const volume = await this.existing(id);
    const a = createHash("sha256").update(token).digest();
    const b = createHash("sha256").update(volume.token).digest();
    if (!timingSafeEqual(a, b)) throw new E2bApiError(403, `wrong token for volume '${id}'`);
    return volume;
  }

  private withToken(v: VolumeInfo) {
    return { volumeID: v.volume_id, name: v.name, token: v.token, domain: this.options.domain() ?? null };
  }
}

const VolumeCreateBody = z.object({ name: VolumeNameSchema });

function intParam(raw: string, field: string): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 0) throw new E2bApiError(400, `${field} must be a whole number, got '${raw}'`, field);
  return n;
}

function send(res: ServerResponse, status: number, body?: unknown): void {
  if (body === undefined) {
    res.writeHead(status);
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}
