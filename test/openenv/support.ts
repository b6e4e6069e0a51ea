/**
 * A real OpenEnv server for tests: examples/shell-tasks on a local pool (sandbox-server
 * processes, bubblewrap) behind an OpenEnvServer on 127.0.0.1, and a small WebSocket client
 * that sends one message and reads the frame that answers it.
 */
import WebSocket from "ws";
import ShellTasksEnv from "../../examples/shell-tasks/env.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { silentLogger } from "../../src/observability/logger.js";
import type { ServerLimits } from "../../src/openenv/limits.js";
import { OpenEnvServer } from "../../src/openenv/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";

export interface OpenEnvHarness {
  url: string;
  wsUrl: string;
  server: OpenEnvServer;
  backend: ToolBackend;
  provisioner: LocalProvisioner;
  env: ShellTasksEnv;
  /** Free slots of the pool now. */
  free(): number;
  /** SIGKILLs every sandbox server, as crashed containers: the slots on them are lost. */
  killContainers(): void;
  stop(): Promise<void>;
}

export async function startOpenEnv(options: { slots?: number; acquireTimeoutMs?: number; idleTimeoutMs?: number; maxTurns?: number; token?: string; limits?: Partial<ServerLimits>; toolTimeoutS?: number } = {}): Promise<OpenEnvHarness> {
  const log = silentLogger();
  const slots = options.slots ?? 4;
  const provisioner = new LocalProvisioner({ slotsPerContainer: slots });
  const pool = { slotsPerContainer: slots, minContainers: 1, maxContainers: 1, acquireTimeoutMs: options.acquireTimeoutMs ?? 30_000 };
  const backend = await poolBackend(AgentEnvConfigSchema.parse({ pool, executor: { defaultTimeoutS: options.toolTimeoutS ?? 30 } }), provisioner, log);
  const env = new ShellTasksEnv({ ...(options.maxTurns ? { maxTurns: options.maxTurns } : {}), executor: { defaultTimeoutS: options.toolTimeoutS ?? 30 } }, { backend, logger: log });
  await env.start();
  const server = new OpenEnvServer({ env, logger: log, ...(options.idleTimeoutMs ? { idleTimeoutMs: options.idleTimeoutMs } : {}), ...(options.token ? { token: options.token } : {}), ...(options.limits ? { limits: options.limits } : {}) });
  const url = await server.listen(0, "127.0.0.1");
  return {
    url,
    wsUrl: `${url.replace(/^http/, "ws")}/ws`,
    server,
    backend,
    provisioner,
    env,
    free: () => backend.poolStats!().slots.free,
    killContainers: () => {
      for (const p of provisioner.processes()) process.kill(p.pid, "SIGKILL");
    },
    async stop() {
      await server.close();
      await env.close();
      await backend.close();
    },
  };
}

export interface Frame {
  type: string;
  data: Record<string, any>;
}

/** One OpenEnv WebSocket session, as OpenEnv's EnvClient speaks it: one message, one frame back. */
export class WsClient {
  private readonly frames: Frame[] = [];
  private readonly waiting: Array<(f: Frame) => void> = [];
  closed = false;

  private constructor(readonly ws: WebSocket) {
    ws.on("message", (data) => {
      const frame = JSON.parse(data.toString()) as Frame;
      const w = this.waiting.shift();
      if (w) w(frame);
      else this.frames.push(frame);
    });
    ws.on("close", () => (this.closed = true));
  }

  static async connect(url: string): Promise<WsClient> {
    const ws = new WebSocket(url);
    await new Promise<void>((resolve, reject) => {
      ws.once("open", () => resolve());
      ws.once("error", reject);
    });
    return new WsClient(ws);
  }

  next(): Promise<Frame> {
    const f = this.frames.shift();
    if (f) return Promise.resolve(f);
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  send(message: unknown): Promise<Frame> {
    this.ws.send(typeof message === "string" ? message : JSON.stringify(message));
    return this.next();
  }

  reset(data: Record<string, unknown> = {}): Promise<Frame> {
    return this.send({ type: "reset", data });
  }

  call(tool: string, args: Record<string, unknown> = {}): Promise<Frame> {
    return this.send({ type: "step", data: { type: "call_tool", tool_name: tool, arguments: args } });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    const gone = new Promise<void>((resolve) => this.ws.once("close", () => resolve()));
    this.ws.send(JSON.stringify({ type: "close" }));
    await gone;
  }
}

/** A port free now on 127.0.0.1 (for a server a test must name before it starts). */
export async function freePort(): Promise<number> {
  const { createServer } = await import("node:net");
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

/** Resolves once `check` holds, polling; rejects with `what` after `timeoutMs`. */
export async function eventually(check: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > until) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Item 0 of shell-tasks (seed 0): create notes/day-0.txt holding "release 0 approved". */
export const SOLVE_SEED_0 = "mkdir -p notes && echo 'release 0 approved' > notes/day-0.txt";
export const WRONG_SEED_0 = "mkdir -p notes && echo 'release 0 rejected' > notes/day-0.txt";
