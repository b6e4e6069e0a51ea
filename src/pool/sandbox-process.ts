import { spawn, type ChildProcess } from "node:child_process";
import { slotpoolCommand } from "./slotpool-command.js";
import { findSetpriv, mountNamespacePlan, OWN_MOUNT_NAMESPACE_ENV } from "../host/mount-namespace.js";
import { SlotpoolError } from "../protocol/errors.js";

/**
 * Starts `slotpool sandbox-server` as a child process and waits until it listens. Used by
 * the local provisioner and by the Nomad API emulator in tests (each "allocation" is one).
 *
 * Contract with the server: once it listens it writes a JSON log line (stderr) holding
 * `"msg":"listening"` and `"url":"http://host:port"`.
 */
export interface SandboxProcessOptions {
  slots: number;
  dataDir: string;
  host?: string;
  /** 0 (default) lets the server pick a free port. */
  port?: number;
  token?: string;
  extraArgs?: string[];
  env?: NodeJS.ProcessEnv;
  /** How long to wait for the listening line (ms). */
  startTimeoutMs?: number;
  /** Receives every stderr line (the server's JSON logs). */
  onLog?: (line: string) => void;
  /**
   * The server gets SIGTERM when this process dies, even by SIGKILL (Linux parent-death
   * signal, set with util-linux `setpriv`; skipped where it is missing). For servers that
   * must not outlive their owner, like the local provisioner's.
   */
  dieWithParent?: boolean;
  /**
   * The built `main.js` to run instead of this tree's (benchmarks compare another build,
   * e.g. test/bench/bash-true-ab.ts against a checkout from before a change).
   */
  mainScript?: string;
}

export interface SandboxProcess {
  url: string;
  port: number;
  pid: number;
  child: ChildProcess;
  /** Resolves with the exit code (or signal) when the process exits. */
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves once the process has exited. */
  stop(graceMs?: number): Promise<void>;
}

export class SandboxStartError extends SlotpoolError {
  override name = "SandboxStartError";
}

export async function startSandboxProcess(options: SandboxProcessOptions): Promise<SandboxProcess> {
  const { command, args } = options.mainScript ? { command: process.execPath, args: [options.mainScript] } : slotpoolCommand();
  const argv = [
    ...args,
    "sandbox-server",
    "--host", options.host ?? "127.0.0.1",
    "--port", String(options.port ?? 0),
    "--slots", String(options.slots),
    "--data-dir", options.dataDir,
    ...(options.extraArgs ?? []),
  ];
  // The token travels in the environment, not argv, so it never shows in `ps`.
  const env: NodeJS.ProcessEnv = { ...process.env, ...options.env };
  if (options.token) env["SANDBOX_TOKEN"] = options.token;
  else delete env["SANDBOX_TOKEN"];
  const setpriv = options.dieWithParent ? findSetpriv() : undefined;
  // The server mounts (slot disks, template views) in namespaces of its own (root: a mount
  // namespace; not root: a user namespace holding one): they vanish with it, even when it is
  // killed (`unshare` execs: the pid is the server's). The marker tells the CLI not to
  // re-execute itself into one more. Where unshare is refused (root without CAP_SYS_ADMIN,
  // e.g. a default Docker container; unprivileged user namespaces off) the server starts
  // without it: it cannot mount either, bounds /tmp only and says so in /health.
  const plan = mountNamespacePlan(env);
  const prefix = plan.run === "reexec" ? plan.prefix : [];
  if (prefix.length > 0) env[OWN_MOUNT_NAMESPACE_ENV] = "1";
  const [file, ...rest] = [
    ...(setpriv ? [setpriv, "--pdeathsig", "SIGTERM", "--"] : []),
    ...prefix,
    command,
    ...argv,
  ] as [string, ...string[]];
  // Its own process group: a terminal's Ctrl-C goes to the CLI, which releases its slots and
  // then stops its servers; reaching the servers too, it cut those releases short.
  const child = spawn(file, rest, { env, stdio: ["ignore", "ignore", "pipe"], detached: true });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once("exit", (code, signal) => resolve({ code, signal }));
  });

  const tail: string[] = [];
  let buffered = "";
  let onListening: ((url: string) => void) | undefined;
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (chunk: string) => {
    buffered += chunk;
    let nl: number;
    while ((nl = buffered.indexOf("\n")) >= 0) {
      const line = buffered.slice(0, nl);
      buffered = buffered.slice(nl + 1);
      options.onLog?.(line);
      tail.push(line);
      if (tail.length > 20) tail.shift();
      if (onListening && line.includes('"listening"')) {
        try {
          const parsed = JSON.parse(line) as { msg?: string; url?: string };
          if (parsed.msg === "listening" && parsed.url) onListening(parsed.url);
        } catch {
          // not a JSON log line; keep waiting
        }
      }
    }
  });

  const timeoutMs = options.startTimeoutMs ?? 15_000;
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new SandboxStartError(`sandbox server did not start listening within ${timeoutMs} ms; last output:\n${tail.join("\n")}`));
    }, timeoutMs);
    onListening = (u) => {
      clearTimeout(timer);
      resolve(u);
    };
    void exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new SandboxStartError(`sandbox server exited before listening (code ${code}, signal ${signal}); last output:\n${tail.join("\n")}`));
    });
  });
  onListening = undefined;

  const port = Number(new URL(url).port);
  return {
    url,
    port,
    pid: child.pid!,
    child,
    exited,
    async stop(graceMs = 5_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}
