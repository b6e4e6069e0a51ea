import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createServer as createHttpsServer } from "node:https";
import type { Duplex } from "node:stream";
import { connectNodeAdapter } from "@connectrpc/connect-node";
import { HttpError } from "../http/errors.js";
import { listenOn } from "../http/lifecycle.js";
import { requestPath } from "../http/target.js";
import { silentLogger, type Logger } from "../observability/logger.js";
import { PoolNotRunningError, SlotAcquireTimeoutError } from "../pool/errors.js";
import type { TemplateSpec } from "../pool/types.js";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ControlPlane } from "./control-plane.js";
import { BuiltTemplates } from "./template-build/built-templates.js";
import { TemplateApi } from "./template-build/template-api.js";
import { TemplateBuilds } from "./template-build/template-builds.js";
import { TemplateFiles } from "./template-build/template-files.js";
import { nodeHeaders, sandboxForHeaders } from "./envd-auth.js";
import { e2bErrorBody, E2bUnsupportedError } from "./errors.js";
import { UploadBudget } from "./upload-budget.js";
import { handleFiles, type FilesLimits } from "./files-route.js";
import { filesystemService } from "./filesystem-service.js";
import { Filesystem } from "./gen/filesystem/filesystem_pb.js";
import { Process } from "./gen/process/process_pb.js";
import { processService, RAW_REQUEST } from "./process-service.js";
import { createContextValues } from "@connectrpc/connect";
import { SandboxRegistry, type E2bPool } from "./sandboxes.js";
import { DEFAULT_SLOT_PROCESS_LIMITS } from "./slot-processes.js";
import { DEFAULT_PORT_LIMITS, type PortLimits } from "./sandbox-ports.js";
import { PortProxy } from "./port-proxy.js";
import { VolumeApi } from "./volume-api.js";
import { SandboxVolumes } from "./volume-backend.js";
import { SecretStore } from "./secrets.js";
import { ENVD_PORT, requestTarget, type RequestTarget } from "./sandbox-target.js";

const MiB = 1024 * 1024;
/** The domain handed out without --domain (with the server's port). */
export const DEFAULT_DOMAIN = "e2b.localhost";

export interface E2bServerOptions {
  pool: E2bPool;
  /** The key E2B clients send as `X-API-Key` (E2B_API_KEY). */
  apiKey: string;
  /** Workspace templates sandboxes may be created from, by name. */
  templates?: ReadonlyMap<string, TemplateSpec>;
  logger?: Logger;
  /** Largest upload through /files, bytes (default 100 MiB). */
  maxUploadBytes?: number;
  /** Longest sandbox timeout, seconds (default 86400). */
  maxTimeoutS?: number;
  /** Memory reported per sandbox, MB (the sandbox servers' --memory-mb; default 1024). */
  memoryMB?: number;
  /** Sandboxes' commands may reach the internet (default false); a sandbox may still ask for none. */
  allowNetwork?: boolean;
  /** Largest download through /files, bytes (default 1 GiB); streamed, never held whole. */
  maxDownloadBytes?: number;
  /** Deadline of one /files download or upload's work in the slot, ms (default 300 s). */
  fileTimeoutMs?: number;
  /** Bytes one sandbox's uploads in flight may hold at once (default 128 MiB, at least maxUploadBytes), and all uploads (default 256 MiB, at least the former). */
  uploadBudgetBytes?: number;
  sandboxUploadBudgetBytes?: number;
  /** Streams (commands streamed or attached, watches, file transfers) one sandbox may hold open (default 32). */
  maxStreamsPerSandbox?: number;
  /** Watchers (CreateWatcher) one sandbox may hold (default 8). */
  maxWatchersPerSandbox?: number;
  /** Stdin bytes one sandbox may have on their way to its sandbox server at once (default 32 MiB). */
  maxStdinBytesPerSandbox?: number;
  /**
   * The domain sandboxes are handed (create's `domain`): the SDKs' `getHost(port)` is then
   * `<port>-<sandboxId>.<domain>`, which must reach this server (wildcard DNS). Default
   * `e2b.localhost:<port>` (docs/e2b.md, "Ports"). A function gets the URL the server listens on.
   */
  domain?: string | ((url: URL) => string);
  /** Bounds on each sandbox's port traffic (idle time, bytes each way, connections). */
  portLimits?: Partial<PortLimits>;
  /** Where secrets are kept (mode 0600) to outlive the server; default: in memory only (secrets.ts). */
  secretsFile?: string;
  /** Template builds (E2B's template API): where built images are pushed (`HOST[:PORT]/PREFIX`; default: the building server's build layout, same host only). */
  templateRegistry?: string;
  /** The image E2B's `fromTemplate('base')` builds on (default `e2bdev/base`). */
  templateBaseImage?: string;
  /** Where uploaded template files are kept (default a temporary directory of this server). */
  templateFilesDir?: string;
  /** HTTPS beside HTTP (same routes), for getHost's https:// URLs: a certificate for `*.<domain>` (PEM), on `port` (default: a free one). */
  tls?: { cert: string | Buffer; key: string | Buffer; port?: number };
  /** Longest wait for a built template's ready command when a sandbox starts, ms (default 5 minutes). */
  templateStartTimeoutMs?: number;
}

/**
 * An E2B-compatible server over a slot pool, on one port: the control plane (E2B_API_URL)
 * and the in-sandbox API (E2B_SANDBOX_URL). A request carrying `E2b-Sandbox-Id` is for the
 * in-sandbox API (Connect `process` and `filesystem` services, `/files`, `/health`),
 * anything else for the control plane. See docs/e2b.md.
 */
export class E2bServer {
  readonly registry: SandboxRegistry;
  private readonly server: Server;
  private readonly tlsServer: Server | undefined;
  /** The HTTPS URL, when TLS is configured. */
  tlsUrl = "";
  private readonly control: ControlPlane;
  private readonly rpc: ReturnType<typeof connectNodeAdapter>;
  private readonly logger: Logger;
  private readonly files: FilesLimits;
  private readonly ports: PortProxy;
  /** E2B's Volume APIs, where the pool can name its containers (volume-api.ts). */
  private readonly volumes: VolumeApi | undefined;
  /** E2B's secrets (secrets.ts): their values reach sandboxes' environments only. */
  private readonly secrets: SecretStore;
  /** E2B's template build API (template-build/). */
  private readonly templateApi: TemplateApi;
  private readonly templateBuilds: TemplateBuilds;
  private readonly templateFilesDir: string;
  private domainOption: string | undefined;
  private readonly domainOf: ((url: URL) => string) | undefined;
  url = "";

  constructor(private readonly options: E2bServerOptions) {
    if (!options.apiKey) throw new HttpError(500, "an E2B server needs an API key");
    this.logger = options.logger ?? silentLogger();
    const maxUploadBytes = options.maxUploadBytes ?? 100 * MiB;
    // Defaults that always fit the size limit: one largest upload per sandbox at least.
    const sandboxBudget = options.sandboxUploadBudgetBytes ?? Math.max(128 * MiB, maxUploadBytes);
    this.files = {
      maxUploadBytes,
      maxDownloadBytes: options.maxDownloadBytes ?? 1024 * MiB,
      timeoutMs: options.fileTimeoutMs ?? 300_000,
      uploads: new UploadBudget(options.uploadBudgetBytes ?? Math.max(256 * MiB, sandboxBudget), sandboxBudget),
    };
    const { uploads } = this.files;
    if (uploads.maxPerKey < maxUploadBytes || uploads.maxTotal < uploads.maxPerKey) {
      // Otherwise an upload the size limit allows could never fit its budget.
      throw new HttpError(500, `upload bounds must satisfy max upload (${maxUploadBytes}) <= per-sandbox upload budget (${uploads.maxPerKey}) <= server upload budget (${uploads.maxTotal}): see --max-upload-mb, --sandbox-upload-budget-mb, --upload-budget-mb`);
    }
    const built = new BuiltTemplates();
    this.templateFilesDir = options.templateFilesDir ?? mkdtempSync(join(tmpdir(), "slotpool-e2b-template-files-"));
    const files = new TemplateFiles(this.templateFilesDir, 4 * 1024 * MiB);
    this.templateBuilds = new TemplateBuilds({ pool: options.pool, templates: built, files, logger: this.logger, registry: options.templateRegistry, baseImage: options.templateBaseImage, allowNetwork: true });
    this.templateApi = new TemplateApi(built, this.templateBuilds, files);
    this.registry = new SandboxRegistry({
      builtTemplates: built,
      processLimits: {
        maxStreams: options.maxStreamsPerSandbox ?? DEFAULT_SLOT_PROCESS_LIMITS.maxStreams,
        maxInputBytes: options.maxStdinBytesPerSandbox ?? DEFAULT_SLOT_PROCESS_LIMITS.maxInputBytes,
      },
      pool: options.pool,
      logger: this.logger,
      ...(options.templates ? { templates: options.templates } : {}),
      ...(options.maxTimeoutS !== undefined ? { maxTimeoutS: options.maxTimeoutS } : {}),
      allowNetwork: options.allowNetwork ?? false,
      portLimits: { ...DEFAULT_PORT_LIMITS, ...options.portLimits },
      ...(options.templateStartTimeoutMs !== undefined ? { startTimeoutMs: options.templateStartTimeoutMs } : {}),
    });
    if (typeof options.domain === "function") this.domainOf = options.domain;
    else this.domainOption = options.domain;
    this.secrets = new SecretStore(options.secretsFile);
    const volumes = options.pool.containerList ? new SandboxVolumes(options.pool) : undefined;
    this.volumes = volumes
      ? new VolumeApi({ volumes, domain: () => this.domain, mounted: (id) => this.registry.list().find((s) => s.volumeMounts.some((m) => m.volume_id === id))?.id })
      : undefined;
    this.control = new ControlPlane({
      apiKey: options.apiKey,
      registry: this.registry,
      memoryMB: options.memoryMB ?? 1024,
      domain: () => this.domain,
      ...(volumes ? { volumeByName: (name: string) => volumes.byName(name) } : {}),
      resolveSecrets: (envs) => this.secrets.resolve(envs),
    });
    this.ports = new PortProxy(this.registry, this.logger);
    const registry = this.registry;
    const maxWatchers = options.maxWatchersPerSandbox;
    this.rpc = connectNodeAdapter({
      routes(router) {
        router.service(Process, processService(registry));
        router.service(Filesystem, filesystemService(registry, maxWatchers !== undefined ? { maxWatchers } : {}));
      },
      // Uploads go through /files; Connect messages stay small.
      readMaxBytes: 16 * 1024 * 1024,
      contextValues: (req) => createContextValues().set(RAW_REQUEST, req),
    });
    this.server = this.attach(createServer());
    // HTTPS for getHost's https://<port>-<id>.<domain> (the URL E2B code writes): same routes.
    if (options.tls) this.tlsServer = this.attach(createHttpsServer({ cert: options.tls.cert, key: options.tls.key }));
  }

  /** The request and upgrade handlers and the timeouts, on the HTTP server and on the HTTPS one. */
  private attach<S extends Server>(server: S): S {
    server.on("request", (req: IncomingMessage, res: ServerResponse) => {
      this.handle(req, res).catch((err: unknown) => this.fail(req, res, err));
    });
    // WebSockets (any upgrade) for a sandbox's ports; nothing else here upgrades.
    server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
      let target: RequestTarget;
      try {
        target = requestTarget(req.headers, this.domainOption);
      } catch (err) {
        return refuseUpgrade(socket, err instanceof HttpError ? err.status : 400, err instanceof Error ? err.message : String(err));
      }
      if (target.kind !== "sandbox" || target.port === ENVD_PORT) return refuseUpgrade(socket, 404, `no WebSocket here: only a sandbox's own ports take them (<port>-<sandboxId>.<domain>, or E2b-Sandbox-Id with E2b-Sandbox-Port)`);
      this.ports.upgrade(req, socket, head, target.sandboxId, target.port).catch((err: unknown) => {
        this.logger.error({ err }, "port WebSocket failed");
        socket.destroy();
      });
    });
    server.keepAliveTimeout = 65_000;
    server.headersTimeout = 15_000;
    // Long-running command streams: no overall request deadline (a command has its own timeout).
    server.requestTimeout = 0;
    return server;
  }

  /** Bytes uploads in flight hold now (the upload budget's use). */
  get uploadsInFlight(): number {
    return this.files.uploads.inFlight;
  }

  /** Listens on `port` (HTTP), and with TLS configured on its port too (`tlsUrl`). */
  async listen(port: number, host: string): Promise<string> {
    this.url = await listenOn(this.server, port, host);
    if (this.tlsServer) this.tlsUrl = (await listenOn(this.tlsServer, this.options.tls?.port ?? 0, host)).replace(/^http:/, "https:");
    if (this.domainOf) this.domainOption = this.domainOf(new URL(this.tlsUrl || this.url));
    return this.url;
  }

  /**
   * The domain sandboxes are handed: `--domain`, else `e2b.localhost:<port>` (of the HTTPS
   * port when there is one: getHost's URLs are https in E2B code). Every `*.localhost` name is
   * loopback in browsers, curl and systemd-resolved (RFC 6761); a label before `localhost`
   * lets a certificate name them all (`*.e2b.localhost`: TLS takes no wildcard right under a
   * top-level name).
   */
  get domain(): string | undefined {
    const own = this.tlsUrl || this.url;
    return this.domainOption ?? (own ? `${DEFAULT_DOMAIN}:${new URL(own).port}` : undefined);
  }

  /** Stops taking requests and ends every sandbox (each slot is released and reset). */
  async close(): Promise<void> {
    const servers = [this.server, ...(this.tlsServer ? [this.tlsServer] : [])];
    const closed = Promise.all(servers.map((srv) => new Promise<void>((resolve) => srv.close(() => resolve()))));
    for (const srv of servers) srv.closeIdleConnections();
    this.templateBuilds.close();
    await this.registry.close();
    if (!this.options.templateFilesDir) rmSync(this.templateFilesDir, { recursive: true, force: true });
    for (const srv of servers) srv.closeAllConnections();
    await closed;
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const path = requestPath(req.url);
    const target = requestTarget(req.headers, this.domainOption);
    if (target.kind === "control") {
      // A signed /files URL used through E2B_SANDBOX_URL carries no sandbox id: its signature names the sandbox.
      if (path === "/files" && /[?&]signature=/.test(req.url ?? "")) return handleFiles(this.registry, req, res, this.files);
      // Volumes: the content API opens with the volume's token, the rest with the API key.
      if (VolumeApi.isContent(path)) return this.need(this.volumes, "volumes").content(req, res);
      if (path === "/volumes" || path.startsWith("/volumes/")) {
        this.control.checkKey(req);
        if (await this.need(this.volumes, "volumes").control(req, res, path)) return;
      }
      // E2B's template build API (template-build/template-api.ts); the upload URL carries its own signature.
      if (TemplateApi.isUpload(path)) return this.templateApi.upload(req, res, path);
      if (/^\/(?:v[23]\/)?templates(?:\/|$)/.test(path)) {
        this.control.checkKey(req);
        if (await this.templateApi.handle(req, res, path)) return;
      }
      if (path === "/secrets" || path.startsWith("/secrets/")) {
        this.control.checkKey(req);
        if (await this.secrets.handle(req, res, path)) return;
      }
      return this.control.handle(req, res);
    }
    // A port of the sandbox's own: its server gets the request (port-proxy.ts).
    if (target.port !== ENVD_PORT) return this.ports.http(req, res, target.sandboxId, target.port);
    // The in-sandbox API named by its host (`49983-<id>.<domain>`, the SDKs' signed URLs): as if by its headers.
    if (target.by === "host") {
      req.headers["e2b-sandbox-id"] = target.sandboxId;
      req.headers["e2b-sandbox-port"] = String(ENVD_PORT);
    }
    // A paused sandbox created with auto-resume wakes on its own API's traffic (E2B's autoResume).
    await this.registry.wake(String(req.headers["e2b-sandbox-id"]), nodeHeaders(req.headers).get("x-access-token") ?? undefined);
    if (path.startsWith("/process.Process/") || path.startsWith("/filesystem.Filesystem/")) return this.rpc(req, res);
    if (path === "/files") return handleFiles(this.registry, req, res, this.files);
    if (path === "/health") {
      sandboxForHeaders(this.registry, nodeHeaders(req.headers));
      res.writeHead(204);
      res.end();
      return;
    }
    throw new HttpError(404, `no in-sandbox route ${req.method} ${path} (slotpool serves envd's process and filesystem services, /files and /health)`);
  }

  /** A part this server may lack (volumes need a pool that names its containers): 501 without it. */
  private need<T>(part: T | undefined, what: string): T {
    if (part === undefined) throw new E2bUnsupportedError(`${what} need a pool whose containers this server can reach (SlotPool's)`);
    return part;
  }

  private fail(req: IncomingMessage, res: ServerResponse, err: unknown): void {
    const status =
      err instanceof HttpError ? err.status : err instanceof E2bUnsupportedError ? 501 : err instanceof SlotAcquireTimeoutError || err instanceof PoolNotRunningError ? 503 : 500;
    const message = err instanceof Error ? err.message : String(err);
    if (status >= 500 && status !== 501 && status !== 502 && status !== 503) this.logger.error({ err, path: requestPath(req.url) }, "E2B request failed");
    else this.logger.debug({ path: requestPath(req.url), status, error: message }, "E2B request refused");
    if (res.headersSent) {
      res.destroy();
      return;
    }
    const body = JSON.stringify(e2bErrorBody(status, message, err));
    res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
    // An unread request body (a refused upload) must not be parsed as the next request.
    if (!req.complete) req.resume();
  }
}

function refuseUpgrade(socket: Duplex, status: number, message: string): void {
  const body = JSON.stringify(e2bErrorBody(status, message));
  socket.end(`HTTP/1.1 ${status} ${status === 404 ? "Not Found" : "Bad Request"}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}
