import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { setPriority } from "node:os";
import { StringDecoder } from "node:string_decoder";
import { SANDBOX_PATH, type ImageRoot } from "./isolation.js";
import { holderArgs, type SlotNamespaceOptions } from "./holder-args.js";
import { withoutCapabilities } from "../../host/mount-namespace.js";
import { sendFilter, type SlotFilter } from "./seccomp.js";
import { NET_READY_LINE, NET_SETUP, spawnSlirp4netns, type InternetAccess } from "./network.js";
import { firstChild, killNamespaceInit, type ProcessRef } from "../run/process-barrier.js";
import type { CappedOutput } from "../run/output.js";
import type { RunResult } from "../run/runner.js";
import { StartGate } from "./start-gate.js";

/** Namespace start-ups at once in this server (start-gate.ts); the start-up timeout runs from each one's own turn. */
const START_GATE = new StartGate(4);

/**
 * Fast path for `bash`: one long-lived bubblewrap namespace per slot (per network setting),
 * joined by every call, instead of a new bubblewrap per call.
 *
 * Why this design (measured on the 2-core CI box, see docs/sandbox-server.md):
 *  - a new `bwrap --unshare-all` per call costs ≈ 6 ms (mount namespace + pivot_root + binds);
 *  - `nsenter` into a per-slot holder costs ≈ 2.4 ms (exec of nsenter, then exec of the shell);
 *  - here a tiny C process (`native/spawner.c`) lives INSIDE the slot's namespaces and forks
 *    `bash -c` on request: the per-call cost is one fork + exec of bash (≈ the floor of
 *    running bash at all) plus a pipe round trip. It has no capabilities, runs as the slot's
 *    uid, and after each command kills every other process of the namespace (kill(-1)), so
 *    nothing started by a call survives it.
 *  - the slot's processes share one PID namespace (`ps` shows the slot's own processes only);
 *    /tmp is the holder's private tmpfs: it persists between the slot's calls and is gone
 *    after reset (the holder is torn down at reset and recreated at next use).
 *  - network: a holder either has its own empty net namespace (allow_network: false) or
 *    the host's; a slot gets one of each on demand. Calls to one slot are serialized, so at
 *    most one holder of a slot runs a command at a time.
 * When the C helper cannot be built (no C compiler), the server falls back to one bubblewrap
 * per call (`bash.ts`), with the same isolation, only slower.
 */

export { USERNS_FD, type SlotNamespaceOptions } from "./holder-args.js";


export interface SlotNamespaceRunOptions {
  command: string;
  cpuSeconds: number;
  maxProcesses: number;
  maxFileBytes: number;
  addressSpaceBytes: number;
  /** Output bytes forwarded before the spawner caps them itself (0: forward everything). */
  outputCap: number;
  /** Workspace-relative name of the full-output file the spawner writes past the cap. */
  outputFileName: string;
  /** Stateful holder: what the command leaves running stays (a kill stops only its own group). */
  keep?: boolean;
  timeoutMs: number;
  output: CappedOutput;
  onChunk?: ((stream: "stdout" | "stderr", chunk: string) => void | Promise<void>) | undefined;
  signal?: AbortSignal | undefined;
}

interface Pending {
  options: SlotNamespaceRunOptions;
  resolve: (r: RunResult) => void;
  started: number;
  timedOut: boolean;
  aborted: boolean;
  timer: NodeJS.Timeout;
  onAbort: () => void;
  out: StringDecoder;
  err: StringDecoder;
  tails: { o: Buffer[]; e: Buffer[] };
}

/** One long-lived bubblewrap namespace with the spawner inside. */
export class SlotNamespace {
  private child: ChildProcess | null = null;
  private pending: Pending | null = null;
  private ready: Promise<void> | null = null;
  private readyResolve: (() => void) | null = null;
  private readyReject: ((e: Error) => void) | null = null;
  private dead = false;
  private stderrTail = "";
  /** Network on: the holder's namespaces exist (its shell said so on stderr). */
  private netNamespaceUp = false;
  private netNamespaceSeen: (() => void) | undefined;
  private niced = false;
  /** Init of the namespace's PID namespace (bwrap's child), known once the spawner said hello. */
  private nsInit: ProcessRef | null = null;

  constructor(private readonly options: SlotNamespaceOptions) {}

  get alive(): boolean {
    // Waiting for its turn to start counts: a second namespace for the slot would only queue too.
    return !this.dead && (this.child !== null || this.ready !== null);
  }

  get pid(): number | undefined {
    return this.child?.pid;
  }

  start(): Promise<void> {
    this.ready ??= START_GATE.run(() => (this.dead ? Promise.reject(new Error("slot sandbox was stopped before it started")) : this.launch()));
    return this.ready;
  }

  private launch(): Promise<void> {
    const o = this.options;
    const internet = o.allowNetwork && !o.image ? o.internet : undefined;
    const uid = o.uid ?? process.getuid?.() ?? 0;
    const gid = o.gid ?? o.uid ?? process.getgid?.() ?? 0;
    const { args, spawnerArgs } = holderArgs(o, internet, uid, gid);
    // Arguments travel through fd 3 (`--args 3`) so the sandbox's /proc/1/cmdline does
    // not show host paths. Network on: unshare makes the namespaces, the shell waits for
    // slirp4netns ("go" on stdin), sets the routes, then becomes bubblewrap.
    // --as-pid-1: the spawner is the namespace's init (no bwrap reaper beside it, which ran as
    // the slot's uid and could be ptraced from the slot: issue 38, docs/security-model.md).
    const bwrapCmd = [o.bwrapPath, "--args", "3", "--as-pid-1", "--", ...spawnerArgs];
    // (Network on, bubblewrap runs as root of unshare's new user namespace, where the
    // capabilities it holds are that namespace's own: only the first exec drops ours.)
    // An image root with network on joins the slot's network namespace (made inside its own user namespace, slot-netns.ts).
    const { file, args: argv } = o.netns
      ? withoutCapabilities(...splitCmd(o.netns.wrap(bwrapCmd)))
      : withoutCapabilities(
          internet ? internet.unshare : o.bwrapPath,
          internet ? ["--user", "--map-root-user", "--net", "--", "/bin/sh", "-c", NET_SETUP, "slotpool-net", internet.routes.join("\n"), internet.dnsFilter, ...bwrapCmd] : bwrapCmd.slice(1),
        );
    const child = spawn(file, argv, {
      stdio: ["pipe", "pipe", "pipe", "pipe", "pipe", ...(o.image?.parentFd !== undefined && !o.netns ? [o.image.parentFd] : [])],
      env: internet || o.netns ? { PATH: SANDBOX_PATH } : {},
      // Not the server's cwd: the network-on shell would export it (PWD) into the slot's /proc/1/environ.
      cwd: "/",
      detached: true,
      ...(o.uid !== undefined ? { uid: o.uid, gid: o.gid ?? o.uid } : {}),
    });
    this.child = child;
    // Joins the slot's network namespace once its holder is up ("go" on stdin, before any request).
    if (o.netns) o.netns.join(child).catch((err: unknown) => this.readyReject?.(err instanceof Error ? err : new Error(String(err))));
    // bwrap blocks reading its arguments until we write them: placing it in the slot's
    // cgroups now, before the write, means everything it forks starts inside them.
    if (child.pid !== undefined) o.onSpawn?.(child.pid);
    // Before the argument write too: every process bwrap starts inherits the priority.
    if (o.background && child.pid !== undefined && process.getuid?.() === 0) {
      try {
        setPriority(child.pid, 10);
        this.niced = true;
      } catch {
        /* keep the default priority */
      }
    }
    const argPipe = child.stdio[3] as NodeJS.WritableStream;
    argPipe.end(Buffer.from(args.map((a) => a + "\0").join(""), "utf8"));
    sendFilter(child.stdio[4] as NodeJS.WritableStream, o.filter);
    const ready = new Promise<void>((res, rej) => {
      this.readyResolve = res;
      this.readyReject = rej;
    });
    child.stdout!.on("data", (chunk: Buffer) => this.onData(chunk));
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (s: string) => {
      let tail = this.stderrTail + s;
      // Network on: the holder's shell says when unshare has made its namespaces.
      if (!this.netNamespaceUp && tail.includes(NET_READY_LINE)) {
        tail = tail.replace(NET_READY_LINE, "");
        this.netNamespaceUp = true;
        this.netNamespaceSeen?.();
      }
      this.stderrTail = tail.slice(-2000);
    });
    // Every stdio end is a socket: a holder SIGKILLed with data in flight (reset's barrier)
    // makes a read fail with ECONNRESET. That death is handled on exit; an unhandled stream
    // error would take the whole server down instead.
    for (const stream of child.stdio) stream?.on("error", () => undefined);
    child.once("error", (err) => this.onExit(`could not start bubblewrap: ${err.message}`));
    child.once("exit", (code, signal) => this.onExit(`slot sandbox process exited (code ${code}, signal ${signal})${this.stderrTail ? `: ${this.stderrTail.trim()}` : ""}`));
    const timer = setTimeout(() => {
      this.readyReject?.(new Error(`slot sandbox did not start within 10 s${this.stderrTail ? `: ${this.stderrTail.trim()}` : ""}`));
      this.kill();
    }, 10_000);
    if (internet && child.pid !== undefined) {
      this.startNetwork(child.pid, internet, uid, gid).then(
        () => child.stdin!.write("go\n"),
        (err: unknown) => {
          this.readyReject?.(err instanceof Error ? err : new Error(String(err)));
          this.kill();
        },
      );
    }
    return ready.finally(() => clearTimeout(timer));
  }

  private slirp: ChildProcess | null = null;

  /** slirp4netns for the holder's network namespace, as the slot's uid; resolves when it is up. */
  private async startNetwork(pid: number, net: InternetAccess, uid: number, gid: number): Promise<void> {
    // Until unshare has run, /proc/<pid>/ns/* are the host's: the holder's shell says when it
    // runs. (Reading /proc/<pid>/ns of the slot uid's process needs CAP_SYS_PTRACE, which a
    // root server in a container lacks.)
    if (!this.netNamespaceUp) {
      await new Promise<void>((resolve, reject) => {
        const fail = (why: string): void => reject(new Error(`the slot's network namespace ${why}${this.stderrTail ? `: ${this.stderrTail.trim()}` : ""}`));
        const timer = setTimeout(() => fail("did not appear within 5 s"), 5_000);
        this.netNamespaceSeen = () => (clearTimeout(timer), resolve());
        this.child?.once("exit", () => (clearTimeout(timer), fail("holder exited before it appeared")));
      });
    }
    const { child: slirp, ready } = spawnSlirp4netns(net, pid, uid, gid);
    this.slirp = slirp;
    // The namespace may have died while slirp4netns started (`kill -9 -1` at once): not one more.
    if (this.dead) this.killSlirp();
    await ready;
  }

  /**
   * Back to normal priority (a background start-up that a call now needs): each process of
   * the namespace, parents before their children, so a child forked meanwhile inherits the
   * new priority from its already boosted parent or is listed when its parent's children are.
   */
  boost(): void {
    if (!this.niced || this.child?.pid === undefined) return;
    this.niced = false;
    const visit = (pid: number, depth: number): void => {
      try {
        setPriority(pid, 0);
      } catch {
        /* exited */
      }
      if (depth > 8) return;
      let kids: number[] = [];
      try {
        kids = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").split(" ").filter(Boolean).map(Number);
      } catch {
        /* exited */
      }
      for (const k of kids) visit(k, depth + 1);
    };
    visit(this.child.pid, 0);
  }

  /** Runs one command; one at a time (the slot's queue guarantees it). */
  async run(opts: SlotNamespaceRunOptions): Promise<RunResult> {
    await this.start();
    if (this.dead || !this.child) return { exitCode: null, signal: null, timedOut: false, aborted: false, durationMs: 0, spawnError: "slot sandbox process is gone" };
    if (this.pending) throw new Error("holder is busy (calls to one slot must be serialized)");
    const cmd = Buffer.from(opts.command, "utf8");
    const name = Buffer.from(opts.outputFileName, "utf8");
    // Streaming calls (onChunk) get every byte; others are capped inside the sandbox.
    const stream = opts.onChunk || opts.outputCap <= 0 ? 1 : 0;
    const flags = stream | (opts.keep ? 2 : 0);
    const header = `R ${opts.cpuSeconds} ${opts.maxProcesses} ${opts.maxFileBytes} ${opts.addressSpaceBytes} ${flags} ${cmd.length} ${Math.max(0, opts.outputCap)} ${name.length}\n`;
    return new Promise<RunResult>((resolve) => {
      const p: Pending = {
        options: opts,
        resolve,
        started: performance.now(),
        timedOut: false,
        aborted: false,
        timer: setTimeout(() => {
          p.timedOut = true;
          this.killCommand();
        }, opts.timeoutMs),
        onAbort: () => {
          p.aborted = true;
          this.killCommand();
        },
        out: new StringDecoder("utf8"),
        err: new StringDecoder("utf8"),
        tails: { o: [], e: [] },
      };
      this.pending = p;
      if (opts.signal) {
        if (opts.signal.aborted) p.onAbort();
        else opts.signal.addEventListener("abort", p.onAbort, { once: true });
      }
      this.child!.stdin!.write(Buffer.concat([Buffer.from(header, "latin1"), cmd, name]));
    });
  }

  private paused = false;

  private resumeOutput(): void {
    if (!this.paused) return;
    this.paused = false;
    this.child?.stdout?.resume();
  }

  private killCommand(): void {
    // Read again (a paused reader would keep the spawner blocked on its output, deaf to K).
    this.resumeOutput();
    if (this.child && !this.dead) this.child.stdin!.write("K\n");
  }

  /**
   * Streaming frame parser: output frames are handed to the output collector piece by
   * piece as they arrive (no reassembly, no copies beyond the collector's own).
   */
  private hdr = Buffer.alloc(5);
  private hdrLen = 0;
  private frameType = "";
  private frameLeft = 0;
  private small: Buffer[] = [];

  private onData(chunk: Buffer): void {
    let off = 0;
    while (off < chunk.length) {
      if (this.frameLeft === 0 && this.frameType === "") {
        const n = Math.min(5 - this.hdrLen, chunk.length - off);
        chunk.copy(this.hdr, this.hdrLen, off, off + n);
        this.hdrLen += n;
        off += n;
        if (this.hdrLen < 5) return;
        this.hdrLen = 0;
        this.frameType = String.fromCharCode(this.hdr[0]!);
        this.frameLeft = this.hdr.readUInt32BE(1);
        if (this.frameLeft === 0) this.endFrame();
        continue;
      }
      const n = Math.min(this.frameLeft, chunk.length - off);
      const piece = chunk.subarray(off, off + n);
      off += n;
      this.frameLeft -= n;
      if (this.frameType === "O" || this.frameType === "E") this.onOutput(this.frameType === "O" ? "stdout" : "stderr", piece);
      else this.small.push(Buffer.from(piece));
      if (this.frameLeft === 0) this.endFrame();
    }
  }

  private onOutput(stream: "stdout" | "stderr", piece: Buffer): void {
    const p = this.pending;
    if (!p) return;
    p.options.output.push(stream, piece);
    if (p.options.onChunk && !p.timedOut && !p.aborted) {
      const text = (stream === "stdout" ? p.out : p.err).write(piece);
      const wait = text ? p.options.onChunk(stream, text) : undefined;
      if (wait && !this.paused) {
        // Slow consumer (WebSocket): stop reading frames until it catches up. The spawner
        // then blocks writing them and the command blocks on its stdout: nothing piles up.
        this.paused = true;
        this.child?.stdout?.pause();
        void wait.then(() => this.resumeOutput(), () => this.resumeOutput());
      }
    }
  }

  private endFrame(): void {
    const type = this.frameType;
    const payload = Buffer.concat(this.small);
    this.small = [];
    this.frameType = "";
    this.frameLeft = 0;
    if (type === "H") {
      // The spawner runs, so bwrap's namespace init exists: remember it for the barrier in stop().
      if (this.child?.pid !== undefined) this.nsInit = firstChild(this.child.pid);
      this.readyResolve?.();
      return;
    }
    const p = this.pending;
    if (!p) return;
    if (type === "o" || type === "e") {
      p.tails[type].push(payload);
      return;
    }
    if (type === "Z") {
      const [total, od, ed, file] = payload.toString("latin1").split(" ").map(Number);
      p.options.output.applyRemote({
        total: total ?? 0,
        stdoutTail: Buffer.concat(p.tails.o),
        stderrTail: Buffer.concat(p.tails.e),
        stdoutDropped: od === 1,
        stderrDropped: ed === 1,
        fileState: file ?? 0,
      });
      return;
    }
    if (type !== "X" && type !== "F") return;
    const s = payload.toString("utf8");
    if (p.options.onChunk) {
      for (const [stream, dec] of [["stdout", p.out], ["stderr", p.err]] as const) {
        const rest = dec.end();
        if (rest) p.options.onChunk(stream, rest);
      }
    }
    let exitCode: number | null = null;
    let signal: NodeJS.Signals | null = null;
    let spawnError: string | undefined;
    if (type === "F") spawnError = s;
    else if (s.startsWith("s")) {
      const n = Number(s.slice(1));
      exitCode = 128 + n;
      signal = signalName(n);
    } else exitCode = Number(s);
    this.finish(p, { exitCode, signal, ...(spawnError ? { spawnError } : {}) });
  }

  private finish(p: Pending, r: { exitCode: number | null; signal: NodeJS.Signals | null; spawnError?: string }): void {
    clearTimeout(p.timer);
    this.resumeOutput();
    p.options.signal?.removeEventListener("abort", p.onAbort);
    p.options.output.close();
    this.pending = null;
    p.resolve({ ...r, timedOut: p.timedOut, aborted: p.aborted, durationMs: performance.now() - p.started });
  }

  private onExit(reason: string): void {
    // slirp4netns lives only for this namespace: whatever ended it (reset, `kill -9 -1`, a crash).
    this.killSlirp();
    if (this.dead) return;
    this.dead = true;
    this.readyReject?.(new Error(reason));
    const p = this.pending;
    if (p) {
      // Killed on timeout/abort, or the command killed its own slot's spawner.
      this.finish(p, { exitCode: null, signal: "SIGKILL", ...(p.timedOut || p.aborted ? {} : { spawnError: reason }) });
    }
  }

  /** Kills the namespace and everything in it (bwrap --die-with-parent chain). */
  kill(): void {
    this.killSlirp();
    if (!this.child) this.dead = true; // still waiting for its turn: it never starts
    if (!this.child || this.child.pid === undefined) return;
    try {
      process.kill(-this.child.pid, "SIGKILL");
    } catch {
      try {
        this.child.kill("SIGKILL");
      } catch {
        /* gone */
      }
    }
  }

  /**
   * Resolves once every process of the namespace has exited (the reset barrier): bwrap's
   * exit alone is not enough, its namespace init dies a moment later and the kernel kills
   * the rest of the namespace only then, so the init is killed too and waited for.
   * slirp4netns (network on) is SIGKILLed but its exit is not waited for: it runs outside
   * the slot's namespaces, never runs the slot's code, and after SIGKILL it runs no code of
   * its own either; what remains is the kernel closing its tap device, which takes 15–30 ms
   * (measured) and would otherwise double the reset's latency.
   */
  async stop(): Promise<void> {
    if (!this.child) this.dead = true;
    const child = this.child;
    const init = this.nsInit ?? (child?.pid !== undefined ? firstChild(child.pid) : null);
    // bwrap and the namespace's init are killed together and waited for together.
    const exited = child && child.exitCode === null && child.signalCode === null ? new Promise<void>((r) => child.once("exit", () => r())) : undefined;
    if (exited) this.kill();
    await Promise.all([exited, init ? killNamespaceInit(init) : undefined]);
    this.killSlirp();
  }

  private killSlirp(): void {
    const slirp = this.slirp;
    if (!slirp || slirp.pid === undefined || slirp.exitCode !== null || slirp.signalCode !== null) return;
    try {
      slirp.kill("SIGKILL");
    } catch {
      /* gone */
    }
  }
}

function splitCmd(c: { file: string; args: string[] }): [string, string[]] {
  return [c.file, c.args];
}

const SIGNAL_NAMES: Record<number, NodeJS.Signals> = { 1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 6: "SIGABRT", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 24: "SIGXCPU", 25: "SIGXFSZ" };
function signalName(n: number): NodeJS.Signals | null {
  return SIGNAL_NAMES[n] ?? null;
}
