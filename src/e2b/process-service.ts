import { Code, ConnectError, createContextKey, type HandlerContext, type ServiceImpl } from "@connectrpc/connect";
import type { IncomingMessage } from "node:http";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ProcessEvent } from "../protocol/process-session.js";
import { Process, Signal, type ProcessSelector, type ConnectResponseSchema, type StartResponseSchema } from "./gen/process/process_pb.js";
import { sandboxForRpc, toConnectError } from "./envd-auth.js";
import { commandCwd, E2B_HOME } from "./paths.js";
import type { SandboxRegistry, E2bSandbox } from "./sandboxes.js";
import type { ProcessStream } from "./slot-processes.js";

type EventResponse = MessageInitShape<typeof StartResponseSchema> & MessageInitShape<typeof ConnectResponseSchema>;

/** How often a quiet stream gets a keepalive event, unless the client's `Keepalive-Ping-Interval` says otherwise. */
const DEFAULT_KEEPALIVE_S = 50;
/** A client that goes away this close to its deadline has timed out (clocks and timers differ a little). */
const DEADLINE_SLACK_MS = 250;

/**
 * envd's `process.Process` Connect service over slot process sessions. Every command runs
 * in the sandbox's slot with the workspace at /home/user (its home and default working
 * directory) and /workspace. A started command's stream ends when it ends; when its
 * deadline (the SDK's `timeoutMs`) passes first, the command is killed, as in E2B. A client
 * that disconnects leaves the command running (a background command, `disconnect()`).
 */
export function processService(registry: SandboxRegistry): ServiceImpl<typeof Process> {
  /** `<sandbox>/<pid>` of the processes started with a PTY: their output is PTY data. */
  const ptys = new Set<string>();
  const call = async <T>(fn: () => Promise<T>): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      throw toConnectError(err);
    }
  };
  return {
    async *start(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const cfg = req.process;
      if (!cfg?.cmd) throw new ConnectError("process.cmd is required", Code.InvalidArgument);
      const pty = req.pty ? ptyCommand(cfg.cmd, cfg.args, req.pty.size?.cols || 80, req.pty.size?.rows || 24) : undefined;
      const stream = await call(() =>
        s.processes.start(
          {
            cmd: pty?.cmd ?? cfg.cmd,
            args: pty?.args ?? cfg.args,
            envs: { HOME: E2B_HOME, ...(pty ? { TERM: "xterm-256color" } : {}), ...s.envs, ...cfg.envs },
            cwd: commandCwd(cfg.cwd, s.workdir),
            // envd's default for old clients: stdin open unless asked otherwise (a PTY's input is stdin).
            stdin: pty ? true : (req.stdin ?? true),
            ...(req.tag ? { tag: req.tag } : {}),
            workspace_alias: E2B_HOME,
            allow_network: s.allowNetwork,
          },
          ctx.signal,
        ),
      );
      const key = `${s.id}/${stream.pid}`;
      if (pty) ptys.add(key);
      try {
        yield* relay(s, stream, ctx, true, pty !== undefined);
      } finally {
        if (pty) setTimeout(() => ptys.delete(key), 60_000).unref();
      }
    },

    async *connect(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const pid = await call(() => pidOf(s, req.process));
      const stream = await call(() => s.processes.connect(pid, ctx.signal));
      yield* relay(s, stream, ctx, false, ptys.has(`${s.id}/${pid}`));
    },

    async list(_req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const processes = await call(() => s.processes.list());
      return {
        // The server's own helpers (file operations, watches) are not the client's commands:
        // known by the pids this server started them under (a client may use any tag).
        processes: processes.filter((p) => !s.processes.isHelper(p.pid)).map((p) => ({
          pid: p.pid,
          ...(p.tag ? { tag: p.tag } : {}),
          // A secret's value (Sandbox.create's envs through ${e2b.secrets.…}) is never listed.
          config: { cmd: p.cmd, args: p.args, envs: withoutSecrets(p.envs, s), ...(p.cwd ? { cwd: p.cwd } : {}) },
        })),
      };
    },

    async sendInput(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const pid = await call(() => pidOf(s, req.process));
      // A PTY's input is its stdin (the terminal's master side reads it).
      if (req.input?.input.case === "stdin" || req.input?.input.case === "pty") {
        const data = req.input.input.value;
        await call(() => s.processes.input(pid, data));
      }
      return {};
    },

    async streamInput(reqs, ctx) {
      const s = sandboxForRpc(registry, ctx);
      let pid: number | undefined;
      for await (const r of reqs) {
        const ev = r.event;
        if (ev.case === "start") {
          const sel = ev.value.process;
          pid = await call(() => pidOf(s, sel));
        } else if (ev.case === "data") {
          if (pid === undefined) throw new ConnectError("streamInput: the first message must name the process", Code.InvalidArgument);
          const input = ev.value.input?.input;
          if (input?.case === "stdin" || input?.case === "pty") {
            const target = pid;
            await call(() => s.processes.input(target, input.value));
          }
        }
      }
      return {};
    },

    async sendSignal(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const pid = await call(() => pidOf(s, req.process));
      if (req.signal !== Signal.SIGKILL && req.signal !== Signal.SIGTERM) throw new ConnectError("signal must be SIGTERM or SIGKILL", Code.InvalidArgument);
      await call(() => s.processes.signal(pid, req.signal === Signal.SIGKILL ? "SIGKILL" : "SIGTERM"));
      return {};
    },

    async closeStdin(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const pid = await call(() => pidOf(s, req.process));
      await call(() => s.processes.closeStdin(pid));
      return {};
    },

    async update() {
      throw new ConnectError("PTY resize is not supported by slotpool: a PTY keeps the size it was created with", Code.Unimplemented);
    },
  };
}

/** The pid a selector names (by pid, or by tag among the running processes). */
async function pidOf(s: E2bSandbox, selector: ProcessSelector | undefined): Promise<number> {
  const sel = selector?.selector;
  if (sel?.case === "pid") {
    // The server's own helpers are not the client's to signal, feed or attach to.
    if (s.processes.isHelper(sel.value)) throw new ConnectError(`no process with pid ${sel.value} in this sandbox`, Code.NotFound);
    return sel.value;
  }
  if (sel?.case === "tag") {
    const tag = sel.value;
    const found = (await s.processes.list()).find((p) => p.tag === tag && !s.processes.isHelper(p.pid));
    if (!found) throw new ConnectError(`no running process tagged '${tag}'`, Code.NotFound);
    return found.pid;
  }
  throw new ConnectError("process selector (pid or tag) is required", Code.InvalidArgument);
}

/**
 * The HTTP request a Connect call came in on (set by the server's adapter): a command stream
 * whose sandbox is killed under it drops its connection, as E2B's does when the VM goes.
 */
export const RAW_REQUEST = createContextKey<IncomingMessage | undefined>(undefined, { description: "the call's HTTP request" });

/** Process events → envd's, with keepalives on a quiet stream; kills a started command whose deadline passed. */
async function* relay(s: E2bSandbox, stream: ProcessStream, ctx: HandlerContext, killOnDeadline: boolean, pty: boolean): AsyncGenerator<EventResponse> {
  const keepaliveS = Number(ctx.requestHeader.get("keepalive-ping-interval")) || DEFAULT_KEEPALIVE_S;
  const timeoutMs = ctx.timeoutMs();
  const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  const onAbort = () => {
    stream.close();
    const reason: unknown = ctx.signal.reason;
    // The SDK aborts its own request at the same deadline, so the server may see either its
    // deadline or the client going away first: both mean the command's time is up.
    const timedOut = (reason instanceof ConnectError && reason.code === Code.DeadlineExceeded) || (deadline !== undefined && Date.now() >= deadline - DEADLINE_SLACK_MS);
    if (killOnDeadline && timedOut) void s.processes.signal(stream.pid, "SIGKILL").catch(() => undefined);
  };
  ctx.signal.addEventListener("abort", onAbort, { once: true });
  const it = stream.events[Symbol.asyncIterator]();
  try {
    yield { event: { event: { case: "start", value: { pid: stream.pid } } } };
    let next = it.next();
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      const tick = new Promise<"tick">((r) => (timer = setTimeout(() => r("tick"), keepaliveS * 1000)));
      const got = await Promise.race([next, tick]);
      clearTimeout(timer);
      if (got === "tick") {
        yield { event: { event: { case: "keepalive", value: {} } } };
        continue;
      }
      if (got.done) break;
      next = it.next();
      const ev = toEnvd(got.value, pty);
      yield ev;
      if (got.value.type === "end") return;
    }
    // The stream broke off without an end: the client was cancelled, or the sandbox went
    // away (killed, timed out, its slot lost). Then the connection is dropped, as E2B's is
    // when the VM goes: the SDKs then probe /health (502, "was not found") and raise their
    // TimeoutError "the sandbox was killed or reached its end of life" (an `unavailable`
    // end would read as a timeout in the JS SDK, with no probe).
    if (!ctx.signal.aborted) {
      if (s.processes.closed) ctx.values.get(RAW_REQUEST)?.socket.destroy();
      throw new ConnectError(`the process stream of pid ${stream.pid} ended early (the sandbox's slot went away?)`, Code.Unavailable);
    }
  } finally {
    ctx.signal.removeEventListener("abort", onAbort);
    stream.close();
  }
}

/**
 * A PTY: `script` (util-linux, in every Debian) runs the command on a new pseudo-terminal of
 * the session's own /dev/pts and relays it on its stdin/stdout; the size is set once.
 */
function ptyCommand(cmd: string, args: string[], cols: number, rows: number): { cmd: string; args: string[] } {
  const q = (a: string) => `'${a.replace(/'/g, `'\\''`)}'`;
  const inner = `stty cols ${Math.floor(cols)} rows ${Math.floor(rows)} 2>/dev/null; exec ${[cmd, ...args].map(q).join(" ")}`;
  return { cmd: "/usr/bin/script", args: ["-qfec", inner, "/dev/null"] };
}

function toEnvd(ev: ProcessEvent, pty = false): EventResponse {
  switch (ev.type) {
    case "start":
      return { event: { event: { case: "start", value: { pid: ev.pid } } } };
    case "stdout":
    case "stderr":
      return { event: { event: { case: "data", value: { output: { case: pty ? "pty" : ev.type, value: Buffer.from(ev.data, "base64") } } } } };
    case "end": {
      const status = ev.signal ? `signal: ${ev.signal === "SIGKILL" ? "killed" : ev.signal}` : `exit status ${ev.exit_code}`;
      const error = ev.error ?? (ev.exit_code !== 0 ? status : undefined);
      return { event: { event: { case: "end", value: { exitCode: ev.exit_code, exited: ev.signal === null, status, ...(error ? { error } : {}) } } } };
    }
  }
}

/** A process's environment as listed: the sandbox's secret-valued variables left out. */
function withoutSecrets(envs: Record<string, string>, s: E2bSandbox): Record<string, string> {
  if (s.secretEnvKeys.length === 0) return envs;
  return Object.fromEntries(Object.entries(envs).filter(([k, v]) => !(s.secretEnvKeys.includes(k) && s.envs[k] === v)));
}
