import type { ChildProcess } from "node:child_process";
import { HttpError } from "../../http/errors.js";
import type { ProcessEvent, ProcessInfo } from "../../protocol/process-session.js";
import { descendants, firstChild, killNamespaceInit, stopProcess } from "../run/process-barrier.js";
import { cutOffCause, cutOffMessage } from "../core/cut-off.js";
import { MAX_STDIN_PENDING_BYTES, STDIN_WAIT_MS, StdinFullError, StdinTooLargeError } from "./session-stdin.js";

/**
 * One process session: a sandboxed process of a slot started by process-sessions.ts, its
 * output as events to its listeners (with backpressure), its stdin (bounded) and signals.
 */

export interface SessionListener {
  /** An event; returns true when the listener cannot take more output now (backpressure). */
  event(ev: ProcessEvent): boolean;
  /** Called when a listener that was full can take output again. */
  onDrain(resume: () => void): void;
}

export class ProcessSession {
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
    /** The slot's abort signal when the session started: fired, it says a reset or shutdown ended the process (cut-off.ts). */
    private readonly slotSignal?: AbortSignal,
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
    child.once("error", (err) => this.finish({ type: "end", exit_code: -1, signal: null, error: `could not start the process: ${err.message}`, infra: "sandbox_start" }));
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
    // Killed by a reset from outside or the server's shutdown: the infrastructure's doing, marked so (protocol/infra.ts).
    const cut = this.slotSignal ? cutOffCause(this.slotSignal) : undefined;
    if (cut && ev.type === "end" && !ev.infra) ev = { ...ev, error: cutOffMessage("the process", cut), infra: cut };
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
    if (sig === "SIGKILL") {
      this.sentSignal = "SIGKILL";
      // Stopped first: a kill right after the start may find bubblewrap (or the gate that
      // becomes it) just about to clone the namespace's init; looked for before that and
      // bubblewrap killed after, the init would miss its parent-death signal and the command
      // live on, holding the session's pipes (and its end) until it ended by itself.
      await stopProcess(bwrap);
      const init = firstChild(bwrap);
      if (init) await killNamespaceInit(init).catch(() => undefined);
      this.child.kill("SIGKILL");
      await this.exited;
      return;
    }
    const init = firstChild(bwrap);
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

