import { randomBytes } from "node:crypto";
import { chmod, mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Logger } from "pino";
import { blockedForOthers, octal } from "../host/reachable.js";
import { silentLogger } from "../observability/logger.js";
import { ProvisionerError, type Provisioner, type ProvisionerEvents } from "./provisioner.js";
import { startSandboxProcess, type SandboxProcess } from "./sandbox-process.js";
import { hasSlotUidBase, SlotUidAllocator } from "../host/slot-uid-blocks.js";

/**
 * The embedded provisioner: each container is a `slotpool sandbox-server` child process on a
 * free loopback port with its own random token and data directory. It behaves like a Nomad
 * task group: it keeps `count` containers running, names them by index (scale-up fills the
 * lowest free index, scale-down stops the highest), and replaces any that exit.
 *
 * Slot uids: a root sandbox server runs slot i as host uid `--slot-uid-base` + i, and
 * per-uid limits (RLIMIT_NPROC) are host-wide, so every container gets its own uid block
 * (`src/host/slot-uid-blocks.ts`: a random per-provisioner base in [2^30, 2^31) + block × stride, stride
 * ≥ slots per container, a block never shared by two live containers nor used by any live
 * process). A fork bomb in one container's slot cannot starve the same slot of another
 * container, nor of another pool on the host. `extraArgs` with `--slot-uid-base` opts out.
 */
export interface LocalProvisionerOptions {
  slotsPerContainer: number;
  /** Where container data dirs go (default: a fresh temp dir, removed on stop). */
  baseDir?: string;
  /** Loopback address the servers bind (default 127.0.0.1). */
  host?: string;
  /**
   * Slots' commands may reach the network (default false: loopback only, as the executor's
   * `allowNetwork`). The pool's calls that do not set `allow_network` get this, and the
   * servers pre-warm each slot's namespace for it. Template builds keep the servers' own
   * default (network where the host offers it): their setup commands are the env's, not a model's.
   */
  allowNetwork?: boolean;
  /** Extra `slotpool sandbox-server` flags. */
  extraArgs?: string[];
  env?: NodeJS.ProcessEnv;
  /** How long a server may take to start listening (default 20 s). */
  startTimeoutMs?: number;
  /** SIGTERM → SIGKILL grace on stop (default 5 s). */
  stopGraceMs?: number;
  /** Consecutive early failures (start failed or exit within `crashWindowMs`, default 10 s) that make a crash loop (default 3). */
  crashLoopThreshold?: number;
  crashWindowMs?: number;
  logger?: Logger;
}

interface LocalContainer {
  id: string;
  index: number;
  token: string;
  dataDir: string;
  /** First host uid of this container's slots (undefined: the caller's extraArgs choose). */
  slotUidBase: number | undefined;
  startedAt: number;
  process: SandboxProcess | undefined;
  stopping: boolean;
  /** First and last lines of the server's output (a usage error comes first, a crash last). */
  head: string[];
  tail: string[];
}

const TAIL_LINES = 8;

export class LocalProvisioner implements Provisioner {
  readonly kind = "local";
  get slotsPerContainer(): number {
    return this.options.slotsPerContainer;
  }
  get allowNetwork(): boolean {
    return this.options.allowNetwork ?? false;
  }
  private readonly options: LocalProvisionerOptions;
  private readonly logger: Logger;
  private readonly containers = new Map<number, LocalContainer>();
  private readonly exiting = new Set<Promise<void>>();
  private events: ProvisionerEvents | undefined;
  private target = 0;
  private baseDir: string | undefined;
  private ownsBaseDir = false;
  private stopped = false;
  private consecutiveFailures = 0;
  private restartTimer: NodeJS.Timeout | undefined;
  private restartBlockedUntil = 0;
  private readonly uids: SlotUidAllocator;

  constructor(options: LocalProvisionerOptions) {
    if (!Number.isInteger(options.slotsPerContainer) || options.slotsPerContainer < 1) {
      throw new ProvisionerError(`LocalProvisioner: slotsPerContainer must be a whole number ≥ 1, got ${options.slotsPerContainer}`, "config");
    }
    const host = options.host ?? "127.0.0.1";
    if (!/^127\.\d+\.\d+\.\d+$/.test(host) && host !== "localhost" && host !== "::1") {
      throw new ProvisionerError(`LocalProvisioner: host must be a loopback address, got '${host}'`, "config");
    }
    if (options.allowNetwork !== undefined && typeof options.allowNetwork !== "boolean") {
      throw new ProvisionerError(`LocalProvisioner: allowNetwork must be true or false, got ${JSON.stringify(options.allowNetwork)}`, "config");
    }
    this.options = options;
    this.logger = options.logger ?? silentLogger();
    this.uids = new SlotUidAllocator(options.slotsPerContainer);
  }

  async start(events: ProvisionerEvents, initialCount: number): Promise<void> {
    if (this.events) throw new ProvisionerError("LocalProvisioner.start() called twice", "other");
    this.events = events;
    if (this.options.baseDir) {
      await mkdir(this.options.baseDir, { recursive: true });
      this.baseDir = this.options.baseDir;
      // A root server runs slots as other uids: refuse now, naming the fix, rather than
      // after every container's start failed the same way.
      const blocked = process.getuid?.() === 0 ? blockedForOthers(this.baseDir) : undefined;
      if (blocked) {
        throw new ProvisionerError(
          `LocalProvisioner: the data dir ${this.baseDir} is out of reach of the slot uids: ${blocked.dir} is mode ${octal(blocked.mode)} (others cannot search it). ` +
            `Fix: a data dir under a directory every user can search (e.g. /var/lib/slotpool or /tmp), or chmod o+x ${blocked.dir}`,
          "config",
        );
      }
    } else {
      this.baseDir = await mkdtemp(join(reachableTempDir(), "slotpool-local-"));
      // mkdtemp makes it 0700; slot commands run as other uids and must reach their workspaces.
      await chmod(this.baseDir, 0o755);
      this.ownsBaseDir = true;
    }
    this.target = initialCount;
    this.reconcile();
  }

  async setTargetCount(count: number, reason: string): Promise<void> {
    if (!Number.isInteger(count) || count < 0) throw new ProvisionerError(`LocalProvisioner: container count must be a whole number ≥ 0, got ${count}`, "config");
    if (this.stopped) return;
    this.logger.info({ from: this.target, to: count, reason }, "local provisioner: scaling");
    this.target = count;
    this.reconcile();
  }

  async replaceContainer(id: string, reason: string): Promise<void> {
    for (const c of this.containers.values()) {
      if (c.id !== id || !c.process) continue;
      this.logger.warn({ container: id, reason }, "local provisioner: replacing a container");
      c.process.child.kill("SIGKILL");
    }
  }

  /** The running servers (for status output and tests). */
  processes(): Array<{ id: string; index: number; pid: number; url: string; dataDir: string; slotUidBase: number | undefined }> {
    return [...this.containers.values()]
      .filter((c) => c.process)
      .sort((a, b) => a.index - b.index)
      .map((c) => ({ id: c.id, index: c.index, pid: c.process!.pid, url: c.process!.url, dataDir: c.dataDir, slotUidBase: c.slotUidBase }));
  }

  async describe(): Promise<string> {
    const lines = [...this.containers.values()]
      .sort((a, b) => a.index - b.index)
      .map((c) => `  [${c.index}] ${c.id}: ${c.process ? `running at ${c.process.url}` : "starting"}${c.tail.length ? `; last output: ${c.tail.slice(-3).join(" | ")}` : ""}`);
    return `local containers (target ${this.target}):\n${lines.join("\n") || "  (none)"}`;
  }

  /** Local containers keep nothing between runs: every data dir goes, so `purge` changes nothing. */
  async stop(_options: { purge: boolean }): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    clearTimeout(this.restartTimer);
    const grace = this.options.stopGraceMs ?? 5_000;
    await Promise.all(
      [...this.containers.values()].map(async (c) => {
        c.stopping = true;
        await c.process?.stop(grace);
      }),
    );
    // The exit handlers report and clean up each container; wait for them.
    await Promise.all([...this.exiting]);
    // Each container's data dir went with it; a temp base dir of our own goes too.
    if (this.baseDir && this.ownsBaseDir) await rm(this.baseDir, { recursive: true, force: true });
  }

  /** Starts missing indexes below the target (lowest first) and stops the ones at or above it. */
  private reconcile(): void {
    if (this.stopped || !this.events) return;
    for (const c of this.containers.values()) {
      if (c.index >= this.target && !c.stopping) {
        c.stopping = true;
        void c.process?.stop(this.options.stopGraceMs ?? 5_000);
      }
    }
    if (performance.now() < this.restartBlockedUntil) {
      this.scheduleReconcile(this.restartBlockedUntil - performance.now());
      return;
    }
    for (let index = 0; index < this.target; index++) {
      if (!this.containers.has(index)) this.launch(index);
    }
  }

  private scheduleReconcile(delayMs: number): void {
    clearTimeout(this.restartTimer);
    this.restartTimer = setTimeout(() => this.reconcile(), Math.max(1, delayMs));
    this.restartTimer.unref();
  }

  private launch(index: number): void {
    const id = `local-${index}-${randomBytes(4).toString("hex")}`;
    const c: LocalContainer = {
      id,
      index,
      token: randomBytes(24).toString("base64url"),
      dataDir: join(this.baseDir!, id),
      slotUidBase: hasSlotUidBase(this.options.extraArgs) ? undefined : this.uids.acquire(),
      startedAt: performance.now(),
      process: undefined,
      stopping: false,
      head: [],
      tail: [],
    };
    this.containers.set(index, c);
    this.events!.containerStarting(id, index);
    const done = this.run(c).finally(() => this.exiting.delete(done));
    this.exiting.add(done);
  }

  /** One volumes folder for all of this pool's containers (a volume is the same wherever a sandbox lands); extraArgs naming one win. */
  private volumesArgs(): string[] {
    if (this.options.extraArgs?.some((a) => a === "--volumes-dir" || a.startsWith("--volumes-dir="))) return [];
    return ["--volumes-dir", join(this.baseDir!, "volumes")];
  }

  /**
   * Each slot's namespace is started ahead for the network the pool's calls use (else every
   * fresh slot's first call would build it from scratch); extraArgs naming it win.
   */
  private prewarmArgs(): string[] {
    if (this.options.extraArgs?.some((a) => a === "--prewarm-network" || a.startsWith("--prewarm-network="))) return [];
    return ["--prewarm-network", this.allowNetwork ? "on" : "off"];
  }

  private async run(c: LocalContainer): Promise<void> {
    const slots = this.options.slotsPerContainer;
    let proc: SandboxProcess;
    try {
      await mkdir(c.dataDir, { recursive: true });
      proc = await startSandboxProcess({
        slots,
        dataDir: c.dataDir,
        host: this.options.host ?? "127.0.0.1",
        port: 0,
        token: c.token,
        startTimeoutMs: this.options.startTimeoutMs ?? 20_000,
        // A crashed (SIGKILLed) owner must not leave its sandbox servers running.
        dieWithParent: true,
        extraArgs: [...(c.slotUidBase !== undefined ? ["--slot-uid-base", String(c.slotUidBase)] : []), ...this.prewarmArgs(), ...this.volumesArgs(), ...(this.options.extraArgs ?? [])],
        ...(this.options.env ? { env: this.options.env } : {}),
        onLog: (line) => {
          if (c.head.length < 2 && line.trim()) c.head.push(line.length > 400 ? `${line.slice(0, 400)}…` : line);
          c.tail.push(line.length > 400 ? `${line.slice(0, 400)}…` : line);
          if (c.tail.length > TAIL_LINES) c.tail.shift();
        },
      });
    } catch (err) {
      const first = (err instanceof Error ? err.message : String(err)).split("\n")[0];
      const output = c.head.length ? `; its output began: ${c.head.join(" | ")}` : "";
      await this.finish(c, `sandbox server ${c.id} failed to start: ${first}${output}`, true);
      return;
    }
    c.process = proc;
    if (c.stopping || this.stopped) {
      await proc.stop(this.options.stopGraceMs ?? 5_000);
      await this.finish(c, "stopped before it was used", false);
      return;
    }
    this.logger.info({ container: c.id, index: c.index, url: proc.url, pid: proc.pid }, "local provisioner: container up");
    this.events!.containerUp({ id: c.id, index: c.index, url: proc.url, token: c.token, slots });
    const { code, signal } = await proc.exited;
    if (c.stopping) {
      await this.finish(c, this.stopped ? "the pool was stopped" : "scaled down", false);
      return;
    }
    const early = performance.now() - c.startedAt < (this.options.crashWindowMs ?? 10_000);
    const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
    await this.finish(c, `sandbox server process ${proc.pid} (${c.id}) ${how}; last output: ${c.tail.slice(-4).join(" | ") || "(none)"}`, early);
  }

  /** Reports a container gone, removes its data, and lets reconcile replace it when still wanted. */
  private async finish(c: LocalContainer, reason: string, failure: boolean): Promise<void> {
    if (this.containers.get(c.index) === c) this.containers.delete(c.index);
    // The server has exited (its slot processes died with it): its uid block is free again.
    if (c.slotUidBase !== undefined) this.uids.release(c.slotUidBase);
    const expected = c.stopping;
    this.events!.containerGone({ id: c.id, index: c.index, reason, expected });
    const removed = rm(c.dataDir, { recursive: true, force: true }).catch(() => undefined);
    if (expected) {
      await removed;
      return;
    }
    this.logger.warn({ container: c.id, index: c.index, reason }, "local provisioner: container lost");
    if (failure) this.consecutiveFailures++;
    else this.consecutiveFailures = 0;
    const threshold = this.options.crashLoopThreshold ?? 3;
    if (this.consecutiveFailures >= threshold) {
      this.events!.problem(
        new ProvisionerError(
          `sandbox servers are crash-looping: ${this.consecutiveFailures} failed to start or died early in a row; latest: ${reason}. ` +
            "Check that 'npm run build' ran and that the sandbox-server flags are valid.",
          "crash-loop",
        ),
      );
    }
    // The first replacement starts at once (a lost container is waited for); repeated early
    // failures back off (1 s, 2 s, 4 s … 15 s), like Nomad's restart policy.
    const delay = this.consecutiveFailures < 2 ? 0 : Math.min(15_000, 250 * 2 ** this.consecutiveFailures);
    this.restartBlockedUntil = performance.now() + delay;
    this.scheduleReconcile(delay);
  }
}

/**
 * Where the default data dirs go. A root server runs slots as other uids, which must reach
 * their workspaces: when TMPDIR is private (say /root/tmp), /var/tmp or /tmp (both 1777 on
 * Debian) are used instead. A non-root server runs its slots as its own uid: tmpdir() is fine.
 */
function reachableTempDir(): string {
  const preferred = tmpdir();
  if (process.getuid?.() !== 0) return preferred;
  return [preferred, "/var/tmp", "/tmp"].find((d) => !blockedForOthers(d)) ?? preferred;
}
