import { spawn, type ChildProcess } from "node:child_process";
import { HttpError } from "../../http/errors.js";
import { withoutCapabilities } from "../../host/mount-namespace.js";
import type { ProcessInfo } from "../../protocol/process-session.js";
import { bwrapArgs, IMAGE_BASH, IMAGE_TOOLS_MOUNT, READ_ONLY_ROOT, SANDBOX_PATH } from "../isolation/isolation.js";
import { SHIMS_DIR, userShimArgs, userShimBin } from "../isolation/user-shims.js";
import type { InternetAccess } from "../isolation/network.js";
import { IMAGE_TOOLS_BIN } from "../images/image-tools.js";
import { asImageUser } from "./bash.js";
import { SlotNetworks, type NetnsHolder } from "../isolation/slot-netns.js";
import { filterArgs, sendFilter } from "../isolation/seccomp.js";
import { SlotFreezer } from "../isolation/slot-freezer.js";
import { firstChild, killNamespaceInit } from "../run/process-barrier.js";
import type { SlotHost } from "../workspace/slot-host.js";
import type { Slot } from "../core/slot.js";
import { MAX_STDIN_PENDING_BYTES, STDIN_WAIT_MS, StdinFullError, StdinTooLargeError } from "./session-stdin.js";
import { ProcessSession as Session, type SessionListener } from "./process-session.js";
import { PortTunnels } from "./port-tunnels.js";
import type { VolumeMount } from "../../protocol/volumes.js";
import type { VolumeStore } from "../workspace/volume-store.js";

export { MAX_STDIN_PENDING_BYTES, STDIN_WAIT_MS, StdinFullError, StdinTooLargeError };

/**
 * Process sessions: long-lived processes in a slot, outside its call queue (the routes are
 * in `process-routes.ts`, the wire format in `protocol/process-session.ts`).
 *
 * Why not the slot's fast path: its spawner kills everything a call leaves behind when the
 * call ends, and a slot runs one call at a time; an E2B background process must keep
 * running while other commands run, take stdin and signals. So each session is a bubblewrap
 * sandbox of its own, with the slot's isolation (its uid and cgroups, the same read-only
 * system view, the slot's workspace at /workspace, the slot's /tmp where the slot has a
 * bounded disk) and the same hard rlimits. All sessions of a slot share one network
 * namespace (slot-netns.ts: loopback only, or the slot's internet with network on), so a
 * server one of them starts on 127.0.0.1 answers the others. A reset of the slot kills
 * every session first, then that namespace (`killSlot`, a barrier like the reset's own).
 */


/** The fd a session's bubblewrap reads the seccomp program from. */
const SESSION_FILTER_FD = 5;
/** The fd a session's bubblewrap finds the slot's image user namespace at (--userns), when it joins no holder. */
const SESSION_USERNS_FD = 6;

/** How long a start waits for a reset or fork of its slot to finish. */
const BARRIER_WAIT_MS = 30_000;
/** How long after a fork its slots' sandboxes are started ahead again: after its answer (whileStopped). */
const REWARM_AFTER_FORK_MS = 40;

const NO_VOLUMES = { key: "", binds: [] as string[] };

/** Most sessions alive at once per slot: each one is a sandbox with its own processes. */
export const MAX_SESSIONS_PER_SLOT = 64;

export interface SessionStart {
  cmd: string;
  args: string[];
  envs: Record<string, string>;
  cwd?: string | undefined;
  stdin: boolean;
  tag?: string | undefined;
  /** Also mount the workspace here (e.g. /home/user for E2B code); must be under /home. */
  workspaceAlias?: string | undefined;
  /** Internet through the slot's own network namespace (slirp4netns); else loopback only. */
  allowNetwork?: boolean | undefined;
  /** Volumes bound read-write at their paths (workspace/volume-store.ts). */
  volumes?: readonly VolumeMount[] | undefined;
  /**
   * In an image root: the user (name or uid, looked up in the image's /etc/passwd inside the
   * sandbox) the command runs as instead of the image's User, with that user's HOME (E2B's
   * `user`, an image build's RUN). Elsewhere a slot has one uid, and this is ignored.
   */
  user?: string | undefined;
}


/** A sandbox started ahead of use, its launcher waiting for the command on fd 4. */
interface Launched {
  child: ChildProcess;
  alias: string | undefined;
  network: boolean;
  spec: NodeJS.WritableStream;
  /** Resolves once stdin belongs to the program (after the namespace's "go"). */
  stdinReady: Promise<void>;
  /** The slot's shared network namespace it joins (none: a namespace of its own). */
  holder: NetnsHolder | undefined;
  /** The volumes it binds, as a key (`id:path,...`): a session asking for others gets a sandbox of its own. */
  volumes: string;
}

export class ProcessSessions {
  private readonly bySlot = new Map<number, Map<number, Session>>();
  /** Per slot: pids are handed out increasing, never reused while the server runs. */
  private readonly nextPid = new Map<number, number>();
  /** Per slot: one sandbox started ahead of the next command (slots that have run sessions only). */
  private readonly warm = new Map<number, Launched>();
  /** Slots that ran sessions: after a reset they get a warm sandbox again. */
  private readonly used = new Map<number, { alias: string | undefined; network: boolean }>();
  /** Slots whose mounts are changing (reset, fork): nothing is started ahead until afterReset. */
  private readonly held = new Map<number, { settled: Promise<void>; settle: () => void }>();
  private closed = false;
  /** The slots' shared network namespaces (slot-netns.ts). */
  /** Each slot's shared network namespaces and their egress rules (isolation/slot-netns.ts; the host's). */
  readonly networks: SlotNetworks;
  /** Pause/resume of the slot's processes: the trees of its sessions and of the one started ahead. */
  readonly freezer: SlotFreezer;
  /** Connections to ports where the slot's sessions listen (`GET /ports/connect`): they end with the sessions. */
  readonly ports: PortTunnels;

  constructor(
    private readonly host: SlotHost,
    /** The server's volumes, which sessions mount (workspace/volume-store.ts). */
    readonly volumes?: VolumeStore,
  ) {
    this.networks = host.slotNetworks;
    this.freezer = new SlotFreezer(host.cgroups, (i) => this.processRoots(i));
    const networks = this.networks;
    this.ports = new PortTunnels(host, {
      sharedNetns: (slot, network) => networks.existing(slot.index, network),
      sharedNetnsReason: networks.reason,
      isFrozen: (slot) => this.freezer.isFrozen(slot.index),
    });
    const why = this.networks.reason;
    if (why) host.logger.warn({ reason: why }, "process sessions: each gets a network namespace of its own (a server one starts on 127.0.0.1 is not reachable from the others)");
  }

  private sessions(slot: Slot): Map<number, Session> {
    let m = this.bySlot.get(slot.index);
    if (!m) this.bySlot.set(slot.index, (m = new Map()));
    return m;
  }

  /**
   * Starts a session sandbox whose launcher (bash) sets the rlimits, then waits for the
   * command on fd 4: NUL-separated cwd, count of NAME=VALUE pairs, the pairs, argv. Starting
   * the sandbox (namespaces, mounts) is most of a command's start-up cost (≈ 8 ms quiet,
   * 20-50 ms on a loaded 2-core box), so a slot that runs sessions keeps one started ahead.
   */
  private launch(slot: Slot, alias: string | undefined, network: boolean, volumes: { key: string; binds: string[] } = NO_VOLUMES): Launched {
    const host = this.host;
    const internet = network ? host.internetAccess : undefined;
    const image = host.imageRoots.rootFor(slot, SESSION_USERNS_FD);
    if (image) return this.launchInImage(slot, alias, internet, image, volumes);
    const holder = this.networks.holder(slot.index, internet, slot.owner ? { uid: slot.owner.uid, gid: slot.owner.gid } : undefined, (pid) => host.cgroups.place(slot.index, pid));
    const uid = slot.owner?.uid ?? process.getuid?.() ?? 0;
    const gid = slot.owner?.gid ?? process.getgid?.() ?? 0;
    const user = alias ? { name: alias.slice("/home/".length), home: alias } : undefined;
    const launcher = this.launcher("");
    const args = [
      // In the slot's shared namespace (bubblewrap must not unshare it again); without one (no nsenter), loopback only.
      ...bwrapArgs({ workspaceDir: slot.workspaceDir, allowNetwork: holder !== undefined, identity: host.identity(slot, user), writableArgs: host.disks.writableArgs(slot), bootId: host.bootIds.file(slot) }),
      // The workspace at /home/NAME: the uid is NAME there, with that home (E2B's `user`).
      ...(user ? ["--setenv", "HOME", user.home, "--setenv", "USER", user.name, "--setenv", "LOGNAME", user.name, "--setenv", "PATH", `${SANDBOX_PATH}:${SHIMS_DIR}`, ...userShimArgs(host.stateDir)] : []),
      // Inside the holder's user namespace, where it is root: back to the slot's uid, the slot's resolver.
      ...(holder ? ["--uid", String(uid), "--gid", String(gid)] : []),
      ...(holder && internet ? ["--ro-bind", internet.resolvConf, "/etc/resolv.conf"] : []),
      ...(alias ? ["--bind", slot.workspaceDir, alias] : []),
      // Volumes, after the workspace: a volume may be mounted inside /home/<name>.
      ...volumes.binds,
      // The slots' seccomp filter, on fd 5 (3: these arguments, 4: the session's spec).
      ...filterArgs(host.bwrap.filter, SESSION_FILTER_FD),
      ...READ_ONLY_ROOT,
    ];
    const bwrapCmd = [host.bwrap.path!, "--args", "3", "--", "/bin/bash", "--noprofile", "--norc", "-c", launcher];
    return this.spawnSession(slot, args, bwrapCmd, holder, alias, internet !== undefined, undefined, volumes.key);
  }

  /**
   * The session launcher (bash, the static one in an image root): the slot's rlimits, then
   * the command's spec from fd 4 (NUL-separated: cwd, the count of NAME=VALUE pairs, the
   * pairs, argv), and `exec` of the command (`execPrefix`: an image user's switch; an image
   * without /bin/bash gets the static one when the command names /bin/bash, as E2B's do).
   */
  private launcher(execPrefix: string, image = false): string {
    const limits = this.host.limits;
    const noBash = image ? `[ "\${A[3+n]}" = /bin/bash ] && [ ! -x /bin/bash ] && A[3+n]=${IMAGE_BASH}; ` : "";
    return [
      `ulimit -H -S -u ${limits.maxProcesses} -f ${Math.max(1, Math.floor(limits.maxFileBytes / 1024))} -t ${limits.cpuSeconds} -c 0`,
      this.host.addressSpaceBytes > 0 ? ` -v ${Math.floor(this.host.addressSpaceBytes / 1024)}` : "",
      ` 2>/dev/null; mapfile -d '' -u 4 A; exec 4<&-; cd -- "\${A[0]}" || exit 126; n=\${A[2]}; for ((i = 3; i < n + 3; i++)); do export "\${A[i]}"; done; ${noBash}`,
      image ? asUser(execPrefix, this.host.imageRoots.idmapped) : `exec ${execPrefix}"\${A[@]:3+n}"`,
    ].join("");
  }

  /**
   * A session sandbox in a slot whose root is the image: the image's root, environment and
   * user (asImageUser), the static bash as launcher; in the slot's shared network namespace,
   * made inside the slot's own user namespace (slot-netns.ts). A `workspace_alias` (E2B's
   * /home/user) is the session's HOME, USER and LOGNAME (made if the image lacks it), the
   * image's user unchanged: an image need not have such an account.
   */
  private launchInImage(slot: Slot, alias: string | undefined, internet: InternetAccess | undefined, image: NonNullable<ReturnType<SlotHost["imageRoots"]["rootFor"]>>, volumes: { key: string; binds: string[] }): Launched {
    const host = this.host;
    const holder = this.networks.holder(slot.index, internet, slot.owner ? { uid: slot.owner.uid, gid: slot.owner.gid } : undefined, (pid) => host.cgroups.place(slot.index, pid), image.parentFd);
    const root = { ...image.root, userns: holder ? ("joined" as const) : image.root.userns };
    const name = alias?.slice("/home/".length);
    const path = root.env.find((e) => e.startsWith("PATH="))?.slice(5) ?? "";
    const args = [
      ...bwrapArgs({ workspaceDir: slot.workspaceDir, allowNetwork: holder !== undefined, writableArgs: host.disks.writableArgs(slot, true), bootId: host.bootIds.file(slot), image: root }),
      ...(alias ? ["--setenv", "HOME", alias, "--setenv", "USER", name!, "--setenv", "LOGNAME", name!, "--setenv", "PATH", `${path}:${SHIMS_DIR}`, "--ro-bind", userShimBin(host.stateDir), SHIMS_DIR] : []),
      ...(holder && internet ? ["--ro-bind", internet.resolvConf, "/etc/resolv.conf"] : []),
      ...volumes.binds,
      ...filterArgs(host.bwrap.filter, SESSION_FILTER_FD),
    ];
    const execAs = asImageUser(root).map((a) => `${a} `).join("");
    const mkHome = alias ? `[ -d ${alias} ] || { ${IMAGE_TOOLS_BIN}/mkdir -p -- ${alias} && ${IMAGE_TOOLS_BIN}/chown ${root.uid}:${root.gid} ${alias}; } 2>/dev/null; ` : "";
    const bwrapCmd = [host.bwrap.path!, "--args", "3", "--", IMAGE_BASH, "--noprofile", "--norc", "-c", mkHome + this.launcher(execAs, true)];
    return this.spawnSession(slot, args, bwrapCmd, holder, alias, internet !== undefined, holder ? undefined : image.parentFd, volumes.key);
  }

  private spawnSession(slot: Slot, args: string[], bwrapCmd: string[], holder: NetnsHolder | undefined, alias: string | undefined, network: boolean, usernsFd: number | undefined, volumesKey: string): Launched {
    const host = this.host;
    const wrapped = holder ? holder.wrap(bwrapCmd) : { file: bwrapCmd[0]!, args: bwrapCmd.slice(1) };
    const start = withoutCapabilities(wrapped.file, wrapped.args);
    const child = spawn(start.file, start.args, {
      stdio: ["pipe", "pipe", "pipe", "pipe", "pipe", "pipe", ...(usernsFd !== undefined ? [usernsFd] : [])],
      env: holder ? { PATH: SANDBOX_PATH } : {},
      // Not the server's cwd: a shell before bubblewrap would export it (PWD).
      cwd: "/",
      ...(slot.owner ? { uid: slot.owner.uid, gid: slot.owner.gid } : {}),
    });
    // In the slot's cgroups before bwrap reads its arguments (and forks anything).
    if (child.pid !== undefined) host.cgroups.place(slot.index, child.pid);
    for (const s of child.stdio) (s as { on?: (e: string, f: () => void) => void } | null)?.on?.("error", () => undefined);
    child.on("error", () => undefined);
    (child.stdio[3] as NodeJS.WritableStream).end(Buffer.from(args.map((a) => a + "\0").join(""), "utf8"));
    sendFilter((child.stdio as unknown as NodeJS.WritableStream[])[SESSION_FILTER_FD], host.bwrap.filter);
    let stdinReady = Promise.resolve();
    if (holder) {
      // The sandbox joins the namespace once its holder is ready (killed if it fails).
      stdinReady = holder.join(child);
      stdinReady.catch((err: unknown) => host.logger.warn({ slot: slot.id, err: err instanceof Error ? err.message : String(err) }, "process session: the slot's network namespace failed, session killed"));
    }
    return { child, alias, network, spec: child.stdio[4] as NodeJS.WritableStream, stdinReady, holder, volumes: volumesKey };
  }

  /** Keeps one sandbox started ahead for the slot's next command. */
  private prewarm(slot: Slot, alias: string | undefined, network: boolean): void {
    if (this.closed || this.held.has(slot.index) || this.warm.has(slot.index) || !this.host.bwrap.available) return;
    const w = this.launch(slot, alias, network);
    this.warm.set(slot.index, w);
    w.child.once("exit", () => {
      if (this.warm.get(slot.index) === w) this.warm.delete(slot.index);
    });
  }

  /** The pids of the slot's sessions (and the one started ahead): the roots of its process trees. */
  sessionPids(slot: Slot): number[] {
    return this.processRoots(slot.index);
  }

  /** The same by slot index: what a freeze by signals stops. */
  processRoots(index: number): number[] {
    return [...(this.bySlot.get(index)?.values() ?? []), this.warm.get(index)].flatMap((s) => (s?.child.pid ? [s.child.pid] : []));
  }

  /** Whether the slot has run process sessions (an E2B slot: its bash namespace is not used, no need to warm it). */
  runsSessions(slot: Slot): boolean {
    return this.used.has(slot.index);
  }

  /** After a reset (every process of the slot dead, the workspace empty): a fresh sandbox ahead, if the slot runs sessions. */
  afterReset(slot: Slot): void {
    this.settle(slot);
    const last = this.used.get(slot.index);
    if (last) this.prewarm(slot, last.alias, last.network);
  }

  /** The slot's mounts are settled again (reset or fork done, or failed): starts go ahead. */
  settle(slot: Slot): void {
    this.held.get(slot.index)?.settle();
    this.held.delete(slot.index);
  }

  /**
   * Starts a session once the slot is not between a reset's or fork's kill and its end: a
   * session started there would outlive the reset, or bind the view a fork hands to its
   * children. Waits up to `BARRIER_WAIT_MS`, then 409.
   */
  async startWhenSettled(slot: Slot, req: SessionStart): Promise<Session> {
    const h = this.held.get(slot.index);
    if (h) {
      let timer: NodeJS.Timeout | undefined;
      const timedOut = await Promise.race([h.settled.then(() => false), new Promise<boolean>((r) => (timer = setTimeout(() => r(true), BARRIER_WAIT_MS)))]);
      clearTimeout(timer);
      if (timedOut) throw new HttpError(409, `${slot.id} is being reset or forked; try again`);
      return this.startWhenSettled(slot, req);
    }
    const volumes = await this.volumeBinds(slot, req.volumes ?? []);
    return this.start(slot, req, volumes);
  }

  /** The bubblewrap binds of a session's volumes (their views are made here, before the start). */
  private async volumeBinds(slot: Slot, mounts: readonly VolumeMount[]): Promise<{ key: string; binds: string[] }> {
    if (mounts.length === 0) return NO_VOLUMES;
    const store = this.volumes;
    if (!store) throw new HttpError(503, "this sandbox server keeps no volumes", "volumes");
    const paths = new Set(mounts.map((m) => m.path.replace(/\/+$/, "")));
    if (paths.size !== mounts.length) throw new HttpError(400, "two volumes are mounted at the same path", "volumes");
    return { key: mounts.map((m) => `${m.volume_id}:${m.path}`).join(","), binds: await store.sessionBinds(slot, mounts) };
  }

  private start(slot: Slot, req: SessionStart, volumes: { key: string; binds: string[] } = NO_VOLUMES): Session {
    const host = this.host;
    // Reached after waiting out a reset while the server closed: nothing may start past close().
    if (this.closed) throw new HttpError(503, "sandbox server is shutting down: the process was not started");
    if (!host.bwrap.available || !host.bwrap.path) throw new HttpError(503, `process sessions need bubblewrap, which is unavailable here: ${host.bwrap.reason ?? "unknown reason"}`);
    if (req.workspaceAlias !== undefined && !/^\/home\/[A-Za-z0-9._-]+$/.test(req.workspaceAlias)) throw new HttpError(400, "workspace_alias must be /home/<name>", "workspace_alias");
    if (this.freezer.isFrozen(slot.index)) throw new HttpError(409, `${slot.id} is paused: resume it (POST /processes/thaw) before starting a process`);
    const sessions = this.sessions(slot);
    if (sessions.size >= MAX_SESSIONS_PER_SLOT) throw new HttpError(429, `${slot.id} already runs ${MAX_SESSIONS_PER_SLOT} processes; wait for one to end or kill one`);
    const pid = this.nextPid.get(slot.index) ?? 1000;
    this.nextPid.set(slot.index, pid + 1);
    const network = req.allowNetwork === true && host.effectiveNetwork(true);
    let launched = this.warm.get(slot.index);
    this.warm.delete(slot.index);
    const stale = (l: Launched): boolean =>
      l.alias !== req.workspaceAlias || l.network !== network || l.volumes !== volumes.key || l.child.exitCode !== null || l.child.signalCode !== null || (l.holder !== undefined && !l.holder.alive);
    if (!launched || stale(launched)) {
      if (launched) void killLaunched(launched);
      launched = this.launch(slot, req.workspaceAlias, network, volumes);
    }
    const { child } = launched;
    const envs = Object.entries(req.envs).map(([k, v]) => `${k}=${v}`);
    // Default: the workspace, or in an image root the image's WorkingDir.
    const cwd = req.cwd ?? host.imageRoots.rootFor(slot, 0)?.root.workingDir ?? ".";
    launched.spec.end(Buffer.from([cwd, req.user ?? "", String(envs.length), ...envs, req.cmd, ...req.args].map((a) => a + "\0").join(""), "utf8"));
    const info: ProcessInfo = {
      pid,
      cmd: req.cmd,
      args: req.args,
      envs: req.envs,
      ...(req.cwd ? { cwd: req.cwd } : {}),
      ...(req.tag ? { tag: req.tag } : {}),
    };
    const session = new Session(pid, info, child, () => sessions.delete(pid), launched.stdinReady, req.stdin, slot.abortSignal);
    sessions.set(pid, session);
    this.used.set(slot.index, { alias: req.workspaceAlias, network });
    // Something ran in the slot since its reset or fork: a fork into it must drop its contents.
    slot.pristine = false;
    // The next command's sandbox starts now, after this one's spawn.
    setImmediate(() => this.prewarm(slot, req.workspaceAlias, network));
    return session;
  }

  get(slot: Slot, pid: number): Session {
    const s = this.bySlot.get(slot.index)?.get(pid);
    if (!s) throw new HttpError(404, `no running process ${pid} in ${slot.id}`, "pid");
    return s;
  }

  list(slot: Slot): ProcessInfo[] {
    return [...(this.bySlot.get(slot.index)?.values() ?? [])].map((s) => s.info);
  }

  /** Kills the slot's sandbox started ahead (its mounts are about to change: fork). */
  async dropWarm(slot: Slot, hold = false, wait = true): Promise<void> {
    if (hold && !this.held.has(slot.index)) {
      let settle!: () => void;
      const settled = new Promise<void>((r) => (settle = r));
      this.held.set(slot.index, { settled, settle });
    }
    const w = this.warm.get(slot.index);
    this.warm.delete(slot.index);
    if (!w) return;
    const killed = killLaunched(w);
    if (wait) await killed;
    else killed.catch(() => undefined);
  }

  /**
   * Kills every session of the slot and resolves once all have exited (reset, shutdown); a
   * paused slot is thawed first. `waitWarm: false`: the sandbox started ahead is killed but
   * its exit not waited for (it never got a command: nothing of it runs).
   */
  async killSlot(slot: Slot, options: { hold?: boolean; waitWarm?: boolean } = {}): Promise<void> {
    await this.freezer.thaw(slot.index);
    await this.dropWarm(slot, options.hold ?? false, options.waitWarm ?? true);
    const m = this.bySlot.get(slot.index);
    if (m) {
      await Promise.all([...m.values()].map((s) => s.signal("SIGKILL")));
      m.clear();
    }
    this.ports.killSlot(slot);
    await this.networks.stop(slot.index);
    // Its volumes' views go with its sessions (no process of the slot uses them now).
    await this.volumes?.releaseSlot(slot);
  }

  /** Every session of the slot ended, then a new boot id for it (POST /processes/kill-all: E2B's filesystem-only pause and cold boot). */
  async endAll(slot: Slot): Promise<void> {
    await this.killSlot(slot);
    this.host.bootIds.renew(slot);
  }

  /**
   * Runs `fn` (a fork) with every session of the parent and the children ended and new
   * starts held. Sessions bind a workspace as it is mounted when they start: the parent's
   * would keep writing into the layer its children share, a child's sandbox started ahead
   * would keep its old empty view. Every session's exit is waited for, and the parent's
   * sandbox started ahead's; a child's started-ahead sandbox is only killed (it never got a
   * command, so nothing in it can write, and its view is the one the fork replaces: its
   * namespace's teardown need not hold the fork). Sandboxes are started ahead again after.
   */
  async whileStopped<T>(parent: Slot, children: readonly Slot[], fn: () => Promise<T>): Promise<T> {
    const slots = [parent, ...children];
    await Promise.all(slots.map((s) => this.killSlot(s, { hold: true, waitWarm: s === parent })));
    try {
      return await fn();
    } finally {
      // Starts go ahead at once; sandboxes started ahead only after the answer (rewarmSoon).
      for (const s of slots) {
        this.settle(s);
        this.rewarmSoon(s);
      }
    }
  }

  /**
   * afterReset's sandbox started ahead, a moment after a fork's answer: each spawn stands this
   * event loop still for milliseconds, and a tree search forks again at once (that fork would
   * kill it unused). Skipped if the slot is held again by then, or has one (a command came first).
   */
  private rewarmSoon(slot: Slot): void {
    const last = this.used.get(slot.index);
    if (!last || this.closed) return;
    setTimeout(() => this.prewarm(slot, last.alias, last.network), REWARM_AFTER_FORK_MS).unref();
  }

  /** Whether the slot has a sandbox started ahead (tests: a fork's re-warm is off its answer's path). */
  hasWarm(slot: Slot): boolean {
    return this.warm.has(slot.index);
  }

  async close(): Promise<void> {
    this.closed = true;
    this.ports.close();
    await Promise.all(this.host.slots.map((s) => this.killSlot(s)));
  }
}

/** Kills a sandbox started ahead (its launcher never ran a command) and waits for it. */
async function killLaunched(w: Launched): Promise<void> {
  if (w.child.exitCode !== null || w.child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => w.child.once("exit", () => resolve()));
  const init = w.child.pid !== undefined ? firstChild(w.child.pid) : null;
  if (init) await killNamespaceInit(init).catch(() => undefined);
  w.child.kill("SIGKILL");
  await exited;
}

export type { Session as ProcessSession, SessionListener };

/**
 * The end of an image session's launcher: `exec` of the command as the image's User
 * (`defaultPrefix`), or as the user the spec names (A[1]): its uid, gid and home from the
 * image's /etc/passwd, read inside the sandbox with the image tools' awk (a uid the file lacks
 * is taken as uid:uid); an unknown name fails the command (exit 126, saying so). Without an
 * id-mapped image root (a non-root server: one uid) the user is looked up the same way, so an
 * unknown name fails alike, and the command runs with its HOME, USER and LOGNAME as the slot's uid.
 */
function asUser(defaultPrefix: string, canSwitch: boolean): string {
  const awk = `${IMAGE_TOOLS_BIN}/busybox awk`;
  return [
    `u=\${A[1]}; if [ -z "$u" ]; then exec ${defaultPrefix}"\${A[@]:3+n}"; fi; `,
    `e=$(${awk} -F: -v u="$u" '$1==u||$3==u{print $3":"$4":"$6; f=1; exit} END{if(!f) exit 1}' /etc/passwd 2>/dev/null) || `,
    `{ case $u in (*[!0-9]*|"") printf 'unable to find user %s: no matching entries in passwd file\\n' "$u" >&2; exit 126;; esac; e="$u:$u:/"; }; `,
    `ids=\${e%:*}; export HOME=\${e##*:} USER=$u LOGNAME=$u; `,
    canSwitch
      ? `if [ "$ids" = 0:0 ]; then exec "\${A[@]:3+n}"; else exec ${IMAGE_TOOLS_MOUNT}/spawner --exec-as "$ids" -- "\${A[@]:3+n}"; fi`
      : `exec ${defaultPrefix}"\${A[@]:3+n}"`,
  ].join("");
}
