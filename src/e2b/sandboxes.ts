import { randomBytes, timingSafeEqual, createHash } from "node:crypto";
import type { Logger } from "../observability/logger.js";
import type { AcquireOptions, ContainerInfo, LeasedSlot, TemplateSpec } from "../pool/types.js";
import { ImageUnavailableError, SlotForkError } from "../pool/errors.js";
import { imageReferenceProblem } from "../protocol/images.js";
import type { ResetResponse } from "../protocol/sandbox.js";
import { E2bApiError, E2bUnsupportedError } from "./errors.js";
import type { TemplateLaunch } from "./template-build/built-templates.js";
import { runStartCommand, StartCommandError } from "./template-build/start-command.js";
import { startEnvdEnvs } from "./template-build/envd-envs.js";
import { PauseResume } from "./pause-resume.js";
import { DEFAULT_SLOT_PROCESS_LIMITS, SlotProcesses, type SlotProcessLimits } from "./slot-processes.js";
import { DEFAULT_PORT_LIMITS, SandboxPorts, type PortLimits } from "./sandbox-ports.js";
import type { VolumeMount } from "../protocol/volumes.js";
import type { EgressRules } from "../protocol/egress.js";
import { hasEgress, NO_EGRESS, type SandboxEgress } from "./sandbox-egress.js";
import { SandboxSnapshots, type SnapshotPool } from "./snapshots.js";

/** What the registry needs from a pool (SlotPool implements it). */
export interface E2bPool extends SnapshotPool {
  /** The pool's containers (SlotPool's): volumes are served through any ready one; a snapshot lives on one. */
  containerList?(): Array<ContainerInfo & { state: string }>;
  acquire(options: AcquireOptions): Promise<LeasedSlot>;
  release(slot: LeasedSlot, options?: { reset?: boolean }): Promise<void>;
  useTemplate?(slot: LeasedSlot, spec: TemplateSpec, options?: { signal?: AbortSignal }): Promise<ResetResponse | void>;
}

/** One E2B sandbox: one slot lease, held from create until kill or timeout. */
export interface E2bSandbox {
  readonly id: string;
  readonly templateId: string;
  /** A sandbox whose template id is a task image: the image's WorkingDir, where its commands start by default (E2B's template workdir). */
  readonly workdir: string | undefined;
  readonly slot: LeasedSlot;
  readonly processes: SlotProcesses;
  /** Connections to the sandbox's own ports (port-proxy.ts). */
  readonly ports: SandboxPorts;
  /** The in-sandbox API's token (`X-Access-Token`); reaches this sandbox's slot only. */
  readonly accessToken: string;
  /** Set when the sandbox's ports are private (`network.allowPublicTraffic: false`): the `e2b-traffic-access-token` they need. */
  readonly trafficAccessToken: string | undefined;
  /** E2B's `network.maskRequestHost`: the Host header its ports' servers get (`${PORT}` = the port). */
  readonly maskRequestHost: string | undefined;
  /** What create asked of its network (kept for forks). */
  readonly network: SandboxNetwork;
  /** Its egress rules as E2B lists them (allowOut / denyOut), and as the slot enforces them (sandbox-egress.ts). */
  egress: SandboxEgress;
  egressRules: EgressRules;
  /** Volumes mounted into every process of the sandbox (E2B's volumeMounts, by name and id). */
  readonly volumeMounts: ReadonlyArray<VolumeMount & { name: string }>;
  readonly envs: Record<string, string>;
  /** The envs whose values came from secrets (never listed with the commands: process-service.ts). */
  readonly secretEnvKeys: readonly string[];
  readonly metadata: Record<string, string>;
  /** Commands get internet (the slot's own network namespace); else loopback only. */
  readonly allowNetwork: boolean;
  readonly startedAt: Date;
  endAt: Date;
  timer: NodeJS.Timeout | undefined;
  /** Paused: every process frozen (or, filesystem-only, ended), no timeout running (pause-resume.ts). */
  state: "running" | "paused";
  /** What its timeout does (E2B's lifecycle): kill, or pause; and whether traffic resumes it. */
  readonly lifecycle: SandboxLifecycle;
  /** Pause, resume and end of this sandbox, one after another (a freeze must not land on a released slot). */
  ops: Promise<unknown>;
}

export interface SandboxLifecycle {
  onTimeout: "kill" | "pause";
  /** A timeout's pause keeps the processes (memory); false: filesystem-only, the processes end. */
  keepMemory: boolean;
  /** A request to the paused sandbox's API resumes it. */
  autoResume: boolean;
}

/** The part of E2B's `network` a slot has: who may reach its ports, and how (docs/e2b.md, "Ports"). */
export interface SandboxNetwork {
  /** false: its ports need its trafficAccessToken (default true: public, as E2B's). */
  allowPublicTraffic?: boolean | undefined;
  maskRequestHost?: string | undefined;
  /** Ports that serve HTTPS inside the sandbox (reached over TLS, certificate unchecked). */
  httpsPorts?: number[] | undefined;
}

export interface CreateSandbox {
  templateID?: string | undefined;
  envVars?: Record<string, string> | undefined;
  metadata?: Record<string, string> | undefined;
  /** Seconds until the sandbox is killed (E2B's default: 300). */
  timeout?: number | undefined;
  /** E2B's allow_internet_access; default: the server's network setting. */
  allowInternetAccess?: boolean | undefined;
  /** E2B's lifecycle: autoPause (pause instead of kill on timeout), autoPauseMemory, autoResume. */
  lifecycle?: Partial<SandboxLifecycle> | undefined;
  network?: SandboxNetwork | undefined;
  /** Which of envVars hold secret values (the caller resolved their placeholders). */
  secretEnvKeys?: string[] | undefined;
  /** Volumes to mount (resolved from E2B's names to ids by the caller). */
  volumeMounts?: Array<VolumeMount & { name: string }> | undefined;
  /** Egress rules (sandbox-egress.ts), in force before create answers. */
  egress?: { egress: SandboxEgress; rules: EgressRules } | undefined;
}

export interface SandboxRegistryOptions {
  pool: E2bPool;
  /** Templates built through E2B's template API (template-build/): their images, start and ready commands. */
  builtTemplates?: { resolve(ref: string): TemplateLaunch | undefined; names(): string[] };
  /** Workspace templates a sandbox may be created from, by name (`base` is the plain slot). */
  templates?: ReadonlyMap<string, TemplateSpec>;
  logger: Logger;
  /** Longest timeout a sandbox may ask for, seconds (default 86400, E2B Pro's 24 h). */
  maxTimeoutS?: number;
  /** Whether sandboxes' commands may reach the internet (default false, as the executor's default). */
  allowNetwork?: boolean;
  /** Per-sandbox bounds on open streams and stdin in flight (slot-processes.ts). */
  processLimits?: SlotProcessLimits;
  /** Per-sandbox bounds on port traffic (sandbox-ports.ts). */
  portLimits?: PortLimits;
  /** Longest wait for a built template's ready command at create, ms (default START_TIMEOUT_MS). */
  startTimeoutMs?: number;
}

export const DEFAULT_TIMEOUT_S = 300;
/** Longest wait for a built template's ready command at create (E2B's builder waits 10 min, once). */
export const START_TIMEOUT_MS = 5 * 60_000;
export const BASE_TEMPLATE = "base";

/**
 * The E2B sandboxes this server holds. A sandbox is a slot lease: created by acquiring a
 * slot (reset into a workspace template when one is named), ended by its timeout or a
 * kill, both of which stop its processes and release the slot (which resets it).
 */
export class SandboxRegistry {
  private readonly live = new Map<string, E2bSandbox>();
  private readonly keepAlive: NodeJS.Timeout;
  private readonly lifecycleOps: PauseResume<E2bSandbox>;
  /** E2B's snapshots: templates captured from sandboxes (snapshots.ts); a sandbox is created from one by its id. */
  readonly snapshots: SandboxSnapshots;
  private closed = false;

  constructor(private readonly options: SandboxRegistryOptions) {
    this.lifecycleOps = new PauseResume(options.logger, (s) => this.arm(s));
    this.snapshots = new SandboxSnapshots(options.pool, (name) => name === BASE_TEMPLATE || this.options.templates?.has(name) === true);
    // The pool reclaims leases unused for its lease timeout; a sandbox's own timeout is the
    // authority here, so every live lease is marked used now and then.
    this.keepAlive = setInterval(() => {
      for (const s of this.live.values()) if (!s.slot.lost) s.slot.touch();
    }, 60_000);
    this.keepAlive.unref();
  }

  get maxTimeoutS(): number {
    return this.options.maxTimeoutS ?? 86_400;
  }

  templateNames(): string[] {
    return [BASE_TEMPLATE, ...(this.options.templates?.keys() ?? []), ...(this.options.builtTemplates?.names() ?? [])];
  }

  private timeoutSeconds(timeout: number | undefined, field = "timeout"): number {
    const t = timeout ?? DEFAULT_TIMEOUT_S;
    if (!Number.isInteger(t) || t < 0) throw new E2bApiError(400, `${field} must be a whole number of seconds >= 0, got ${JSON.stringify(timeout)}`, field);
    if (t > this.maxTimeoutS) throw new E2bApiError(400, `${field} ${t} s is above this server's maximum of ${this.maxTimeoutS} s`, field);
    return t;
  }

  async create(req: CreateSandbox): Promise<E2bSandbox> {
    if (this.closed) throw new E2bApiError(503, "the server is shutting down");
    const templateId = req.templateID || BASE_TEMPLATE;
    const snapshot = templateId === BASE_TEMPLATE || this.options.templates?.has(templateId) ? undefined : this.snapshots.get(templateId);
    const workspace = templateId === BASE_TEMPLATE || snapshot ? undefined : this.options.templates?.get(templateId);
    // A template built through E2B's template API: its image (any container fetches it), then its start command.
    const built = templateId === BASE_TEMPLATE || snapshot || workspace ? undefined : this.options.builtTemplates?.resolve(templateId);
    const spec = templateId === BASE_TEMPLATE || snapshot ? undefined : (workspace ?? (built ? { name: "image", image: built.image } : imageTemplate(templateId)));
    if (templateId !== BASE_TEMPLATE && !spec && !snapshot) {
      const problem = imageReferenceProblem(templateId);
      const asImage = problem ? `; as an image reference it ${problem}` : `; a task image is named with a tag, a digest or a registry (python:3.12, registry.local:5000/repo@sha256:…)`;
      throw new E2bApiError(404, `template '${templateId}' not found: this server offers ${this.templateNames().map((n) => `'${n}'`).join(", ")} (workspace templates come from --templates)${asImage}`);
    }
    const timeoutS = this.timeoutSeconds(req.timeout);
    // Asking for internet on a server without it (E2B's Python SDK up to 2.34 always asks)
    // gives a sandbox with loopback only; its info says so (allowInternetAccess: false).
    const allowNetwork = (req.allowInternetAccess ?? true) && (this.options.allowNetwork ?? false);
    if (req.allowInternetAccess && !allowNetwork) this.options.logger.info({ template: templateId }, "a sandbox asked for internet access, which is off on this server (--allow-network): it gets loopback only");
    const id = "sp" + randomBytes(9).toString("hex");
    // Routed to a container holding the template, else the image (pool/slot-placement.ts).
    const named = this.options.templates?.has(templateId) === true;
    const leased = snapshot ? await this.snapshots.lease(snapshot, `e2b-${id}`) : undefined;
    const slot = leased?.slot ?? await this.options.pool.acquire({ trajectoryId: `e2b-${id}`, ...(named ? { template: templateId } : {}), ...(spec?.image !== undefined ? { image: spec.image } : {}) });
    let workdir = leased?.workdir;
    try {
      if (spec) {
        if (!this.options.pool.useTemplate) throw new E2bApiError(501, "this pool cannot reset slots into workspace templates");
        const res = await this.options.pool.useTemplate(slot, spec);
        workdir = res?.image?.runtime.working_dir || undefined;
      }
    } catch (err) {
      await this.options.pool.release(slot).catch(() => undefined);
      // The image could not be had on the container: a 4xx naming it when it does not exist, the server's status otherwise; this server lives on.
      if (err instanceof ImageUnavailableError) throw new E2bApiError(err.reason === "not_found" ? 404 : err.status ?? 502, `template '${templateId}': ${err.message}`);
      throw err;
    }
    const lifecycle = { onTimeout: "kill" as const, keepMemory: true, autoResume: false, ...req.lifecycle };
    const s = this.register(id, slot, { templateId, workdir: built?.workdir ?? workdir, envs: req.envVars ?? {}, metadata: req.metadata ?? {}, timeoutS, allowNetwork, lifecycle, network: req.network ?? {}, volumeMounts: req.volumeMounts ?? [], secretEnvKeys: req.secretEnvKeys ?? [] });
    if (req.egress) await this.withEgress(s, req.egress.egress, req.egress.rules);
    // A built template's start command, with the sandbox's egress rules already in force.
    if (built?.startCmd || built?.readyCmd) {
      try {
        // What the start command's programs may ask envd (the code interpreter: GET /envs).
        await startEnvdEnvs(s.processes, s.envs);
        await runStartCommand(s.processes, { startCmd: built.startCmd, readyCmd: built.readyCmd, envs: { ...s.envs }, cwd: s.workdir, allowNetwork, timeoutMs: this.options.startTimeoutMs ?? START_TIMEOUT_MS });
      } catch (err) {
        await this.kill(id);
        throw err instanceof StartCommandError ? new E2bApiError(500, `sandbox of template '${templateId}' could not start: ${err.message}`, undefined, { errorCode: err.code }) : err;
      }
    }
    return s;
  }

  /** A new sandbox gets its egress rules before anyone sees it; when they cannot be set, it ends (never a sandbox without its rules). */
  private async withEgress(s: E2bSandbox, egress: SandboxEgress, rules: EgressRules): Promise<void> {
    try {
      await this.applyEgress(s, egress, rules);
    } catch (err) {
      await this.end(s, "killed");
      throw err;
    }
  }

  /** E2B's network update (and create's rules): the sandbox's egress rules replaced, in force for its processes when this resolves. */
  async updateEgress(id: string, egress: SandboxEgress, rules: EgressRules): Promise<void> {
    await this.applyEgress(this.require(id), egress, rules);
  }

  private async applyEgress(s: E2bSandbox, egress: SandboxEgress, rules: EgressRules): Promise<void> {
    // Without internet nothing leaves the slot: the rules are kept (getInfo lists them), none is needed.
    if (s.allowNetwork && (hasEgress(egress) || hasEgress(s.egress))) await s.processes.setEgress(rules);
    s.egress = egress;
    s.egressRules = rules;
  }

  /** A held slot becomes a live sandbox (create, fork). */
  private register(
    id: string,
    slot: LeasedSlot,
    o: {
      templateId: string;
      workdir: string | undefined;
      envs: Record<string, string>;
      metadata: Record<string, string>;
      timeoutS: number;
      allowNetwork: boolean;
      lifecycle: SandboxLifecycle;
      network: SandboxNetwork;
      volumeMounts: ReadonlyArray<VolumeMount & { name: string }>;
      secretEnvKeys: readonly string[];
    },
  ): E2bSandbox {
    const now = new Date();
    const sandbox: E2bSandbox = {
      id,
      templateId: o.templateId,
      workdir: o.workdir,
      slot,
      processes: new SlotProcesses(slot, this.options.processLimits ?? DEFAULT_SLOT_PROCESS_LIMITS, o.volumeMounts.map((m) => ({ volume_id: m.volume_id, path: m.path }))),
      ports: new SandboxPorts(slot, o.allowNetwork, this.options.portLimits ?? DEFAULT_PORT_LIMITS, new Set(o.network.httpsPorts ?? [])),
      accessToken: randomBytes(24).toString("base64url"),
      trafficAccessToken: o.network.allowPublicTraffic === false ? randomBytes(24).toString("base64url") : undefined,
      maskRequestHost: o.network.maskRequestHost,
      network: o.network,
      egress: NO_EGRESS,
      egressRules: { allow: [], deny: [] },
      volumeMounts: o.volumeMounts,
      envs: o.envs,
      secretEnvKeys: o.secretEnvKeys,
      metadata: o.metadata,
      allowNetwork: o.allowNetwork,
      startedAt: now,
      endAt: new Date(now.getTime() + o.timeoutS * 1000),
      timer: undefined,
      state: "running",
      lifecycle: o.lifecycle,
      ops: Promise.resolve(),
    };
    this.live.set(id, sandbox);
    this.arm(sandbox);
    this.options.logger.info({ sandbox: id, template: o.templateId, slot: slot.key, timeoutS: o.timeoutS }, "sandbox created");
    return sandbox;
  }

  /**
   * `count` new sandboxes whose workspaces are copy-on-write copies of `source`'s as it is
   * now (the pool's `lease.fork`: sibling slots of the same container). The source keeps
   * running. All or nothing: when the fork fails, every entry is the same error.
   */
  async fork(source: E2bSandbox, count: number, timeout: number | undefined): Promise<Array<E2bSandbox | Error>> {
    if (!source.slot.fork) throw new E2bUnsupportedError("fork is not supported by this pool (its slots cannot fork)");
    // A fork ends the source's processes (docs/fork.md): a paused sandbox is resumed first, by the client.
    if (source.state === "paused") throw new E2bApiError(409, `sandbox '${source.id}' is paused: resume it (Sandbox.connect) before forking it`);
    const timeoutS = this.timeoutSeconds(timeout);
    const ids = Array.from({ length: count }, () => "sp" + randomBytes(9).toString("hex"));
    let slots: LeasedSlot[];
    try {
      slots = await source.slot.fork(count, { trajectoryIds: ids.map((id) => `e2b-${id}`) });
    } catch (err) {
      const reason = err instanceof SlotForkError ? err.reason : undefined;
      const status = reason === "capacity" || reason === "timeout" ? 503 : reason === "invalid" ? 400 : reason === "unsupported" ? 501 : 500;
      const e = new E2bApiError(status, `fork of sandbox '${source.id}' failed: ${err instanceof Error ? err.message : String(err)}`);
      return ids.map(() => e);
    }
    const forks = slots.map((slot, i) => this.register(ids[i]!, slot, { templateId: source.templateId, workdir: source.workdir, envs: { ...source.envs }, metadata: { ...source.metadata }, timeoutS, allowNetwork: source.allowNetwork, lifecycle: { ...source.lifecycle }, network: source.network, volumeMounts: source.volumeMounts, secretEnvKeys: source.secretEnvKeys }));
    // Each fork gets the source's egress rules (a fork starts from none: its slot was reset).
    return Promise.all(forks.map(async (f) => (hasEgress(source.egress) ? this.withEgress(f, source.egress, source.egressRules).then(() => f, (err: unknown) => (err instanceof Error ? err : new Error(String(err)))) : f)));
  }

  /** The live sandbox, or undefined (a sandbox whose slot was lost is ended here). */
  get(id: string): E2bSandbox | undefined {
    const s = this.live.get(id);
    if (s?.slot.lost) {
      this.options.logger.warn({ sandbox: id, slot: s.slot.key }, "sandbox's slot was lost (its container went away): sandbox ended");
      void this.end(s, "lost");
      return undefined;
    }
    return s;
  }

  /** The live sandbox or E2B's 404. */
  require(id: string): E2bSandbox {
    const s = this.get(id);
    if (!s) throw new E2bApiError(404, `sandbox '${id}' not found`);
    return s;
  }

  list(): E2bSandbox[] {
    return [...this.live.keys()].map((id) => this.get(id)).filter((s): s is E2bSandbox => s !== undefined);
  }

  /** Ends the sandbox now; false when there was none. */
  async kill(id: string): Promise<boolean> {
    const s = this.live.get(id);
    if (!s) return false;
    await this.end(s, "killed");
    return true;
  }

  /** A new timeout counted from now (E2B's setTimeout: shorter or longer than before). */
  setTimeout(id: string, timeout: number | undefined): E2bSandbox {
    const s = this.require(id);
    s.endAt = new Date(Date.now() + this.timeoutSeconds(timeout) * 1000);
    this.arm(s);
    return s;
  }

  /** A running sandbox's end moved later when `timeout` asks for more time (never shorter: E2B's connect). */
  extend(id: string, timeout: number | undefined): E2bSandbox {
    const s = this.require(id);
    if (timeout !== undefined && s.state === "running") {
      const end = Date.now() + this.timeoutSeconds(timeout) * 1000;
      if (end > s.endAt.getTime()) {
        s.endAt = new Date(end);
        this.arm(s);
      }
    }
    return s;
  }

  /** connect: resumes a paused sandbox (`resumed`), else extends a running one's timeout. */
  async connect(id: string, timeout: number | undefined, reboot = false): Promise<{ sandbox: E2bSandbox; resumed: boolean }> {
    const s = this.require(id);
    const t = timeout === undefined ? undefined : this.timeoutSeconds(timeout);
    const resumed = await this.serial(s, async () => {
      if (s.state !== "paused") return false;
      // A cold boot (E2B's memory: false): the processes end, the files stay.
      if (reboot) await s.processes.killAll();
      await this.lifecycleOps.resume(s, t ?? DEFAULT_TIMEOUT_S);
      return true;
    });
    if (!resumed) this.extend(id, timeout);
    return { sandbox: s, resumed };
  }

  /** E2B's pause: false when the sandbox was paused already (E2B's 409). */
  async pause(id: string, keepMemory = true): Promise<boolean> {
    const s = this.require(id);
    return this.serial(s, async () => {
      if (s.state === "paused") return false;
      await this.lifecycleOps.pause(s, keepMemory);
      return true;
    });
  }

  /** E2B's (deprecated) resume: false when the sandbox was running (E2B's 409). */
  async resume(id: string, timeout: number | undefined): Promise<boolean> {
    const s = this.require(id);
    const t = this.timeoutSeconds(timeout);
    return this.serial(s, async () => {
      if (s.state === "running") return false;
      await this.lifecycleOps.resume(s, t);
      return true;
    });
  }

  /** An API request for a paused sandbox with auto-resume, with its own token: resumes it first. */
  async wake(id: string, token: string | undefined): Promise<void> {
    const s = this.get(id);
    if (!s || s.state !== "paused" || !s.lifecycle.autoResume || !SandboxRegistry.tokenMatches(s, token)) return;
    await this.serial(s, () => (s.state === "paused" ? this.lifecycleOps.resume(s, DEFAULT_TIMEOUT_S) : undefined));
  }

  /** Traffic for a port of a paused sandbox with auto-resume resumes it (its access was checked by the proxy). */
  async wakeForTraffic(s: E2bSandbox): Promise<void> {
    if (s.state !== "paused" || !s.lifecycle.autoResume || this.live.get(s.id) !== s) return;
    await this.serial(s, () => (s.state === "paused" ? this.lifecycleOps.resume(s, DEFAULT_TIMEOUT_S) : undefined));
  }

  /** Runs `fn` after the sandbox's earlier pause/resume/end; refused once the sandbox has ended. */
  private serial<T>(s: E2bSandbox, fn: () => T | Promise<T>): Promise<T> {
    const run = s.ops.then(() => {
      if (this.live.get(s.id) !== s) throw new E2bApiError(404, `sandbox '${s.id}' not found: it was killed or timed out`);
      return fn();
    });
    s.ops = run.catch(() => undefined);
    return run;
  }

  /** Whether `token` is this sandbox's access token (constant time). */
  static tokenMatches(s: E2bSandbox, token: string | undefined | null): boolean {
    if (!token) return false;
    const a = createHash("sha256").update(token).digest();
    const b = createHash("sha256").update(s.accessToken).digest();
    return timingSafeEqual(a, b);
  }

  private arm(s: E2bSandbox): void {
    clearTimeout(s.timer);
    // A paused sandbox does not count against its timeout (E2B): resume sets a new one.
    if (s.state === "paused") return;
    const ms = Math.max(0, s.endAt.getTime() - Date.now());
    const expire = (): void => {
      if (s.lifecycle.onTimeout === "kill") return void this.end(s, "timeout");
      this.serial(s, () => (s.state === "running" ? this.lifecycleOps.pause(s, s.lifecycle.keepMemory) : undefined)).catch((err: unknown) => {
        this.options.logger.warn({ sandbox: s.id, err }, "pausing a sandbox at its timeout failed: it is killed instead");
        void this.end(s, "timeout");
      });
    };
    s.timer = setTimeout(expire, Math.min(ms, 2 ** 31 - 1));
    s.timer.unref();
  }

  private async end(s: E2bSandbox, why: "killed" | "timeout" | "lost" | "shutdown"): Promise<void> {
    if (this.live.get(s.id) !== s) return;
    this.live.delete(s.id);
    // After a pause or resume under way: its freeze must not reach the slot once released.
    await s.ops;
    clearTimeout(s.timer);
    // Its streams go first: they hold connections to the sandbox server, and nothing may use them now.
    s.processes.closeAll();
    s.ports.closeAll();
    if (!s.slot.lost) await s.processes.killAll().catch(() => undefined);
    // Release resets the slot: its workspace, /tmp and every process are gone before it is handed out again.
    await this.options.pool.release(s.slot).catch((err: unknown) => this.options.logger.warn({ sandbox: s.id, err }, "releasing a sandbox's slot failed"));
    this.options.logger.info({ sandbox: s.id, slot: s.slot.key, why }, "sandbox ended");
  }

  /** Ends every sandbox (server shutdown): every slot is released. */
  async close(): Promise<void> {
    this.closed = true;
    clearInterval(this.keepAlive);
    await Promise.all([...this.live.values()].map((s) => this.end(s, "shutdown")));
  }
}

/**
 * A template id that is no template of this server but names a task image (protocol/images.ts):
 * the sandbox's root is that image (docs/images.md), fetched by the slot's container if it
 * lacks it. Only a reference with a tag, a digest, a registry or a transport counts (a ':', '/'
 * or '@' in it): a bare name (`my-tmpl`) is a template name mistyped far more often than
 * Docker Hub's `library/my-tmpl`, and is answered 404 without reaching out to any registry.
 */
function imageTemplate(templateId: string): TemplateSpec | undefined {
  if (!/[:/@]/.test(templateId) || imageReferenceProblem(templateId) !== undefined) return undefined;
  return { name: "image", image: templateId };
}
