import { fork, type ChildProcess } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import type { Logger } from "pino";
import type { DriverAnswer, DriverRequest } from "./driver-protocol.js";

/**
 * The server's side of its browser driver (driver-main.ts): forks it at the first request,
 * matches answers to requests, and when it ends (a fault, a kill, a request it did not answer
 * in time) fails what was pending with DriverGoneError and reports it once; the next request
 * forks a new one.
 */

export class DriverGoneError extends Error {
  override name = "DriverGoneError";
}

type Pending = { resolve: (a: DriverAnswer) => void; reject: (e: Error) => void; timer: NodeJS.Timeout };
type Request = DriverRequest extends infer R ? (R extends { id: number } ? Omit<R, "id"> : never) : never;

/** The driver's entry next to this module: built JS, or the TypeScript source under tsx. */
function driverEntry(): { path: string; execArgv: string[] } {
  const here = fileURLToPath(import.meta.url);
  if (here.endsWith(".ts")) return { path: here.replace(/driver-client\.ts$/, "driver-main.ts"), execArgv: ["--import", "tsx"] };
  return { path: here.replace(/driver-client\.js$/, "driver-main.js"), execArgv: [] };
}

export class DriverClient {
  private child: ChildProcess | null = null;
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private stderrTail = "";

  constructor(
    /** The driver's temporary dir (Playwright makes a few empty ones per browser): emptied whenever a driver starts. */
    private readonly tmpDir: string,
    private readonly logger: Logger,
    /** Called when a driver ends with `why`: every browser it drove is gone. */
    private readonly onGone: (why: string) => void,
  ) {}

  /** Whether a driver process runs now. */
  get running(): boolean {
    return this.child !== null;
  }

  /** The request's answer; rejects with DriverGoneError when the driver ends first or does not answer within `timeoutMs`. */
  request(req: Request, timeoutMs: number): Promise<DriverAnswer> {
    const child = this.child ?? this.spawn();
    const id = this.nextId++;
    return new Promise<DriverAnswer>((resolve, reject) => {
      const timer = setTimeout(() => {
        // A driver that does not answer is wedged: end it (its browsers go with it).
        this.logger.warn({ op: req.op, timeout_ms: timeoutMs }, "browser driver did not answer in time: killing it");
        child.kill("SIGKILL");
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      child.send({ ...req, id } as DriverRequest, (err) => {
        if (err) this.settle(id, undefined, new DriverGoneError(`the browser driver could not be reached: ${err.message}`));
      });
    });
  }

  private spawn(): ChildProcess {
    const { path, execArgv } = driverEntry();
    // What a driver killed under its browsers left there goes now.
    rmSync(this.tmpDir, { recursive: true, force: true });
    mkdirSync(this.tmpDir, { recursive: true, mode: 0o700 });
    // Nothing of the server's environment (its token) reaches the driver: it needs a PATH and a temp dir.
    const env: NodeJS.ProcessEnv = { PATH: process.env["PATH"] ?? "/usr/bin:/bin", TMPDIR: this.tmpDir };
    const child = fork(path, [], { execArgv, env, stdio: ["ignore", "ignore", "pipe", "ipc"], serialization: "json" });
    this.child = child;
    this.stderrTail = "";
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (d: string) => (this.stderrTail = (this.stderrTail + d).slice(-2000)));
    child.on("message", (answer: DriverAnswer) => this.settle(answer.id, answer));
    child.on("error", () => undefined);
    child.once("exit", (code, signal) => {
      if (this.child === child) this.child = null;
      const why = `the browser driver process ended (code ${code}, signal ${signal})${this.stderrTail.trim() ? `: ${this.stderrTail.trim().split("\n").slice(-3).join(" | ")}` : ""}`;
      for (const id of [...this.pending.keys()]) this.settle(id, undefined, new DriverGoneError(why));
      this.logger.warn({ code, signal }, "browser driver exited");
      this.onGone(why);
    });
    return child;
  }

  private settle(id: number, answer: DriverAnswer | undefined, err?: Error): void {
    const p = this.pending.get(id);
    if (!p) return;
    this.pending.delete(id);
    clearTimeout(p.timer);
    if (answer) p.resolve(answer);
    else p.reject(err ?? new DriverGoneError("no answer"));
  }

  /** Ends the driver (shutdown); resolves once it has exited. */
  async close(): Promise<void> {
    const child = this.child;
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((r) => child.once("exit", () => r()));
    child.kill("SIGKILL");
    await exited;
  }
}
