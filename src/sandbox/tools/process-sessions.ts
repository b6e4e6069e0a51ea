import { spawn, type ChildProcess } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import { HttpError } from "../../http/errors.js";
import { withoutCapabilities } from "../../host/mount-namespace.js";
import type { ProcessEvent, ProcessInfo } from "../../protocol/process-session.js";
import { bwrapArgs, READ_ONLY_ROOT, SANDBOX_PATH } from "../isolation/isolation.js";
import { SHIMS_DIR, userShimArgs } from "../isolation/user-shims.js";
import { networkWrapped, startSlirp } from "../isolation/session-network.js";
import { filterArgs, sendFilter } from "../isolation/seccomp.js";
import { SlotFreezer } from "../isolation/slot-freezer.js";
import { firstChild, killNamespaceInit } from "../run/process-barrier.js";
import type { SlotHost } from "../workspace/slot-host.js";
import type { Slot } from "../core/slot.js";

/**
 * Process sessions: long-lived processes in a slot, outside its call queue (the routes are
 * in `process-routes.ts`, the wire format in `protocol/process-session.ts`).
 *
 * Why not the slot's fast path: its spawner kills everything a call leaves behind when the
 * call ends, and a slot runs one call at a time; an E2B background process must keep
 * running while other commands run, take stdin and signals. So each session is a bubblewrap
 * sandbox of its own, with the slot's isolation (its uid and cgroups, the same read-only
 * system view, the slot's workspace at /workspace, the slot's /tmp where the slot has a
 * bounded disk) and the same hard rlimits, its network namespace loopback-only. A reset
 * of the slot kills every session first (`killSlot`, a barrier like the reset's own).
 */

export interface SessionListener {
  /** An event; returns true when the listener cannot take more output now (backpressure). */
  event(ev: ProcessEvent): boolean;
  /** Called when a listener that was full can take output again. */
  onDrain(resume: () => void): void;
}

/** The fd a session's bubblewrap reads the seccomp program from. */
const SESSION_FILTER_FD = 5;

/** How long a start waits for a reset or fork of its slot to finish. */
const BARRIER_WAIT_MS = 30_000;

/** Most sessions alive at once per slot: each one is a sandbox with its own processes. */
export const MAX_SESSIONS_PER_SLOT = 64;

/**
 * Stdin bytes a session holds for its program before the program reads them (issue 28: a
 * program that never reads made the server buffer without bound). A write past it waits for
 * room (backpressure on the client's request), at most STDIN_WAIT_MS, then is refused (429).
 */
export const MAX_STDIN_PENDING_BYTES = 8 * 1024 * 1024;
export const STDIN_WAIT_MS = 10_000;

/** A write to a session's stdin found no room in time (429, code STDIN_FULL). */
export class StdinFullError extends HttpError {
  override name = "StdinFullError";
  constructor(pid: number, pending: number, why: string) {
    super(
      429,
      `process ${pid} is not reading its stdin: ${pending} bytes already wait for it (the bound is ${MAX_STDIN_PENDING_BYTES} bytes) and ${why}; send more once it reads, or close its stdin`,
      "data",
    );
  }
}

/** One write larger than the whole stdin bound (413, code STDIN_TOO_LARGE). */
export class StdinTooLargeError extends HttpError {
  override name = "StdinTooLargeError";
  constructor(pid: number, bytes: number) {
    super(413, `${bytes} bytes for the stdin of process ${pid} in one write; at most ${MAX_STDIN_PENDING_BYTES} bytes per write: split the data`, "data");
  }
}

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
}

class Session {
  readonly listeners = new Set<SessionListener>();
  ended: ProcessEvent | null = null;
  private readonly exited: Promise<void>;
  private paused = 0;
  private sentSignal: NodeJS.Signals | null = null;
  /** Writes to stdin, in order, once the sandbox may read them (network on: after its "go"). */
  private stdinChain: Promise<void>;
  private stdinOpen: boolean;
  /** Stdin bytes accepted but not yet handed to the pipe (the program has not read them). */
  private stdinPending = 0;
  /** The one write waiting for room, woken whenever bytes reach the pipe. */
  private stdinWaiter: (() => void) | null = null;

  constructor(
    readonly pid: number,
    readonly info: ProcessInfo,
    readonly child: ChildProcess,
    private readonly onEnd: () => void,
    stdinReady: Promise<void>,
    wantsStdin: boolean,
  ) {
    this.stdinChain = stdinReady.catch(() => undefined);
    this.stdinOpen = wantsStdin;
    if (!wantsStdin) void this.stdinChain.then(() => child.stdin?.end());
    this.exited = new Promise((resolve) => child.once("close", () => resolve()));
    for (const [stream, type] of [[child.stdout, "stdout"], [child.stderr, "stderr"]] as const) {
      stream?.on("data", (chunk: Buffer) => this.emit({ type, data: chunk.toString("base64") }));
      stream?.on("error", () => undefined);
    }
    child.stdin?.on("error", () => undefined);
    child.once("error", (err) => this.finish({ type: "end", exit_code: -1, signal: null, error: `could not start the process: ${err.message}` }));
    child.once("close", (code, signal) => {
      // bwrap reports a signal that ended the program as an exit status above 128.
      const sig = signal ?? (this.sentSignal === "SIGKILL" || (code !== null && code > 128 && this.sentSignal) ? this.sentSignal : null);
      this.finish(sig ? { type: "end", exit_code: -1, signal: sig, error: `signal: ${sig === "SIGKILL" ? "killed" : sig}` } : { type: "end", exit_code: code ?? -1, signal: null });
    });
  }

  private emit(ev: ProcessEvent): void {
    for (const l of this.listeners) {
      if (l.event(ev)) {
        // A slow reader makes the process wait (its pipe fills), not the server buffer.
        this.pause();
        l.onDrain(() => this.resume());
      }
    }
  }

  private pause(): void {
    if (this.paused++ === 0) {
      this.child.stdout?.pause();
      this.child.stderr?.pause();
    }
  }

  private resume(): void {
    if (--this.paused === 0) {
      this.child.stdout?.resume();
      this.child.stderr?.resume();
    }
  }

  private finish(ev: ProcessEvent): void {
    if (this.ended) return;
    this.ended = ev;
    this.stdinWaiter?.();
    this.emit(ev);
    this.listeners.clear();
    this.onEnd();
  }

  /** Resolves once `data` is accepted (at most MAX_STDIN_PENDING_BYTES wait for the program); see StdinFullError. */
  async write(data: Buffer): Promise<void> {
    const stdin = this.openStdin();
    if (data.length > MAX_STDIN_PENDING_BYTES) throw new StdinTooLargeError(this.pid, data.length);
    if (this.stdinPending + data.length > MAX_STDIN_PENDING_BYTES) {
      // One waiter at a time: the bytes held by waiting requests stay bounded too.
      if (this.stdinWaiter) throw new StdinFullError(this.pid, this.stdinPending, "another write already waits for room");
      await this.roomFor(data.length);
      this.openStdin();
    }
    this.stdinPending += data.length;
    this.stdinChain = this.stdinChain.then(() => {
      // Called once the bytes are in the pipe, or with an error when the program is gone.
      stdin.write(data, () => {
        this.stdinPending -= data.length;
        this.stdinWaiter?.();
      });
    });
  }

  private openStdin(): NodeJS.WritableStream & { destroyed: boolean } {
    const stdin = this.child.stdin;
    if (!this.stdinOpen || !stdin || stdin.destroyed) throw new HttpError(400, `process ${this.pid} has no open stdin (start it with stdin: true)`, "pid");
    return stdin;
  }

  private roomFor(bytes: number): Promise<void> {
    return new Promise((resolve, reject) => {
      const done = (err?: Error): void => {
        clearTimeout(timer);
        this.stdinWaiter = null;
        if (err) reject(err);
        else resolve();
      };
      const timer = setTimeout(() => done(new StdinFullError(this.pid, this.stdinPending, `it read none of them for ${STDIN_WAIT_MS / 1000} s`)), STDIN_WAIT_MS);
      this.stdinWaiter = () => {
        if (this.stdinPending + bytes <= MAX_STDIN_PENDING_BYTES) done();
        else if (this.ended) done(new HttpError(400, `process ${this.pid} has ended; its stdin is closed`, "pid"));
      };
    });
  }

  closeStdin(): void {
    this.stdinOpen = false;
    this.stdinChain = this.stdinChain.then(() => {
      this.child.stdin?.end();
    });
  }

  /** SIGKILL ends the sandbox's PID namespace (every process of the session); other signals go to each of its processes. */
  async signal(sig: NodeJS.Signals): Promise<void> {
    const bwrap = this.child.pid;
    if (bwrap === undefined || this.ended) return;
    const init = firstChild(bwrap);
    if (sig === "SIGKILL") {
      this.sentSignal = "SIGKILL";
      if (init) await killNamespaceInit(init).catch(() => undefined);
      this.child.kill("SIGKILL");
      await this.exited;
      return;
    }
    if (!init) return;
    this.sentSignal = sig;
    for (const pid of [init.pid, ...descendants(init.pid)]) {
      try {
        process.kill(pid, sig);
      } catch {
        /* exited meanwhile */
      }
    }
  }
}

/** Every descendant of `pid` (children of all its threads, recursively). */
function descendants(pid: number): number[] {
  const out: number[] = [];
  const walk = (p: number) => {
    let tasks: string[];
    try {
      tasks = readdirSync(`/proc/${p}/task`);
    } catch {
      return;
    }
    for (const t of tasks) {
      let kids: string;
      try {
        kids = readFileSync(`/proc/${p}/task/${t}/children`, "utf8");
      } catch {
        continue;
      }
      for (const k of kids.trim().split(" ").filter(Boolean)) {
        out.push(Number(k));
        walk(Number(k));
      }
    }
  };
  walk(pid);
  return out;
}

/** A sandbox started ahead of use, its launcher waiting for the command on fd 4. */
interface Launched {
  child: ChildProcess;
  alias: string | undefined;
  network: boolean;
  spec: NodeJS.WritableStream;
  /** Resolves once stdin belongs to the program (network on: after the namespace's "go"). */
  stdinReady: Promise<void>;
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
  /** Pause/resume of the slot's processes: the trees of its sessions and of the one started ahead. */
  readonly freezer: SlotFreezer;

  constructor(private readonly host: SlotHost) {
    this.freezer = new SlotFreezer(host.cgroups, (i) => [...(this.bySlot.get(i)?.values() ?? []), this.warm.get(i)].flatMap((s) => (s?.child.pid ? [s.child.pid] : [])));
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
  private launch(slot: Slot, alias: string | undefined, network: boolean): Launched {
    const host = this.host;
    const internet = network ? host.internetAccess : undefined;
    const uid = slot.owner?.uid ?? process.getuid?.() ?? 0;
    const gid = slot.owner?.gid ?? process.getgid?.() ?? 0;
    const limits = host.limits;
    const user = alias ? { name: alias.slice("/home/".length), home: alias } : undefined;
    const launcher = [
      `ulimit -H -S -u ${limits.maxProcesses} -f ${Math.max(1, Math.floor(limits.maxFileBytes / 1024))} -t ${limits.cpuSeconds} -c 0`,
      host.addressSpaceBytes > 0 ? ` -v ${Math.floor(host.addressSpaceBytes / 1024)}` : "",
      ` 2>/dev/null; mapfile -d '' -u 4 A; exec 4<&-; cd -- "\${A[0]}" || exit 126; n=\${A[1]}; for ((i = 2; i < n + 2; i++)); do export "\${A[i]}"; done; exec "\${A[@]:2+n}"`,
    ].join("");
    const args = [
      // Network on: the namespace unshare made (bubblewrap must not unshare it again).
      ...bwrapArgs({ workspaceDir: slot.workspaceDir, allowNetwork: internet !== undefined, identity: host.identity(slot, user), writableArgs: host.disks.writableArgs(slot) }),
      // The workspace at /home/NAME: the uid is NAME there, with that home (E2B's `user`).
      ...(user ? ["--setenv", "HOME", user.home, "--setenv", "USER", user.name, "--setenv", "LOGNAME", user.name, "--setenv", "PATH", `${SANDBOX_PATH}:${SHIMS_DIR}`, ...userShimArgs(host.stateDir)] : []),
      // Inside unshare's user namespace (where it is root): back to the slot's uid, the slot's resolver.
      ...(internet ? ["--uid", String(uid), "--gid", String(gid), "--ro-bind", internet.resolvConf, "/etc/resolv.conf"] : []),
      ...(alias ? ["--bind", slot.workspaceDir, alias] : []),
      // The slots' seccomp filter, on fd 5 (3: these arguments, 4: the session's spec).
      ...filterArgs(host.bwrap.filter, SESSION_FILTER_FD),
      ...READ_ONLY_ROOT,
    ];
    const bwrapCmd = [host.bwrap.path!, "--args", "3", "--", "/bin/bash", "--noprofile", "--norc", "-c", launcher];
    const wrapped = internet ? networkWrapped(internet, bwrapCmd) : { file: bwrapCmd[0]!, args: bwrapCmd.slice(1) };
    const start = withoutCapabilities(wrapped.file, wrapped.args);
    const child = spawn(start.file, start.args, {
      stdio: ["pipe", "pipe", "pipe", "pipe", "pipe", "pipe"],
      env: internet ? { PATH: SANDBOX_PATH } : {},
      ...(slot.owner ? { uid: slot.owner.uid, gid: slot.owner.gid } : {}),
    });
    // In the slot's cgroups before bwrap reads its arguments (and forks anything).
    if (child.pid !== undefined) host.cgroups.place(slot.index, child.pid);
    for (const s of child.stdio) (s as { on?: (e: string, f: () => void) => void } | null)?.on?.("error", () => undefined);
    child.on("error", () => undefined);
    (child.stdio[3] as NodeJS.WritableStream).end(Buffer.from(args.map((a) => a + "\0").join(""), "utf8"));
    sendFilter((child.stdio as unknown as NodeJS.WritableStream[])[SESSION_FILTER_FD], host.bwrap.filter);
    let stdinReady = Promise.resolve();
    if (internet && child.pid !== undefined) {
      const pid = child.pid;
      stdinReady = startSlirp(pid, internet, uid, gid, () => child.exitCode === null && child.signalCode === null).then(
        (slirp) => {
          // slirp4netns lives as long as the session's namespace.
          if (child.exitCode !== null || child.signalCode !== null) slirp.kill("SIGKILL");
          else child.once("exit", () => slirp.kill("SIGKILL"));
          child.stdin?.write("go\n");
        },
        (err: unknown) => {
          host.logger.warn({ slot: slot.id, err: err instanceof Error ? err.message : String(err) }, "process session: no network namespace, session killed");
          child.kill("SIGKILL");
          throw err;
        },
      );
      stdinReady.catch(() => undefined);
    }
    return { child, alias, network: internet !== undefined, spec: child.stdio[4] as NodeJS.WritableStream, stdinReady };
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
    return this.start(slot, req);
  }

  private start(slot: Slot, req: SessionStart): Session {
    const host = this.host;
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
    if (!launched || launched.alias !== req.workspaceAlias || launched.network !== network || launched.child.exitCode !== null || launched.child.signalCode !== null) {
      if (launched) void killLaunched(launched);
      launched = this.launch(slot, req.workspaceAlias, network);
    }
    const { child } = launched;
    const envs = Object.entries(req.envs).map(([k, v]) => `${k}=${v}`);
    launched.spec.end(Buffer.from([req.cwd ?? ".", String(envs.length), ...envs, req.cmd, ...req.args].map((a) => a + "\0").join(""), "utf8"));
    const info: ProcessInfo = {
      pid,
      cmd: req.cmd,
      args: req.args,
      envs: req.envs,
      ...(req.cwd ? { cwd: req.cwd } : {}),
      ...(req.tag ? { tag: req.tag } : {}),
    };
    const session = new Session(pid, info, child, () => sessions.delete(pid), launched.stdinReady, req.stdin);
    sessions.set(pid, session);
    this.used.set(slot.index, { alias: req.workspaceAlias, network });
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
  async dropWarm(slot: Slot, hold = false): Promise<void> {
    if (hold && !this.held.has(slot.index)) {
      let settle!: () => void;
      const settled = new Promise<void>((r) => (settle = r));
      this.held.set(slot.index, { settled, settle });
    }
    const w = this.warm.get(slot.index);
    this.warm.delete(slot.index);
    if (w) await killLaunched(w);
  }

  /** Kills every session of the slot and resolves once all have exited (reset, shutdown); a paused slot is thawed first. */
  async killSlot(slot: Slot, options: { hold?: boolean } = {}): Promise<void> {
    await this.freezer.thaw(slot.index);
    await this.dropWarm(slot, options.hold ?? false);
    const m = this.bySlot.get(slot.index);
    if (!m) return;
    await Promise.all([...m.values()].map((s) => s.signal("SIGKILL")));
    m.clear();
  }

  /**
   * Runs `fn` (a fork) with every session of `slots` ended and new starts held. Sessions bind
   * a workspace as it is mounted when they start: the parent's would keep writing into the
   * layer its children share, a child's sandbox started ahead would keep its old empty view.
   * Sandboxes are started ahead again after.
   */
  async whileStopped<T>(slots: readonly Slot[], fn: () => Promise<T>): Promise<T> {
    await Promise.all(slots.map((s) => this.killSlot(s, { hold: true })));
    try {
      return await fn();
    } finally {
      for (const s of slots) this.afterReset(s);
    }
  }

  async close(): Promise<void> {
    this.closed = true;
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

export type { Session as ProcessSession };
