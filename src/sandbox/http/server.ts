import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { z } from "zod";
import { BearerAuth } from "../../http/auth.js";
import { JsonBodyReader, parseBody } from "../../http/body.js";
import { HttpError } from "../../http/errors.js";
import { listenOn } from "../../http/lifecycle.js";
import { errorStatus, sendError, sendJson } from "../../http/respond.js";
import { RouteTable, type RouteHandler } from "../../http/routes.js";
import { requestPath, requestTarget } from "../../http/target.js";
import { PROMETHEUS_CONTENT_TYPE } from "../../observability/metrics.js";
import {
  ArtifactArchiveRequestSchema,
  ArtifactListRequestSchema,
  ArtifactReadRequestSchema,
  ForkRequestSchema,
  ResetRequestSchema,
  TemplateBuildRequestSchema,
  type ExecuteResponse,
} from "../../protocol/sandbox.js";
import { artifactCall } from "../service/file-calls.js";
import { ImagePullRequestSchema } from "../../protocol/images.js";
import { TemplateCaptureRequestSchema, TemplateDeleteRequestSchema } from "../../protocol/template-capture.js";
import { SandboxWebSockets } from "./ws.js";
import { addProcessRoutes } from "./process-routes.js";
import { addImageBuildRoutes } from "./image-build-routes.js";
import { handlePortUpgrade } from "./port-routes.js";
import { addVolumeRoutes } from "./volume-routes.js";
import { addUsageRoutes } from "./usage-routes.js";
import { PORT_TUNNEL_PATH } from "../../protocol/port-tunnel.js";
import { SandboxService, type ParsedCall, type SandboxServiceOptions } from "../service/service.js";
import type { Slot } from "../core/slot.js";

export interface SandboxServerOptions extends SandboxServiceOptions {
  host: string;
  port: number;
  /** Bearer token; when set every route but /health requires it. */
  token?: string | undefined;
  /** Largest request body accepted, bytes. */
  maxBodyBytes?: number;
  /** Open connections at most (default 4096). */
  maxConnections?: number;
  /** Start every slot's namespace in the background once listening (default true). */
  prewarm?: boolean;
  /** A port tunnel with no byte either way for this long is closed (default PORT_IDLE_TIMEOUT_MS). */
  portIdleTimeoutMs?: number;
}

export class SandboxServer {
  readonly service: SandboxService;
  private readonly server: Server;
  private readonly auth: BearerAuth;
  private readonly body: JsonBodyReader;
  private readonly routes: RouteTable;
  private readonly ws: SandboxWebSockets;
  url = "";

  constructor(readonly options: SandboxServerOptions) {
    this.service = new SandboxService(options);
    this.auth = new BearerAuth(options.token, { allowQueryTokenOnUpgrade: true });
    // Bodies being read at once share one budget of `maxBodyBytes` (see JsonBodyReader).
    const maxBody = options.maxBodyBytes ?? 64 * 1024 * 1024;
    this.body = new JsonBodyReader({ maxBytes: maxBody, budgetBytes: maxBody });
    this.routes = this.routeTable();
    this.server = createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        try {
          this.sendError(res, req, err);
        } catch (inner) {
          // Never let one request take the server down.
          this.service.logger.error({ err: inner }, "could not answer a failed request");
          res.destroy();
        }
      });
    });
    this.ws = new SandboxWebSockets(this.service);
    this.server.on("upgrade", (req, socket, head) => {
      const path = requestPath(req.url);
      try {
        if (path !== "/ws" && path !== PORT_TUNNEL_PATH) throw new HttpError(404, `no upgrade route ${path}`);
        // ?token= only on the WebSocket (browsers cannot set headers); a port tunnel's client sends the header.
        this.auth.check(req, path === "/ws" ? "upgrade" : "request");
      } catch (err) {
        const status = errorStatus(err);
        const body = JSON.stringify({ error: err instanceof Error ? err.message : String(err) });
        socket.end(`HTTP/1.1 ${status} ${status === 401 ? "Unauthorized" : status === 403 ? "Forbidden" : "Not Found"}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
        return;
      }
      // A port tunnel (port-routes.ts): the connection becomes a port's bytes in the slot.
      if (path === PORT_TUNNEL_PATH) {
        handlePortUpgrade(req, socket, head, this.service, this.options.portIdleTimeoutMs).catch((err: unknown) => {
          this.service.logger.error({ err }, "port tunnel failed");
          socket.destroy();
        });
        return;
      }
      this.ws.handleUpgrade(req, socket, head);
    });
    // Idle and slow connections cost a file descriptor each: a client must send its
    // headers within 15 s, and at most `maxConnections` are open at once (the rest are
    // closed at accept). Keep-alive clients (the pool) stay connected between calls.
    this.server.keepAliveTimeout = 65_000;
    this.server.headersTimeout = 15_000;
    this.server.maxConnections = options.maxConnections ?? 4096;
  }

  async listen(): Promise<string> {
    this.url = await listenOn(this.server, this.options.port, this.options.host);
    // Pre-warm every slot's namespace in the background (bounded: a few at a time).
    if (this.options.prewarm !== false) void this.service.prewarm();
    return this.url;
  }

  get httpServer(): Server {
    return this.server;
  }

  /** Stops accepting, kills every slot process, closes idle connections. */
  async close(): Promise<void> {
    const closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.ws.close();
    this.server.closeIdleConnections();
    await this.service.close();
    // In-flight calls have now been answered (killed): their keep-alive sockets are idle.
    this.server.closeIdleConnections();
    const timer = setTimeout(() => this.server.closeAllConnections(), 1_000);
    await closed;
    clearTimeout(timer);
  }

  private routeTable(): RouteTable {
    const svc = this.service;
    const artifacts = (kind: "read" | "list" | "archive"): RouteHandler => (req, res) => this.artifacts(req, res, kind);
    return addImageBuildRoutes(addUsageRoutes(addVolumeRoutes(addProcessRoutes(new RouteTable(), svc, this.body), svc, this.body), svc, this.body), svc, this.body)
      .add(
        "GET",
        "/health",
        (_req, res) =>
          sendJson(res, 200, {
            status: "ok",
            slots: svc.slots.length,
            bwrap_available: svc.bwrap.available,
            ...(svc.bwrap.available ? {} : { sandbox_unavailable_reason: svc.bwrap.reason }),
            fast_path: svc.spawnerPath !== null,
            slot_generations: svc.slots.map((s) => s.generation),
            // "filter": every slot process runs under the slots' seccomp filter; "off": --no-seccomp (or unsandboxed).
            seccomp: svc.bwrap.available && svc.bwrap.filter ? "filter" : "off",
            ...(svc.bwrap.available && svc.bwrap.filter ? { ptrace: svc.bwrap.filter.ptrace } : {}),
            // What allow_network gets here, and if only loopback, why (e.g. a container not
            // given /dev/net/tun): operators read it here, not only in the start-up log.
            internet: svc.internetAccess ? "slirp4netns" : "unavailable",
            ...(svc.internetAccess ? {} : { internet_unavailable_reason: svc.internetReason ?? "unknown" }),
            // What a network-on slot's DNS forwarder (10.0.2.3) answers: DNS only, or nothing (and why).
            ...(svc.internetAccess ? { dns: svc.internetAccess.disableDns ? "off" : "dns_only", ...(svc.internetAccess.dnsReason ? { dns_off_reason: svc.internetAccess.dnsReason } : {}) } : {}),
            cgroups: svc.cgroups.mode,
            limits: svc.limitsInForce,
            slots_busy: svc.slots.filter((s) => s.state !== "idle").length,
            isolation: svc.isolation(),
            ...imageHealth(svc),
          }),
        { public: true },
      )
      .add("GET", "/slots", (_req, res) =>
        sendJson(res, 200, {
          // out_of_service: why the slot refuses calls (its last reset failed) until a reset succeeds.
          // warm: its next call finds its namespace up (pre-warm done), for warm_network (on/off).
          // image: the slot's root is that image (its working directory is where relative paths start).
          slots: svc.slots.map((s) => ({ slot_id: s.id, state: s.state, workspace: "/workspace", queued: s.queued, generation: s.generation, ...warmth(svc.readyNetwork(s)), ...slotImage(svc, s), ...(s.outOfService ? { out_of_service: s.outOfService } : {}) })),
        }),
      )
      .add("GET", "/metrics", (_req, res) => {
        res.writeHead(200, { "content-type": PROMETHEUS_CONTENT_TYPE });
        res.end(svc.metrics.render());
      })
      .add("POST", "/execute", async (req, res) => {
        const call = svc.parseCall(await this.body.read(req));
        sendJson(res, 200, await svc.execute(call));
      })
      .add("POST", "/batch", async (req, res) => {
        const body = await this.body.read(req);
        if (!Array.isArray(body)) throw new HttpError(400, "invalid request: /batch expects a JSON list of execute bodies", "body");
        const calls = body.map((b, i) => svc.parseCall(b, String(i)));
        const stream = ["1", "true", "yes"].includes(requestTarget(req.url).query.get("stream") ?? "");
        return stream ? this.streamBatch(res, calls) : sendJson(res, 200, await Promise.all(calls.map((c) => svc.execute(c))));
      })
      .add("POST", "/reset", async (req, res) => {
        const body = parseBody(ResetRequestSchema, await this.body.read(req));
        if (body.template !== undefined && body.image !== undefined) throw new HttpError(400, "a reset takes a template or an image, not both (a template names its own image: POST /templates with \"image\")", "image");
        sendJson(res, 200, await svc.reset(svc.slotById(body.slot_id), body.template, body.image));
      })
      .add("GET", "/images", (_req, res) => sendJson(res, 200, svc.images.list()))
      .add("POST", "/images", async (req, res) => {
        const body = parseBody(ImagePullRequestSchema, await this.body.read(req));
        sendJson(res, 200, await svc.images.pull(body.image));
      })
      .add("POST", "/fork", async (req, res) => {
        const body = parseBody(ForkRequestSchema, await this.body.read(req));
        sendJson(res, 200, await svc.fork(body.slot_id, body.into));
      })
      .add("GET", "/templates", (_req, res) => sendJson(res, 200, svc.templates.list()))
      .add("POST", "/templates", async (req, res) => {
        sendJson(res, 200, await svc.templates.build(parseBody(TemplateBuildRequestSchema, await this.body.read(req))));
      })
      // A template made of a slot's files (protocol/template-capture.ts: E2B's snapshots).
      .add("POST", "/templates/capture", async (req, res) => {
        const body = parseBody(TemplateCaptureRequestSchema, await this.body.read(req));
        sendJson(res, 200, await svc.capture(body.slot_id, body.name));
      })
      .add("POST", "/templates/delete", async (req, res) => {
        sendJson(res, 200, { deleted: svc.templates.store.delete(parseBody(TemplateDeleteRequestSchema, await this.body.read(req)).name) });
      })
      .add("POST", "/artifacts/read", artifacts("read"))
      .add("POST", "/artifacts/list", artifacts("list"))
      .add("POST", "/artifacts/archive", artifacts("archive"));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    let matched: ReturnType<RouteTable["match"]>;
    try {
      matched = this.routes.match(req);
    } catch (err) {
      // Without the token, not even which routes exist is told: 401/403 before 404/405.
      this.auth.check(req);
      throw err;
    }
    if (!matched.route.public) this.auth.check(req);
    await matched.route.handler(req, res, matched.path);
  }

  private streamBatch(res: ServerResponse, calls: ParsedCall[]): Promise<void> {
    res.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-cache" });
    res.flushHeaders();
    return Promise.all(
      calls.map((c, index) =>
        this.service.execute(c).then((r: ExecuteResponse) => {
          res.write(JSON.stringify({ ...r, index }) + "\n");
        }),
      ),
    ).then(() => {
      res.end();
    });
  }

  private async artifacts(req: IncomingMessage, res: ServerResponse, kind: "read" | "list" | "archive"): Promise<void> {
    const body = await this.body.read(req);
    const schema = kind === "read" ? ArtifactReadRequestSchema : kind === "list" ? ArtifactListRequestSchema : ArtifactArchiveRequestSchema;
    const parsed = parseBody(schema as z.ZodType<{ slot_id: string } & Record<string, unknown>>, body);
    const slot = this.service.slotById(parsed.slot_id);
    if (typeof parsed["path"] === "string") this.service.checkPath(slot, parsed["path"], "invalid request: path: ", "path");
    const { slot_id: _omit, ...rest } = parsed;
    // In the slot's queue (it sees the files of every earlier call); cut off by a reset or the shutdown: marked (file-calls.ts).
    const answer = await artifactCall(slot, kind, rest, () => this.service.shuttingDown, () => this.service.pathScope(slot));
    sendJson(res, 200, answer);
  }

  private sendError(res: ServerResponse, req: IncomingMessage, err: unknown): void {
    const status = errorStatus(err);
    const route = requestPath(req.url);
    this.service.metrics.errors.inc({ route, status });
    if (status >= 500) this.service.logger.error({ err, route }, "request failed");
    else this.service.logger.info({ route, status, error: err instanceof Error ? err.message : String(err) }, "request refused");
    // A streamed batch has sent its header already: end what was sent.
    if (res.headersSent) {
      res.end();
      return;
    }
    sendError(res, err);
  }

}

/** GET /health: task images here (cached, and which image each slot's root is). */
function imageHealth(svc: SandboxService): Record<string, unknown> {
  const list = svc.images.list();
  return {
    images: {
      available: list.available,
      ...(list.unavailable_reason ? { unavailable_reason: list.unavailable_reason } : {}),
      cached: list.images.map((i) => ({ reference: i.reference, digest: i.digest, size_bytes: i.size_bytes, in_use: i.in_use })),
      used_bytes: list.used_bytes,
      budget_bytes: list.budget_bytes,
    },
    slot_images: svc.slots.map((s) => {
      const img = svc.images.imageOf(s);
      return img ? { reference: img.reference, digest: img.digest } : null;
    }),
  };
}

/** GET /slots: the image a slot's root is, if any. */
function slotImage(svc: SandboxService, slot: Slot): { image?: { reference: string; digest: string; working_dir: string } } {
  const img = svc.images.imageOf(slot);
  return img ? { image: { reference: img.reference, digest: img.digest, working_dir: img.runtime.working_dir } } : {};
}

/** GET /slots: whether a slot's namespace is ready for its next call, and for which network setting. */
function warmth(network: boolean | undefined): { warm: boolean; warm_network?: "on" | "off" } {
  return network === undefined ? { warm: false } : { warm: true, warm_network: network ? "on" : "off" };
}
