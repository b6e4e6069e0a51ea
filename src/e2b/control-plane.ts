import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { z } from "zod";
import { readJsonBody } from "../http/body.js";
import { requestTarget } from "../http/target.js";
import { E2bApiError, E2bUnsupportedError } from "./errors.js";
import { SandboxRegistry, type E2bSandbox } from "./sandboxes.js";
import type { Snapshot } from "./snapshots.js";
import { VolumeMountPathSchema } from "../protocol/volumes.js";
import { SandboxMetrics } from "./sandbox-metrics.js";
import { egressFrom, EgressFieldsSchema, hasEgress, NetworkUpdateBodySchema } from "./sandbox-egress.js";

/**
 * The control plane of E2B's API (what `E2B_API_URL` points at), the subset the `e2b` SDK
 * uses for sandboxes: create, get, list, kill, timeout, connect, fork. Every route but
 * /health needs the API key in `X-API-Key`. Answers have E2B's field names and shapes
 * (read from the SDK's OpenAPI types, e2b 2.51.0).
 */

/**
 * The envd version announced: the SDKs (JS 2.51, Python 2.63) gate features on it, and every
 * gate up to it is served: stdin close 0.5.2, octet-stream uploads 0.5.7, file metadata 0.6.2,
 * entry info in watch events 0.6.3, watching with allowNetworkMounts 0.6.4 (docs/e2b.md).
 */
export const ENVD_VERSION = "0.6.4";
/** Nominal resources reported per sandbox (a slot's share is set by the sandbox server's flags). */
const CPU_COUNT = 1;
const CLIENT_ID = "slotpool";

const StringMap = z.record(z.string(), z.string());
const CreateBodySchema = z.object({
  templateID: z.string().max(256).optional(),
  timeout: z.number().int().min(0).optional(),
  metadata: StringMap.nullish(),
  envVars: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "environment variable names are letters, digits and _, not starting with a digit"), z.string()).nullish(),
  autoPause: z.boolean().nullish(),
  autoPauseMemory: z.boolean().nullish(),
  autoResume: z.object({ enabled: z.boolean() }).nullish(),
  allow_internet_access: z.boolean().nullish(),
  secure: z.boolean().optional(),
  network: z
    .object({
      allowPublicTraffic: z.boolean().optional(),
      maskRequestHost: z.string().max(512).optional(),
      httpsPorts: z.array(z.number().int().min(1).max(65535).refine((p) => p !== 49983, "the sandbox API's port 49983 cannot be listed")).max(64).optional(),
    })
    .merge(EgressFieldsSchema)
    .nullish(),
  volumeMounts: z.array(z.object({ name: z.string().min(1).max(128), path: VolumeMountPathSchema })).max(16).nullish(),
  mcp: z.unknown().optional(),
});
const TimeoutBodySchema = z.object({ timeout: z.number().int().min(0) });
const ConnectBodySchema = z.object({ timeout: z.number().int().min(0).optional(), memory: z.boolean().nullish() });
const PauseBodySchema = z.object({ memory: z.boolean().nullish() });
const ResumeBodySchema = z.object({ timeout: z.number().int().min(0).optional(), autoPause: z.boolean().nullish() });
const SnapshotBodySchema = z.object({ name: z.string().max(256).nullish() });
const FORK_PATH = /^\/sandboxes\/([^/]+)\/fork$/;
const ForkBodySchema = z.object({ timeout: z.number().int().min(0).optional(), count: z.number().int().min(1).max(64).optional() });

export interface ControlPlaneOptions {
  apiKey: string;
  registry: SandboxRegistry;
  memoryMB: number;
  /** The domain sandboxes are handed (the SDKs' getHost: `<port>-<id>.<domain>`). */
  domain: () => string | undefined;
  /** Resolves `${e2b.secrets.<name>}` in create's envVars (secrets.ts); undefined: left as they are. */
  resolveSecrets?: (envs: Record<string, string>) => { envs: Record<string, string>; secretKeys: string[] };
  /** Volumes by name (create's volumeMounts); undefined: this server keeps none. */
  volumeByName?: (name: string) => Promise<{ volume_id: string } | undefined>;
}

type Handler = (req: IncomingMessage, res: ServerResponse, id: string) => Promise<void>;

export class ControlPlane {
  private readonly keyHash: Buffer;
  private readonly routes: Array<{ method: string; pattern: RegExp; handler: Handler }> = [];
  private readonly forkBodies = new WeakMap<IncomingMessage, z.output<typeof ForkBodySchema>>();
  private readonly metrics = new SandboxMetrics();

  constructor(private readonly options: ControlPlaneOptions) {
    this.keyHash = createHash("sha256").update(options.apiKey).digest();
    const unsupported = (what: string, why: string): Handler => async () => {
      throw new E2bUnsupportedError(`${what} is not supported by slotpool: ${why}`);
    };
    this.route("POST", /^\/(?:v2\/)?sandboxes$/, (req, res) => this.create(req, res))
      .route("GET", /^\/(?:v2\/)?sandboxes$/, (req, res) => this.list(req, res))
      .route("GET", /^\/sandboxes\/([^/]+)$/, async (_req, res, id) => send(res, 200, this.detail(this.options.registry.require(id))))
      .route("DELETE", /^\/sandboxes\/([^/]+)$/, async (_req, res, id) => {
        if (!(await this.options.registry.kill(id))) throw new E2bApiError(404, `sandbox '${id}' not found`);
        send(res, 204);
      })
      .route("POST", /^\/sandboxes\/([^/]+)\/timeout$/, async (req, res, id) => {
        this.options.registry.setTimeout(id, (await parse(req, TimeoutBodySchema)).timeout);
        send(res, 204);
      })
      .route("POST", /^\/sandboxes\/([^/]+)\/refreshes$/, async (req, res, id) => {
        const body = await parse(req, z.object({ duration: z.number().int().min(0).optional() }));
        this.options.registry.extend(id, body.duration);
        send(res, 204);
      })
      .route("POST", /^\/(?:v2\/)?sandboxes\/([^/]+)\/connect$/, async (req, res, id) => {
        const body = await parse(req, ConnectBodySchema);
        // memory: false is E2B's cold boot: the processes end, the files stay.
        const { sandbox, resumed } = await this.options.registry.connect(id, body.timeout, body.memory === false);
        send(res, resumed ? 201 : 200, this.created(sandbox));
      })
      .route("POST", FORK_PATH, async (req, res, id) => this.fork(this.forkBodies.get(req) ?? {}, res, id))
      .route("POST", /^\/sandboxes\/([^/]+)\/pause$/, async (req, res, id) => {
        const body = await parse(req, PauseBodySchema);
        if (!(await this.options.registry.pause(id, body.memory !== false))) throw new E2bApiError(409, `sandbox '${id}' is already paused`);
        send(res, 204);
      })
      .route("POST", /^\/(?:v2\/)?sandboxes\/([^/]+)\/resume$/, async (req, res, id) => {
        const body = await parse(req, ResumeBodySchema);
        if (!(await this.options.registry.resume(id, body.timeout))) throw new E2bApiError(409, `sandbox '${id}' is already running`);
        send(res, 201, this.created(this.options.registry.require(id)));
      })
      // Template.exists(name): 'base' and the workspace templates (--templates) exist.
      .route("GET", /^\/templates\/aliases\/([^/]+)$/, async (_req, res, alias) => {
        if (!this.options.registry.templateNames().includes(alias)) throw new E2bApiError(404, `template '${alias}' not found`);
        send(res, 200, { templateID: alias, public: false });
      })
      // E2B's snapshots (snapshots.ts): the sandbox's files as a template on its container; Sandbox.create(snapshotID) makes sandboxes of it.
      .route("POST", /^\/sandboxes\/([^/]+)\/snapshots$/, async (req, res, id) => {
        const s = this.options.registry.require(id);
        const body = await parse(req, SnapshotBodySchema);
        send(res, 201, snapshotInfo(await this.options.registry.snapshots.create(s, body.name ?? undefined)));
      })
      .route("GET", /^\/snapshots$/, async (req, res) => this.listSnapshots(req, res))
      // Sandbox.deleteSnapshot: E2B deletes a snapshot as the template it is.
      .route("DELETE", /^\/templates\/([^/]+)$/, async (_req, res, id) => {
        if (this.options.registry.templateNames().includes(id)) throw new E2bApiError(400, `template '${id}' is one of this server's templates (--templates), which cannot be deleted through the API; only snapshots can`, "templateID");
        if (!(await this.options.registry.snapshots.delete(id))) throw new E2bApiError(404, `snapshot '${id}' not found`);
        send(res, 204);
      })
      // E2B's updateNetwork: every egress rule replaced (an omitted list is cleared).
      .route("PUT", /^\/sandboxes\/([^/]+)\/network$/, async (req, res, id) => {
        const s = this.options.registry.require(id);
        const body = await parse(req, NetworkUpdateBodySchema);
        const { egress, rules } = egressFrom(body, "body");
        if (body.allow_internet_access === true && !s.allowNetwork) {
          throw new E2bApiError(400, `sandbox '${id}' has no internet access (it was created without it, or this server has none: --allow-network), and cannot be given it after create`, "allow_internet_access");
        }
        // E2B: allow_internet_access false is the same as denying all traffic.
        if (body.allow_internet_access === false) {
          egress.denyOut = [...egress.denyOut, "0.0.0.0/0"];
          rules.deny = [...rules.deny, "0.0.0.0/0"];
        }
        await this.options.registry.updateEgress(id, egress, rules);
        send(res, 204);
      })
      .route("GET", /^\/sandboxes\/([^/]+)\/metrics$/, async (req, res, id) => {
        const s = this.options.registry.require(id);
        const { query } = requestTarget(req.url);
        const at = (k: string): number | undefined => {
          const v = query.get(k);
          if (v === null || v === "") return undefined;
          if (!/^\d+$/.test(v)) throw new E2bApiError(400, `${k} must be a Unix time in seconds`, k);
          return Number(v);
        };
        send(res, 200, await this.metrics.metrics(s, () => s.processes.usage(), at("start"), at("end")));
      })
      .route("GET", /^\/(?:v2\/)?sandboxes\/([^/]+)\/logs$/, unsupported("sandbox logs", "see the server log"))
      .route("GET", /^\/sandboxes\/metrics$/, unsupported("sandbox metrics", "see the sandbox server's /metrics"));
  }

  private route(method: string, pattern: RegExp, handler: Handler): this {
    this.routes.push({ method, pattern, handler });
    return this;
  }

  /** Answers a control-plane request (errors are thrown for the server to shape). */
  async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { path } = requestTarget(req.url);
    if (path === "/health" && req.method === "GET") return send(res, 200, { status: "ok" });
    // A fork's body is checked before the API key, as E2B does: count < 1 is a 400 whoever asks.
    if (req.method === "POST" && FORK_PATH.test(path)) this.forkBodies.set(req, await parse(req, ForkBodySchema));
    this.checkKey(req);
    let pathMatched = false;
    for (const r of this.routes) {
      const m = r.pattern.exec(path);
      if (!m) continue;
      pathMatched = true;
      if (r.method !== req.method) continue;
      return r.handler(req, res, decodeId(m[1] ?? ""));
    }
    if (pathMatched) throw new E2bApiError(405, `method ${req.method} not allowed on ${path}`);
    throw new E2bApiError(404, `no route ${req.method} ${path} (slotpool serves the sandbox part of E2B's API, see docs/e2b.md)`);
  }

  /** The API key check of every control-plane route but /health (X-API-Key, constant time). */
  checkKey(req: IncomingMessage): void {
    const key = req.headers["x-api-key"];
    if (typeof key !== "string" || key === "") throw new E2bApiError(401, "missing X-API-Key header");
    if (!timingSafeEqual(createHash("sha256").update(key).digest(), this.keyHash)) throw new E2bApiError(401, "invalid API key");
  }

  private async create(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await parse(req, CreateBodySchema);
    if (body.autoResume?.enabled && !body.autoPause) throw new E2bApiError(400, "autoResume needs autoPause: only a sandbox paused at its timeout can be resumed by traffic", "autoResume");
    if (body.autoResume?.enabled && body.autoPauseMemory === false) throw new E2bApiError(400, "autoResume cannot be combined with autoPauseMemory: false (a filesystem-only pause is resumed with connect)", "autoResume");
    const net = body.network ?? undefined;
    const egress = net ? egressFrom(net, "network") : undefined;
    const volumeMounts = await this.resolveMounts(body.volumeMounts ?? []);
    const secrets = this.options.resolveSecrets?.(body.envVars ?? {}) ?? { envs: body.envVars ?? {}, secretKeys: [] };
    // \`mcp\` is accepted: the SDK starts the gateway itself, and the sandbox's \`mcp-gateway\` says there is none (user-shims.ts).
    const s = await this.options.registry.create({
      templateID: body.templateID,
      envVars: secrets.envs,
      secretEnvKeys: secrets.secretKeys,
      metadata: body.metadata ?? undefined,
      timeout: body.timeout,
      allowInternetAccess: body.allow_internet_access ?? undefined,
      lifecycle: { onTimeout: body.autoPause ? "pause" : "kill", keepMemory: body.autoPauseMemory !== false, autoResume: body.autoResume?.enabled === true },
      network: net ? { allowPublicTraffic: net.allowPublicTraffic, maskRequestHost: net.maskRequestHost, httpsPorts: net.httpsPorts } : undefined,
      volumeMounts,
      ...(egress && hasEgress(egress.egress) ? { egress } : {}),
    });
    send(res, 201, this.created(s));
  }

  /** E2B's volumeMounts (by volume name) as mounts by id; an unknown name is a 400 naming it. */
  private async resolveMounts(mounts: Array<{ name: string; path: string }>): Promise<Array<{ volume_id: string; name: string; path: string }>> {
    if (mounts.length === 0) return [];
    const byName = this.options.volumeByName;
    if (!byName) throw new E2bApiError(400, "this server keeps no volumes", "volumeMounts");
    if (new Set(mounts.map((m) => m.path.replace(/\/+$/, ""))).size !== mounts.length) throw new E2bApiError(400, "two volumes are mounted at the same path", "volumeMounts");
    return Promise.all(
      mounts.map(async (m, i) => {
        const v = await byName(m.name);
        if (!v) throw new E2bApiError(400, `volumeMounts.${i}.name: no volume named '${m.name}' (Volume.create makes one)`, `volumeMounts.${i}.name`);
        return { volume_id: v.volume_id, name: m.name, path: m.path };
      }),
    );
  }

  private async list(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { query } = requestTarget(req.url);
    const states = query.getAll("state").flatMap((s) => s.split(","));
    const limit = query.has("limit") ? Number(query.get("limit")) : 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new E2bApiError(400, "limit must be a whole number from 1 to 100", "limit");
    const filter = metadataFilter(query.get("metadata"));
    const template = query.get("template");
    // E2B lists the newest sandboxes first, and pages in that order.
    const order = query.get("order") ?? "desc";
    if (order !== "asc" && order !== "desc") throw new E2bApiError(400, "order must be asc or desc", "order");
    const unknown = states.find((st) => st !== "running" && st !== "paused");
    if (unknown !== undefined) throw new E2bApiError(400, `state must be running or paused, got '${unknown}'`, "state");
    let all = this.options.registry.list().filter((s) => states.length === 0 || states.includes(s.state));
    const startedAfter = query.get("startedAfter");
    const after0 = startedAfter ? Date.parse(startedAfter) : Number.NEGATIVE_INFINITY;
    if (Number.isNaN(after0)) throw new E2bApiError(400, "startedAfter must be an ISO 8601 time", "startedAfter");
    all = all.filter((s) => Object.entries(filter).every(([k, v]) => s.metadata[k] === v) && (!template || s.templateId === template) && s.startedAt.getTime() >= after0);
    const keyOf = (s: E2bSandbox) => `${String(s.startedAt.getTime()).padStart(15, "0")}_${s.id}`;
    all.sort((a, b) => (keyOf(a) < keyOf(b) ? -1 : keyOf(a) > keyOf(b) ? 1 : 0) * (order === "asc" ? 1 : -1));
    const after = query.get("nextToken");
    if (after) {
      const mark = Buffer.from(after, "base64url").toString("utf8");
      all = all.filter((s) => (order === "asc" ? keyOf(s) > mark : keyOf(s) < mark));
    }
    const page = all.slice(0, limit);
    if (all.length > limit) res.setHeader("x-next-token", Buffer.from(keyOf(page.at(-1)!)).toString("base64url"));
    send(res, 200, page.map((s) => this.listed(s)));
  }

  /** E2B's snapshot list: newest first, of one sandbox (sandboxID) or by name when asked, paged as the sandboxes are. */
  private async listSnapshots(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { query } = requestTarget(req.url);
    const limit = query.has("limit") ? Number(query.get("limit")) : 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw new E2bApiError(400, "limit must be a whole number from 1 to 100", "limit");
    let all = this.options.registry.snapshots.list({ sandboxId: query.get("sandboxID") ?? undefined, name: query.get("name") ?? undefined });
    const after = query.get("nextToken");
    if (after) {
      const mark = all.findIndex((s) => s.id === Buffer.from(after, "base64url").toString("utf8"));
      all = mark < 0 ? [] : all.slice(mark + 1);
    }
    const page = all.slice(0, limit);
    if (all.length > limit) res.setHeader("x-next-token", Buffer.from(page.at(-1)!.id).toString("base64url"));
    send(res, 200, page.map(snapshotInfo));
  }

  private async fork(body: z.output<typeof ForkBodySchema>, res: ServerResponse, id: string): Promise<void> {
    const source = this.options.registry.require(id);
    const results = await this.options.registry.fork(source, body.count ?? 1, body.timeout);
    send(
      res,
      201,
      results.map((r) => (r instanceof Error ? { error: { code: r instanceof E2bApiError ? r.status : 500, message: r.message } } : { sandbox: this.created(r) })),
    );
  }

  /** The `Sandbox` answer of create, connect and fork: what a client needs to reach the sandbox. */
  private created(s: E2bSandbox) {
    return {
      templateID: s.templateId,
      sandboxID: s.id,
      clientID: CLIENT_ID,
      envdVersion: ENVD_VERSION,
      envdAccessToken: s.accessToken,
      trafficAccessToken: s.trafficAccessToken ?? null,
      domain: this.options.domain() ?? null,
    };
  }

  private listed(s: E2bSandbox) {
    return {
      templateID: s.templateId,
      sandboxID: s.id,
      clientID: CLIENT_ID,
      startedAt: s.startedAt.toISOString(),
      endAt: s.endAt.toISOString(),
      cpuCount: CPU_COUNT,
      memoryMB: this.options.memoryMB,
      diskSizeMB: 0,
      metadata: s.metadata,
      state: s.state,
      envdVersion: ENVD_VERSION,
      volumeMounts: s.volumeMounts.map((m) => ({ name: m.name, path: m.path })),
    };
  }

  private detail(s: E2bSandbox) {
    return {
      ...this.listed(s),
      envdAccessToken: s.accessToken,
      domain: this.options.domain() ?? null,
      allowInternetAccess: s.allowNetwork,
      ...(Object.keys(s.network).length > 0 || hasEgress(s.egress)
        ? {
            network: {
              allowPublicTraffic: s.network.allowPublicTraffic ?? true,
              ...(s.network.maskRequestHost ? { maskRequestHost: s.network.maskRequestHost } : {}),
              ...(s.egress.allowOut.length > 0 ? { allowOut: s.egress.allowOut } : {}),
              ...(s.egress.denyOut.length > 0 ? { denyOut: s.egress.denyOut } : {}),
            },
          }
        : {}),
    };
  }
}

/** E2B's SnapshotInfo. */
function snapshotInfo(s: Snapshot) {
  return { snapshotID: s.id, names: s.names };
}

/** A sandbox id from the path; malformed percent-encoding is the client's mistake (400), not ours. */
function decodeId(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    throw new E2bApiError(400, `malformed percent-encoding in the path segment '${raw}'`);
  }
}

/** The SDK sends metadata filters as one query value: URL-encoded `key=value` pairs joined by `&`. */
function metadataFilter(raw: string | null): Record<string, string> {
  if (!raw) return {};
  const out: Record<string, string> = {};
  for (const [k, v] of new URLSearchParams(raw)) {
    try {
      out[decodeURIComponent(k)] = decodeURIComponent(v);
    } catch {
      throw new E2bApiError(400, "malformed percent-encoding in the metadata filter", "metadata");
    }
  }
  return out;
}

async function parse<S extends z.ZodType>(req: IncomingMessage, schema: S): Promise<z.output<S>> {
  const len = Number(req.headers["content-length"] ?? "0");
  const raw = len === 0 && req.headers["transfer-encoding"] === undefined ? {} : await readJsonBody(req, 1024 * 1024);
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const field = issue.path.map(String).join(".") || "body";
    // A bad record key carries its reason one level down.
    const inner = "issues" in issue && Array.isArray(issue.issues) ? (issue.issues as Array<{ message: string }>)[0]?.message : undefined;
    throw new E2bApiError(400, `invalid request: ${field}: ${inner ?? issue.message}`, field);
  }
  return parsed.data;
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
