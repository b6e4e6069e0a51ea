import type { IncomingMessage, ServerResponse } from "node:http";
import type { TLSSocket } from "node:tls";
import { z } from "zod";
import { readJsonBody } from "../../http/body.js";
import { requestTarget } from "../../http/target.js";
import { BuildStepSchema } from "../../protocol/image-build.js";
import { imageReferenceProblem } from "../../protocol/images.js";
import { E2bApiError } from "../errors.js";
import { DEFAULT_TAG, parseTemplateName, type BuiltTemplates, type TemplateBuild } from "./built-templates.js";
import type { TemplateBuilds } from "./template-builds.js";
import type { TemplateFiles } from "./template-files.js";

/**
 * E2B's template build API, as the SDKs' `Template.build()` / `AsyncTemplate.build()` and
 * the `e2b template` CLI call it (github:e2b-dev/E2B, the SDKs' `template` modules):
 *
 * | route | |
 * |---|---|
 * | `POST /v3/templates` `{name, tags?, cpuCount?, memoryMB?}` | a build of template `name` (`name:tag` adds the tag): `{templateID, buildID, names, tags, aliases, public}` |
 * | `GET /templates/{id}/files/{hash}` | `{present, url?}`: where to PUT the files of a COPY (a gzipped tar), unless present |
 * | `PUT /templates/files/{hash}?signature=…` | the upload (the URL's signature, no API key) |
 * | `POST /v2/templates/{id}/builds/{buildID}` | starts the build from the SDK's steps (`fromImage` or `fromTemplate`, `steps`, `force`, `startCmd`, `readyCmd`) |
 * | `GET /templates/{id}/builds/{buildID}/status?logsOffset=N&limit=M` | `{status, logEntries, logs, reason?}`: the SDKs poll it |
 * | `GET /templates/{id or name}/tags`, `POST /templates/tags`, `DELETE /templates/tags` | tags of builds |
 * | `GET /templates/aliases/{name}` | `{templateID, public}` (`Template.exists`) |
 * | `GET /templates`, `GET /templates/{id}`, `DELETE /templates/{id}` | list, describe, forget |
 */

const RequestSchema = z.object({
  name: z.string().optional(),
  alias: z.string().optional(),
  tags: z.array(z.string()).max(100).optional(),
  cpuCount: z.number().int().optional(),
  memoryMB: z.number().int().optional(),
  minFreeDiskMB: z.number().int().optional(),
  teamID: z.string().optional(),
});

const StepSchema = z.object({ type: z.string(), args: z.array(z.string()).optional(), filesHash: z.string().optional(), force: z.boolean().optional() });
const StartSchema = z.object({
  fromImage: z.string().optional(),
  fromTemplate: z.string().optional(),
  fromImageRegistry: z.unknown().optional(),
  force: z.boolean().optional(),
  steps: z.array(StepSchema).max(1000).optional(),
  startCmd: z.string().optional(),
  readyCmd: z.string().optional(),
});

const MAX_LOGS_PER_CALL = 100;

export class TemplateApi {
  constructor(
    private readonly templates: BuiltTemplates,
    private readonly builds: TemplateBuilds,
    private readonly files: TemplateFiles,
  ) {}

  /** The upload route needs no API key (its URL is signed). */
  static isUpload(path: string): boolean {
    return /^\/templates\/files\/[a-f0-9]{64}$/.test(path);
  }

  async upload(req: IncomingMessage, res: ServerResponse, path: string): Promise<void> {
    if (req.method !== "PUT") throw new E2bApiError(405, `method ${req.method} not allowed on ${path}`);
    const hash = path.slice(path.lastIndexOf("/") + 1);
    this.files.check(hash, requestTarget(req.url).query.get("signature"));
    await this.files.put(hash, req);
    send(res, 200, {});
  }

  /** Answers a template API request (true), or leaves it to the control plane (false). The API key was checked. */
  async handle(req: IncomingMessage, res: ServerResponse, path: string): Promise<boolean> {
    const m = req.method ?? "GET";
    let p: RegExpExecArray | null;
    if (m === "POST" && path === "/v3/templates") return this.request(req, res);
    if (m === "GET" && (p = /^\/templates\/([^/]+)\/files\/([^/]+)$/.exec(path))) {
      this.require(dec(p[1]!));
      const hash = dec(p[2]!);
      if (!/^[a-f0-9]{64}$/.test(hash)) throw new E2bApiError(400, "hash must be a lower-case hex sha256", "hash");
      const present = this.files.path(hash) !== undefined;
      send(res, 201, present ? { present } : { present, url: `${baseUrl(req)}/templates/files/${hash}?signature=${this.files.signature(hash)}` });
      return true;
    }
    if (m === "POST" && (p = /^\/v2\/templates\/([^/]+)\/builds\/([^/]+)$/.exec(path))) return this.start(req, res, dec(p[1]!), dec(p[2]!));
    if (m === "GET" && (p = /^\/templates\/([^/]+)\/builds\/([^/]+)\/status$/.exec(path))) return this.status(req, res, dec(p[1]!), dec(p[2]!));
    if (m === "GET" && (p = /^\/templates\/aliases\/([^/]+)$/.exec(path))) {
      const t = this.templates.get(dec(p[1]!));
      if (!t) return false;
      send(res, 200, { templateID: t.id, public: false });
      return true;
    }
    if (m === "GET" && (p = /^\/templates\/(.+)\/tags$/.exec(path))) {
      const t = this.require(dec(p[1]!));
      send(res, 200, [...t.tags].map(([tag, buildID]) => ({ tag, buildID, createdAt: (t.builds.get(buildID)?.createdAt ?? t.createdAt).toISOString() })));
      return true;
    }
    if ((m === "POST" || m === "DELETE") && path === "/templates/tags") return this.tags(req, res, m);
    if (m === "GET" && (path === "/templates" || path === "/v2/templates")) {
      send(res, 200, this.templates.list().map((t) => this.describe(t)));
      return true;
    }
    if ((p = /^\/(?:v2\/)?templates\/([^/]+)$/.exec(path))) {
      const id = dec(p[1]!);
      if (m === "GET" && this.templates.get(id)) {
        const t = this.templates.get(id)!;
        send(res, 200, { ...this.describe(t), builds: [...t.builds.values()].map((b) => ({ buildID: b.id, status: b.status, createdAt: b.createdAt.toISOString(), updatedAt: b.createdAt.toISOString(), cpuCount: 1, memoryMB: 1024 })) });
        return true;
      }
      if (m === "DELETE" && this.templates.delete(id)) {
        send(res, 204);
        return true;
      }
    }
    return false;
  }

  private require(idOrName: string) {
    const t = this.templates.get(idOrName);
    if (!t) throw new E2bApiError(404, `template '${idOrName}' not found`);
    return t;
  }

  private async request(req: IncomingMessage, res: ServerResponse): Promise<boolean> {
    const body = await parse(req, RequestSchema);
    const raw = body.name ?? body.alias;
    if (!raw) throw new E2bApiError(400, "name is required", "name");
    const { name, tag } = parseTemplateName(raw);
    const tags = [...(tag ? [tag] : []), ...(body.tags ?? [])];
    for (const t of tags) parseTemplateName(`${name}:${t}`, "tags");
    const { template, build } = this.templates.request(name, tags);
    send(res, 202, { templateID: template.id, buildID: build.id, public: false, names: [...template.names], aliases: [...template.names], tags: tags.length > 0 ? tags : [DEFAULT_TAG] });
    return true;
  }

  private async start(req: IncomingMessage, res: ServerResponse, templateId: string, buildId: string): Promise<boolean> {
    const build = this.templates.build(templateId, buildId);
    const body = await parse(req, StartSchema);
    if (!body.fromImage === !body.fromTemplate) throw new E2bApiError(400, "exactly one of fromImage and fromTemplate must be given", body.fromImage ? "fromTemplate" : "fromImage");
    if (body.fromImage) {
      const problem = imageReferenceProblem(body.fromImage);
      if (problem) throw new E2bApiError(400, `fromImage ${JSON.stringify(body.fromImage)} ${problem}`, "fromImage");
    }
    const steps = (body.steps ?? []).map((s, i) => {
      const parsed = BuildStepSchema.safeParse({ type: s.type, args: s.args ?? [], ...(s.filesHash ? { files_hash: s.filesHash } : {}), force: s.force ?? false });
      if (!parsed.success) throw new E2bApiError(400, `steps.${i}: ${parsed.error.issues[0]?.message ?? "invalid step"} (type ${JSON.stringify(s.type)})`, `steps.${i}`);
      return parsed.data;
    });
    if (build.status !== "waiting") throw new E2bApiError(409, `build '${buildId}' was started already (${build.status})`);
    this.builds.start(build, { fromImage: body.fromImage, fromTemplate: body.fromTemplate, force: body.force ?? false, steps, startCmd: body.startCmd, readyCmd: body.readyCmd });
    send(res, 202);
    return true;
  }

  private async status(req: IncomingMessage, res: ServerResponse, templateId: string, buildId: string): Promise<boolean> {
    const build = this.templates.build(templateId, buildId);
    const { query } = requestTarget(req.url);
    const offset = Math.max(0, Number(query.get("logsOffset") ?? "0") || 0);
    const limit = Math.min(MAX_LOGS_PER_CALL, Math.max(1, Number(query.get("limit") ?? String(MAX_LOGS_PER_CALL)) || MAX_LOGS_PER_CALL));
    send(res, 200, statusOf(build, offset, limit));
    return true;
  }

  private async tags(req: IncomingMessage, res: ServerResponse, method: string): Promise<boolean> {
    if (method === "POST") {
      const body = await parse(req, z.object({ target: z.string(), tags: z.array(z.string()).min(1).max(100) }));
      const { name, tag } = parseTemplateName(body.target, "target");
      const t = this.require(name);
      const buildId = t.tags.get(tag ?? DEFAULT_TAG);
      if (!buildId) throw new E2bApiError(404, `tag '${tag ?? DEFAULT_TAG}' does not exist for template '${name}'`);
      for (const tg of body.tags) t.tags.set(parseTemplateName(`${name}:${tg}`, "tags").tag!, buildId);
      send(res, 201, { tags: body.tags, buildID: buildId });
    } else {
      const body = await parse(req, z.object({ name: z.string(), tags: z.array(z.string()).min(1).max(100) }));
      const t = this.require(parseTemplateName(body.name).name);
      for (const tg of body.tags) t.tags.delete(tg);
      send(res, 204);
    }
    return true;
  }

  private describe(t: ReturnType<BuiltTemplates["list"]>[number]) {
    const ready = [...t.builds.values()].filter((b) => b.status === "ready").at(-1);
    const last = [...t.builds.values()].at(-1);
    return {
      templateID: t.id,
      buildID: ready?.id ?? last?.id ?? "",
      cpuCount: 1,
      memoryMB: 1024,
      diskSizeMB: 0,
      public: false,
      aliases: [...t.names],
      names: [...t.names],
      createdAt: t.createdAt.toISOString(),
      updatedAt: t.updatedAt.toISOString(),
      createdBy: null,
      lastSpawnedAt: null,
      spawnCount: 0,
      buildCount: t.builds.size,
      envdVersion: "0.6.4",
      buildStatus: last?.status ?? "waiting",
    };
  }
}

/** A build's status answer from `offset`, at most `limit` log entries (the SDKs page on). */
export function statusOf(build: TemplateBuild, offset: number, limit: number) {
  return {
    templateID: build.templateId,
    buildID: build.id,
    status: build.status,
    logEntries: build.logs.slice(offset, offset + limit),
    logs: [],
    ...(build.reason ? { reason: { message: build.reason.message, ...(build.reason.step !== undefined ? { step: build.reason.step } : {}), errorCode: build.reason.code, logEntries: build.logs.slice(-20) } } : {}),
  };
}

function dec(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw new E2bApiError(400, `malformed percent-encoding in the path segment '${raw}'`);
  }
}

function baseUrl(req: IncomingMessage): string {
  const tls = (req.socket as TLSSocket).encrypted === true;
  return `${tls ? "https" : "http"}://${req.headers.host ?? "127.0.0.1"}`;
}

async function parse<S extends z.ZodType>(req: IncomingMessage, schema: S): Promise<z.output<S>> {
  const len = Number(req.headers["content-length"] ?? "0");
  const raw = len === 0 && req.headers["transfer-encoding"] === undefined ? {} : await readJsonBody(req, 4 * 1024 * 1024);
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = issue.path.map(String).join(".") || "body";
    throw new E2bApiError(400, `invalid request: ${field}: ${issue.message}`, field);
  }
  return parsed.data;
}

function send(res: ServerResponse, status: number, body?: unknown): void {
  if (body === undefined) {
    // An empty answer says so: clients parse a body of unknown length as JSON.
    res.writeHead(status, { "content-length": 0 });
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}
