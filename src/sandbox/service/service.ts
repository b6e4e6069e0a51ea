import { randomBytes } from "node:crypto";
import { chmodSync, mkdirSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Logger } from "pino";
import { workspacePathProblem, type ExecuteResponse, type ForkResponse, type ResetResponse, type IsolationSummary } from "../../protocol/sandbox.js";
import type { PathScope } from "../tools/path-guard.js";
import { INFRA_MARKER, type ToolInfraCause } from "../../protocol/infra.js";
import { blockedForOthers, octal } from "../../host/reachable.js";
import { HttpError, fieldName } from "../../http/errors.js";
import { SandboxSetupError } from "../core/errors.js";
import { identityFiles, type BwrapProbe } from "../isolation/isolation.js";
import { DEFAULT_LIMITS, type CommandLimits } from "../isolation/limits.js";
import { SandboxMetrics } from "./metrics.js";
import { fileCall } from "./file-calls.js";
import { Slot } from "../core/slot.js";
import { BashRunner } from "../tools/bash.js";
import type { SlotHost } from "../workspace/slot-host.js";
import type { OnChunk, ToolOutcome } from "../core/tool-outcome.js";
import { StatefulSessions } from "../tools/stateful.js";
import { VolumeStore } from "../workspace/volume-store.js";
import { ProcessSessions } from "../tools/process-sessions.js";
import { SlotBrowsers } from "../tools/browser/browser-tools.js";
import { parseCall, type ParsedCall } from "./parse-call.js";
import { isBrowserTool } from "../../protocol/browser-tools.js";
import type { CappedOutput } from "../run/output.js";
import type { RunResult } from "../run/runner.js";
import { SlotCgroups } from "../isolation/cgroups.js";
import { spawnerBinary, spawnerUnavailableReason } from "../isolation/spawner-binary.js";
import { limitsInForce, type LimitsInForce } from "../isolation/limits-in-force.js";
import { cannotSandboxMessage, isolationSummary, probeSandbox, unsandboxedNote } from "../isolation/isolation-summary.js";
import { DEFAULT_TEMPLATE_BUDGET_BYTES, SlotTemplates } from "../templates/slot-templates.js";
import { SlotImages, type ImageOptions } from "../images/slot-images.js";
import { ImageBuilds } from "./image-build.js";
import { SlotResets, type ResetHost } from "./slot-reset.js";
import type { MountedRoot, RootPlan } from "../images/slot-roots.js";
import { forkImageSlot, imageForkHost } from "../fork/image-fork.js";
import { captureSlot } from "./slot-capture.js";
import type { TemplateCaptureResponse } from "../../protocol/template-capture.js";
import { SlotNetworks } from "../isolation/slot-netns.js";
import { SlotForks } from "../fork/fork.js";
import { forkHost } from "../fork/fork-host.js";
import { DEFAULT_DISK_BYTES, SlotDisks } from "../workspace/slot-disk.js";
import { MountHelper, mountHelperBinary } from "../workspace/mount-helper.js";
import { TreeRemoval } from "../workspace/tree-removal.js";
import { SlotBootIds } from "../isolation/boot-id.js";
import { whyNoMounts } from "../../host/mount-namespace.js";
import { mayChangeOwnMounts, writableCgroups } from "../../host/container-mounts.js";
import { checkAllowRanges, probeInternet, type InternetAccess, type InternetProbe } from "../isolation/network.js";

/** Calls at least this long are logged at info even when they succeed. */
const SLOW_CALL_S = 1;

export interface SandboxServiceOptions {
  slots: number;
  dataDir: string;
  limits?: Partial<CommandLimits>;
  /** Network setting when a call does not say (the original's default: allowed). */
  defaultAllowNetwork?: boolean;
  /** Network setting the slots' namespaces are started ahead for (default: defaultAllowNetwork). */
  prewarmNetwork?: boolean;
  /** First host uid for slots when running as root (slot i runs as base + i). */
  slotUidBase?: number;
  /** Run slots as separate uids (default: when root). */
  perSlotUid?: boolean;
  /** Skip bubblewrap even if available (testing the unsandboxed mode; needs `allowUnsandboxed`). */
  disableSandbox?: boolean;
  /**
   * Start although commands cannot be sandboxed (development only: `--allow-unsandboxed`).
   * Without it a server that cannot sandbox refuses to start (fail closed); with it every
   * result and /health say the commands ran unsandboxed.
   */
  allowUnsandboxed?: boolean;
  /** Use one bubblewrap per call instead of the per-slot namespace (benchmarks, debugging). */
  disableSpawner?: boolean;
  /** The slots' seccomp filter (default ptrace on; `--no-ptrace`); false: none (`--no-seccomp`, benchmarks only; /health: "off"). */
  seccomp?: { ptrace: boolean } | false;
  /** Do not create per-slot cgroups. */
  disableCgroups?: boolean;
  /** Bound on what a slot writes, bytes; see slot-disk.ts. */
  diskBytes?: number;
  /**
   * As root, bound the workspace too: one tmpfs per slot (default true). The server should
   * run in a mount namespace of its own (the CLI arranges it) so the mounts die with it;
   * see slot-disk.ts.
   */
  boundWorkspace?: boolean;
  /** IPv4 ranges a slot with network on may reach although private (`--net-allow-ranges`). */
  netAllowRanges?: string[];
  maxReadBytes?: number;
  maxWriteBytes?: number;
  /** Size budget of workspace templates (LRU eviction of unused ones above it). */
  templateBudgetBytes?: number;
  /** Task images: the store's dir and budget, plain-HTTP registries allowed (src/sandbox/images/). */
  images?: ImageOptions;
  volumesDir?: string; // volumes (workspace/volume-store.ts): default <data dir>/volumes, shared by a pool's containers
  volumeOwner?: number; // as root, the uid their files belong to on disk (default 19999)
  logger: Logger;
}

export type { OnChunk, ToolOutcome, ParsedCall };

export class SandboxService implements SlotHost {
  readonly slots: Slot[];
  readonly limits: CommandLimits;
  readonly bwrap: BwrapProbe;
  readonly metrics: SandboxMetrics;
  readonly logger: Logger;
  readonly defaultAllowNetwork: boolean;
  readonly prewarmNetwork: boolean;
  readonly maxReadBytes: number;
  readonly maxWriteBytes: number;
  /** Compiled spawner (fast path), or null when it cannot be built. */
  readonly spawnerPath: string | null;
  readonly spawnerReason: string | undefined;
  readonly cgroups: SlotCgroups;
  /** RLIMIT_AS per process (bytes; 0: none): the memory bound where there is no slot cgroup. */
  readonly addressSpaceBytes: number;
  /** The per-slot bounds in force here (/health, the listening line). */
  readonly limitsInForce: LimitsInForce;
  /** Host dir for server-side state (spawner binary cache, unsandboxed terminal sockets). */
  readonly stateDir: string;
  readonly stateful: StatefulSessions;
  /** Long-lived processes outside the slots' queues (routes /processes/*, used by src/e2b). */
  readonly processes: ProcessSessions;
  /** Each slot's browser (docs/browser.md): in the slot's sandbox, on its terminal's network. */
  readonly browsers: SlotBrowsers;
  /** Workspace templates: builds, and each slot's copy-on-write view (`slot-templates.ts`). */
  readonly templates: SlotTemplates;
  /** How a slot with network on reaches the internet (undefined: network on is refused, loopback only). */
  readonly internetAccess: InternetAccess | undefined;
  readonly internetReason: string | undefined;
  readonly disks: SlotDisks;
  readonly mountHelper: MountHelper | null;
  readonly mayMount: boolean;
  readonly removal: TreeRemoval;
  readonly bootIds: SlotBootIds;
  /** POST /fork (fork.ts). */
  readonly forks: SlotForks;
  /** Task images: the store, and each slot's root when it is one (src/sandbox/images/). */
  readonly images: SlotImages;
  /** Image builds from E2B's template steps, each step a cached image (image-build.ts). */
  readonly imageBuilds: ImageBuilds;
  /** Each slot's shared network namespaces (slot-netns.ts). */
  readonly slotNetworks = new SlotNetworks();
  private readonly bash: BashRunner;
  private readonly resets: SlotResets;
  private closed = false;

  constructor(readonly options: SandboxServiceOptions) {
    this.logger = options.logger;
    this.limits = { ...DEFAULT_LIMITS, ...options.limits };
    this.defaultAllowNetwork = options.defaultAllowNetwork ?? true;
    this.prewarmNetwork = options.prewarmNetwork ?? this.defaultAllowNetwork;
    this.maxReadBytes = options.maxReadBytes ?? 10 * 1024 * 1024;
    this.maxWriteBytes = options.maxWriteBytes ?? 10 * 1024 * 1024;
    const dataDir = resolve(options.dataDir);
    mkdirSync(dataDir, { recursive: true, mode: 0o755 });
    this.stateDir = join(dataDir, ".slotpool");
    mkdirSync(this.stateDir, { recursive: true, mode: 0o711 });
    const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
    const perSlotUid = options.perSlotUid ?? isRoot;
    // Slot uids must be able to traverse (not list) the data dir to reach their own
    // workspace (each workspace is 0700 for its slot's uid).
    if (perSlotUid && isRoot) {
      chmodSync(dataDir, 0o711);
      // Checked here, before bubblewrap is probed: a probe failing on this would otherwise
      // look like "no bubblewrap" and the server would run commands unsandboxed.
      const blocked = blockedForOthers(dataDir);
      if (blocked) {
        throw new SandboxSetupError(
          "data_dir_unreachable",
          `the data dir ${dataDir} is out of reach of the slot uids: ${blocked.dir} is mode ${octal(blocked.mode)} (others cannot search it). ` +
            `Fix: pass --data-dir under a directory every user can search (e.g. --data-dir /var/lib/slotpool/data or /tmp/slotpool-data), or chmod o+x ${blocked.dir}`,
        );
      }
    }
    const base = options.slotUidBase ?? 20_000;
    this.removal = new TreeRemoval(join(this.stateDir, "trash"));
    this.bootIds = new SlotBootIds(join(this.stateDir, "boot-id"));
    // Mounting needs root, or (not root) a user namespace of the server's own.
    const noMounts = whyNoMounts();
    this.mayMount = noMounts === undefined;
    const helperPath = this.mayMount ? mountHelperBinary(this.stateDir) : null;
    this.mountHelper = helperPath ? new MountHelper(helperPath) : null;
    this.slots = [];
    for (let i = 0; i < options.slots; i++) {
      // Slot commands run as uid/gid base+i (e.g. 20000 for slot_0) when the server is root.
      const owner = perSlotUid && isRoot ? { uid: base + i, gid: base + i } : undefined;
      const slot = new Slot(i, join(dataDir, `slot_${i}`), owner);
      slot.prepare();
      // A crashed server's files: moved away at once, deleted by a child process.
      this.removal.emptyNow(slot.workspaceDir, owner);
      this.slots.push(slot);
    }
    const unbounded =
      options.boundWorkspace === false ? "turned off (--no-disk-workspace)"
      : options.disableSandbox ? "sandboxing is off (--no-sandbox)"
      : noMounts !== undefined ? `${noMounts}: bounding it needs a mount per slot`
      : undefined;
    this.disks = new SlotDisks(this.stateDir, options.diskBytes ?? DEFAULT_DISK_BYTES, unbounded, this.mountHelper);
    const first = this.slots[0];
    if (options.disableSandbox && !options.allowUnsandboxed) {
      throw new SandboxSetupError("sandbox_unavailable", "--no-sandbox runs every command unsandboxed: pass --allow-unsandboxed as well to say so (development only)");
    }
    this.bwrap = options.disableSandbox
      ? { available: false, path: null, reason: "sandboxing disabled by --no-sandbox", filter: null }
      : first
        ? probeSandbox(first.workspaceDir, first.owner, this.logger, options.seccomp ?? { ptrace: true }, [this.stateDir])
        : { available: false, path: null, reason: "no slots", filter: null };
    if (!this.bwrap.available) {
      if (!options.allowUnsandboxed) throw new SandboxSetupError("sandbox_unavailable", cannotSandboxMessage(this.bwrap.reason ?? "bubblewrap cannot be used"));
      this.logger.warn({ reason: this.bwrap.reason }, "UNSANDBOXED (--allow-unsandboxed, development only): commands run on the server's own system, unless require_sandbox is set");
    }
    if (this.bwrap.available && !options.disableSpawner) {
      this.spawnerPath = spawnerBinary([this.stateDir], { othersMustReach: perSlotUid && isRoot });
      this.spawnerReason = this.spawnerPath ? undefined : spawnerUnavailableReason();
      if (!this.spawnerPath) this.logger.warn({ reason: this.spawnerReason }, "per-slot spawner unavailable: one bubblewrap per call (slower)");
    } else {
      this.spawnerPath = null;
      this.spawnerReason = options.disableSpawner ? "disabled" : "bubblewrap unavailable";
    }
    const internet: InternetProbe = this.spawnerPath
      ? probeInternet(this.stateDir, checkAllowRanges(options.netAllowRanges ?? []))
      : { available: false, reason: "network on needs the per-slot spawner (one bubblewrap per call cannot host slirp4netns)" };
    this.internetAccess = internet.available ? internet.access : undefined;
    this.internetReason = internet.available ? undefined : internet.reason;
    if (!internet.available && this.bwrap.available) this.logger.warn({ reason: internet.reason }, "network on is unavailable: calls with allow_network run loopback-only");
    // In a container (Docker mounts the cgroupfs read-only): read-write in our own namespace.
    if (mayChangeOwnMounts() && !options.disableCgroups) {
      try {
        const remounted = writableCgroups();
        if (remounted.length > 0) this.logger.info({ remounted }, "cgroup mounts made writable in the server's own mount namespace");
      } catch (err) {
        this.logger.info({ reason: err instanceof Error ? err.message : String(err) }, "cgroup mounts stay read-only");
      }
    }
    if (internet.available && internet.access.dnsReason) this.logger.warn({ reason: internet.access.dnsReason }, "network-on slots get no DNS forwarder");
    this.cgroups = new SlotCgroups({ memoryBytes: this.limits.memoryBytes, maxProcesses: this.limits.maxProcesses }, this.logger, options.disableCgroups ?? false);
    if (this.cgroups.mode === "none" && !options.disableCgroups) this.logger.info({ reason: this.cgroups.reason }, "no per-slot cgroups");
    this.addressSpaceBytes = this.cgroups.mode === "none" && this.limits.addressSpaceLimit ? this.limits.memoryBytes : 0;
    this.metrics = new SandboxMetrics(() => this.slots);
    this.images = new SlotImages(this, options.images ?? {});
    this.bash = new BashRunner(this);
    this.stateful = new StatefulSessions(this);
    this.processes = new ProcessSessions(this, VolumeStore.forServer(options, dataDir, this.stateDir, perSlotUid && isRoot));
    this.browsers = new SlotBrowsers(this, (slot, net) => this.stateful.networkProcess(slot, net));
    this.templates = new SlotTemplates(this, options.templateBudgetBytes ?? DEFAULT_TEMPLATE_BUDGET_BYTES, this.images);
    this.imageBuilds = new ImageBuilds({
      images: this.images,
      processes: this.processes,
      stateDir: this.stateDir,
      logger: this.logger,
      insecureRegistries: options.images?.insecureRegistries ?? [],
      reset: (slot, template, image) => this.reset(slot, template, image),
    });
    // After the template views: they unmount whatever a killed server left on the workspaces,
    // which would take the disk bound's fresh mounts with it.
    this.disks.attachAll(this.slots);
    // After the disks: forks need each slot's disk (else they copy).
    this.forks = new SlotForks(
      forkHost(this, { bash: this.bash, stateful: this.stateful, emptyWorkspace: async (slot) => void (await this.emptyWorkspace(slot)), discard: (path) => this.removal.discard(path), runsSessions: (slot) => this.processes.runsSessions(slot) }),
    );
    this.resets = new SlotResets({ ...this.resetParts(), bash: this.bash });
    if (this.disks.reason && unbounded === undefined) this.logger.warn({ reason: this.disks.reason, disk_bytes: this.disks.bytes }, "slot disk bound is partial");
    // After attaching: a refused mount makes the disk bound /tmp-only, and /health says so.
    this.limitsInForce = limitsInForce({
      perSlotUids: perSlotUid && isRoot,
      cgroups: this.cgroups.mode,
      addressSpaceBytes: this.addressSpaceBytes,
      limits: this.limits,
      uid: process.getuid?.() ?? 0,
      disk: { mode: this.disks.mode, bytes: this.disks.bytes, ...(this.disks.reason ? { reason: this.disks.reason } : {}) },
    });
  }

  /**
   * The network a call gets: on only where it means the internet and never the host (the
   * slot's own namespace behind slirp4netns); otherwise loopback only (fail closed).
   * Unsandboxed servers isolate nothing, network included.
   */
  effectiveNetwork(requested: boolean): boolean {
    if (!this.bwrap.available) return requested;
    return requested && this.internetAccess !== undefined;
  }

  slotById(id: string, field = "slot_id"): Slot {
    const m = /^slot_(\d+)$/.exec(id);
    const slot = m ? this.slots[Number(m[1])] : undefined;
    if (!slot) throw new HttpError(404, `unknown slot '${id}': this server has slots slot_0 … slot_${this.slots.length - 1}`, field);
    return slot;
  }

  /** Validates one execute body; `prefix` names its position inside a batch. */
  parseCall(body: unknown, prefix?: string): ParsedCall {
    const call = parseCall(body, prefix, (id, field) => this.slotById(id, field));
    const path = call.args["path"];
    if ((call.tool === "read_file" || call.tool === "write_file") && typeof path === "string") this.checkPath(call.slot, path, `invalid args for ${call.tool}: `, fieldName(["args", "path"], prefix));
    return call;
  }

  /**
   * A workspace slot's paths stay under /workspace (400 naming the field before anything
   * runs); a slot whose root is an image takes any path of its root (path-guard.ts).
   */
  checkPath(slot: Slot, path: string, prefix: string, field: string): void {
    if (this.images.imageOf(slot)) return;
    const problem = workspacePathProblem(path);
    if (problem) throw new HttpError(400, `${prefix}path ${problem}`, field);
  }

  /** Where a slot's file tools and artifact routes walk: its workspace, or its image root from its working directory. */
  pathScope(slot: Slot): PathScope {
    const image = this.images.imageOf(slot);
    return image ? { dir: slot.workspaceDir, cwd: image.runtime.working_dir } : slot.workspaceDir;
  }

  /** Queues the call on its slot (arrival order) and resolves with its answer. */
  execute(call: ParsedCall, onChunk?: OnChunk): Promise<ExecuteResponse> {
    if (this.closed) return Promise.resolve(this.fail(call, "sandbox server is shutting down", "server_shutdown"));
    call.slot.pristine = false;
    return call.slot.enqueue(() => {
      // Queued before the shutdown began: it must not run on a slot being taken down.
      if (this.closed) return Promise.resolve(this.fail(call, "sandbox server is shutting down", "server_shutdown"));
      // Checked in the queue: a reset queued before this call decides.
      const broken = call.slot.outOfService;
      if (broken) return Promise.resolve(this.fail(call, `${call.slot.id} is out of service until a reset succeeds: ${broken}`, "sandbox_error"));
      // Checked in the queue too: a reset from outside that began after this call arrived decides.
      const stale = call.slot.staleFor(call.generation);
      if (stale) return Promise.resolve(this.fail(call, stale, "command_killed"));
      return this.runCall(call, onChunk);
    });
  }

  private async runCall(call: ParsedCall, onChunk?: OnChunk): Promise<ExecuteResponse> {
    const started = performance.now();
    let outcome: ToolOutcome;
    try {
      outcome = await this.dispatch(call, onChunk);
    } catch (err) {
      this.logger.error({ err, slot: call.slot.id, tool: call.tool }, "tool call failed");
      outcome = { success: false, output: "", error: `internal error: ${err instanceof Error ? err.message : String(err)}`, metadata: {} };
    }
    const seconds = (performance.now() - started) / 1000;
    const result = outcome.metadata["timeout"] ? "timeout" : outcome.success ? "ok" : "error";
    this.metrics.observeCall(call.tool, result, seconds);
    // One line per call, with the slot (and the allocation, in the logger's base fields): at
    // info for failed or slow calls, at debug for the rest, so the cheap calls of a busy server
    // (thousands a second) do not cost a log write each (SLOTPOOL_LOG_LEVEL=debug shows all).
    const level = result !== "ok" || seconds >= SLOW_CALL_S ? "info" : "debug";
    if (this.logger.isLevelEnabled(level)) {
      this.logger[level](
        { slot: call.slot.id, tool: call.tool, execution_id: call.executionId, outcome: result, exit_code: outcome.metadata.exit_code, ms: Math.round(seconds * 10000) / 10 },
        "call",
      );
    }
    // Every result of an unsandboxed server says so in words (--allow-unsandboxed only).
    if (!this.bwrap.available) outcome = { ...outcome, metadata: { ...outcome.metadata, sandboxed: false, unsandboxed: unsandboxedNote(this.bwrap.reason) } };
    return { ...outcome, execution_id: call.executionId };
  }

  /** What isolation the slots get here, for /health and run summaries. */
  isolation(): IsolationSummary {
    return isolationSummary({ limits: this.limitsInForce, bwrap: this.bwrap, filter: this.bwrap.filter, memoryBytes: this.limits.memoryBytes, maxProcesses: this.limits.maxProcesses, internet: this.internetAccess !== undefined, internetReason: this.internetReason });
  }

  /** One case per tool of the table (BuiltinToolName): a table tool without a case does not compile. */
  private async dispatch(call: ParsedCall, onChunk?: OnChunk): Promise<ToolOutcome> {
    if (isBrowserTool(call.tool)) return this.browsers.call(call.slot, call.tool, call.args, call.timeoutS);
    switch (call.tool) {
      case "bash":
        return this.bash.run(call.slot, call.args as { command: string; timeout?: number; allow_network?: boolean; require_sandbox?: boolean }, call.timeoutS, onChunk);
      case "read_file":
      case "write_file": {
        // write_file chowns what it creates to the slot's uid/gid (base + slot index when root), so its commands can modify it;
        // in an image root to the image user's (relative paths from its working directory, any path of the root).
        const image = this.images.rootFor(call.slot, 0);
        const owner = image ? image.owner : call.slot.owner;
        return fileCall(call.slot, call.tool, call.args, { maxReadBytes: this.maxReadBytes, maxWriteBytes: this.maxWriteBytes, ...(owner ? { owner } : {}) }, this.pathScope(call.slot));
      }
      case "bash_stateful":
        return this.stateful.bashStateful(call.slot, call.args as { command: string }, call.timeoutS);
      case "tmux":
        return this.stateful.tmux(call.slot, call.args as { action: "start" | "send_keys" | "capture" | "stop" }, call.timeoutS);
    }
  }

  /** A finished run → the tool's answer (shared by bash and the stateful terminal). */
  outcome(res: RunResult, output: CappedOutput, ctx: { sandboxed: boolean; networkIsolated: boolean; timeoutS: number; abortReason?: unknown }): ToolOutcome {
    return this.bash.outcome(res, output, ctx);
  }

  /** A refused call; `infra` marks a refusal that is the infrastructure's, not the caller's. */
  fail(call: ParsedCall, error: string, infra?: ToolInfraCause): ExecuteResponse {
    return { success: false, output: "", error, execution_id: call.executionId, metadata: infra ? { [INFRA_MARKER]: infra } : {} };
  }

  /** POST /reset (slot-reset.ts): the slot emptied, or its root `image` / its workspace a view of `template`. */
  reset(slot: Slot, template?: string, image?: string): Promise<ResetResponse> {
    return this.resets.reset(slot, template, image);
  }

  /** A fresh empty workspace (and /tmp, /var/tmp, /dev/shm where they are on the slot's disk). */
  async emptyWorkspace(slot: Slot, root?: RootPlan): Promise<MountedRoot | undefined> {
    if (this.disks.bounded(slot)) return this.disks.renew(slot, root);
    await this.removal.empty(slot.workspaceDir, slot.owner);
    return undefined;
  }

  /** POST /fork: `into` become copy-on-write copies of `parentId`'s workspace (fork.ts); bad requests are refused before anything happens. */
  fork(parentId: string, into: readonly string[]): Promise<ForkResponse> {
    if (this.closed) throw new HttpError(503, "sandbox server is shutting down");
    const parent = this.slotById(parentId);
    const children = into.map((id, i) => this.slotById(id, `into.${i}`));
    SlotForks.check(parent, children);
    // An image root: the children reset into the image with a copy of the parent's changes (image-fork.ts).
    if (this.images.imageOf(parent)) return this.forkImage(parent, children);
    // The children's contents are replaced: calls made for what they held before are refused.
    for (const c of children) c.generation++;
    // No browser survives a fork: its sandbox binds the workspace the children now share (docs/browser.md).
    return this.processes.whileStopped(parent, children, async () => {
      await Promise.all([parent, ...children].map((s) => this.browsers.close(s)));
      const forked = await this.forks.fork(parent, children);
      for (const c of children) {
        this.bootIds.renew(c);
        this.processes.networks.forgetEgress(c.index);
      }
      return { ...forked, generations: children.map((c) => c.generation) };
    });
  }

  private async forkImage(parent: Slot, children: Slot[]): Promise<ForkResponse> {
    // No browser survives a fork (docs/browser.md): the children are reset, the parent's is closed as for any fork.
    await Promise.all([parent, ...children].map((s) => this.browsers.close(s)));
    const parts = { logger: this.logger, cgroups: this.cgroups, images: this.images, processes: this.processes, stateful: this.stateful, bash: this.bash, templates: this.templates };
    const answer = await forkImageSlot(imageForkHost(parts, (child, template, image, from) => this.resets.reset(child, template, image, from)), parent, children);
    return { ...answer, generations: children.map((c) => c.generation) };
  }

  /** POST /templates/capture: a template of the slot's files as they are now (slot-capture.ts). */
  capture(slotId: string, name: string): Promise<TemplateCaptureResponse> {
    if (this.closed) throw new HttpError(503, "sandbox server is shutting down");
    const { cgroups, bwrap, templates, images, processes, stateful, bash } = this;
    return captureSlot({ cgroups, bwrap, templates, images, processes, stateful, bash, identity: (slot) => this.identity(slot) }, this.slotById(slotId), name);
  }

  /** Starts every slot's namespace ahead of its first call, in the background, a few at a time (not 50 sandboxes at once). */
  prewarm(concurrency = 4): Promise<void> {
    if (this.closed) return Promise.resolve();
    return this.bash.warmAll(concurrency);
  }

  /** Whether the slot's `bash` namespace is up (for the slot's last or the default network setting). */
  isWarm(slot: Slot): boolean {
    return this.bash.isWarm(slot);
  }
  readyNetwork = (slot: Slot): boolean | undefined => this.bash.readyNetwork(slot); // GET /slots `warm` (BashRunner)
  /** Whether close() has begun: calls still arriving or queued are refused as `server_shutdown`. */
  get shuttingDown(): boolean { return this.closed; } // prettier-ignore

  /** Stops every slot's processes (shutdown). */
  async close(): Promise<void> {
    this.closed = true;
    for (const slot of this.slots) slot.killRunning("shutdown");
    await this.browsers.closeAll();
    await this.stateful.close();
    await this.processes.close();
    await this.bash.close();
    await this.forks.close();
    this.templates.close();
    await this.images.close();
    await this.cgroups.cleanup();
    this.disks.detachAll(this.slots);
    this.mountHelper?.close();
  }

  private resetParts(): Omit<ResetHost, "bash"> {
    return { processes: this.processes, browsers: this.browsers, stateful: this.stateful, forks: this.forks, templates: this.templates, images: this.images, metrics: this.metrics, logger: this.logger, bootIds: this.bootIds, emptyWorkspace: (slot, root) => this.emptyWorkspace(slot, root) };
  }

  /** SlotHost: each slot's image root (the image room). */
  get imageRoots(): SlotImages {
    return this.images;
  }

  /** /etc/passwd and /etc/group overlays naming the slot's uid inside its sandbox. */
  identity(slot: Slot, user?: { name: string; home: string }): { passwd: string; group: string } {
    return identityFiles(this.stateDir, slot.owner?.uid ?? process.getuid?.() ?? 0, slot.owner?.gid ?? process.getgid?.() ?? 0, user);
  }

  newOutputName(): string {
    return `.slotpool-output-${Date.now()}-${randomBytes(4).toString("hex")}.txt`;
  }
}
