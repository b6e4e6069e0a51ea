import { spawn, type ChildProcess } from "node:child_process";
import { StringDecoder } from "node:string_decoder";
import type { CappedOutput } from "./output.js";
import { withoutCapabilities } from "../../host/mount-namespace.js";

/**
 * Runs one process to completion with a wall-clock timeout and capped output. The caller
 * builds the argv (bubblewrap, namespace join, or plain shell); this module only spawns,
 * streams, times out and kills. The child gets its own process group so a timeout can
 * kill the whole tree; inside a private PID namespace the kernel kills the rest when the
 * namespace's init dies.
 */
/** The fd `RunSpec.input` arrives on in the child. */
export const RUN_INPUT_FD = 3;
/** The first fd of `RunSpec.extraFds` in the child. */
export const RUN_EXTRA_FD = 4;

export interface RunSpec {
  file: string;
  args: string[];
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  uid?: number;
  gid?: number;
  timeoutMs: number;
  output: CappedOutput;
  /** Called with each chunk as it arrives (WebSocket streaming). */
  onChunk?: ((stream: "stdout" | "stderr", chunk: string) => void | Promise<void>) | undefined;
  /** Aborts the run (reset, shutdown): kills the process group. */
  signal?: AbortSignal | undefined;
  /**
   * Bytes the child reads from fd RUN_INPUT_FD (a pipe closed after them): the seccomp
   * program for bubblewrap's `--seccomp`. Without it the child has no such fd.
   */
  input?: Buffer | undefined;
  /** Descriptors of this process the child gets from fd RUN_EXTRA_FD on (a slot's image user namespace). */
  extraFds?: number[] | undefined;
  /** Extra kill step run on timeout/abort (e.g. kill the slot's cgroup). */
  onKill?: (() => void) | undefined;
}

export interface RunResult {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  timedOut: boolean;
  aborted: boolean;
  durationMs: number;
  spawnError?: string;
}

export function runProcess(spec: RunSpec): Promise<RunResult> {
  const started = performance.now();
  return new Promise<RunResult>((resolve) => {
    let child: ChildProcess;
    // A slot's command (bubblewrap, or bash when unsandboxed) never holds the capabilities a
    // non-root server has over its own user namespace.
    const cmd = withoutCapabilities(spec.file, spec.args);
    try {
      child = spawn(cmd.file, cmd.args, {
        cwd: spec.cwd ?? "/",
        env: spec.env ?? {},
        stdio: spec.extraFds?.length ? ["ignore", "pipe", "pipe", spec.input ? "pipe" : "ignore", ...spec.extraFds] : spec.input ? ["ignore", "pipe", "pipe", "pipe"] : ["ignore", "pipe", "pipe"],
        detached: true,
        ...(spec.uid !== undefined ? { uid: spec.uid, gid: spec.gid ?? spec.uid } : {}),
      });
    } catch (err) {
      resolve({ exitCode: null, signal: null, timedOut: false, aborted: false, durationMs: 0, spawnError: String(err) });
      return;
    }
    if (spec.input) {
      const pipe = child.stdio[RUN_INPUT_FD] as NodeJS.WritableStream;
      pipe.on("error", () => undefined);
      pipe.end(spec.input);
    }
    let timedOut = false;
    let aborted = false;
    let spawnError: string | undefined;
    const kill = (): void => {
      if (child.pid !== undefined) {
        try {
          process.kill(-child.pid, "SIGKILL");
        } catch {
          /* already gone */
        }
      }
      try {
        spec.onKill?.();
      } catch {
        /* best effort */
      }
    };
    const timer = setTimeout(() => {
      timedOut = true;
      stopped = true;
      kill();
    }, spec.timeoutMs);
    const onAbort = (): void => {
      aborted = true;
      stopped = true;
      kill();
    };
    if (spec.signal) {
      if (spec.signal.aborted) onAbort();
      else spec.signal.addEventListener("abort", onAbort, { once: true });
    }
    const decoders = { stdout: new StringDecoder("utf8"), stderr: new StringDecoder("utf8") };
    let paused = false;
    /** After a timeout/abort: keep draining (so the kill can land) but stream no more. */
    let stopped = false;
    const resume = (): void => {
      paused = false;
      child.stdout!.resume();
      child.stderr!.resume();
    };
    for (const stream of ["stdout", "stderr"] as const) {
      child[stream]!.on("data", (c: Buffer) => {
        spec.output.push(stream, c);
        if (spec.onChunk && !stopped) {
          const text = decoders[stream].write(c);
          const wait = text ? spec.onChunk(stream, text) : undefined;
          if (wait && !paused) {
            // Slow consumer: stop reading until it catches up (the command blocks on its pipe).
            paused = true;
            child.stdout!.pause();
            child.stderr!.pause();
            void wait.then(resume, resume);
          }
        }
      });
    }
    child.once("error", (err) => {
      spawnError = err.message;
    });
    // 'close' fires after the process exited AND its stdio closed. A background process
    // that keeps the pipes open would hold 'close' forever, so after 'exit' we kill the
    // group (nothing of a non-stateful call may survive it) which closes the pipes.
    child.once("exit", () => {
      if (child.pid !== undefined) {
        try {
          process.kill(-child.pid, "SIGKILL");
        } catch {
          /* none left */
        }
      }
      // A process that left the group (setsid) may still hold the pipes: stop reading.
      setTimeout(() => {
        child.stdout?.destroy();
        child.stderr?.destroy();
      }, 250).unref();
    });
    child.once("close", (code, sig) => {
      clearTimeout(timer);
      spec.signal?.removeEventListener("abort", onAbort);
      spec.output.close();
      resolve({
        exitCode: code,
        signal: sig,
        timedOut,
        aborted,
        durationMs: performance.now() - started,
        ...(spawnError ? { spawnError } : {}),
      });
    });
  });
}
