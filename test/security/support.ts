import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, readFileSync, readdirSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSandboxProcess, type SandboxProcess } from "../../src/pool/sandbox-process.js";
import type { ExecuteResponse } from "../../src/protocol/sandbox.js";

/**
 * A real `slotpool sandbox-server` (the built CLI) for attack tests, with tight limits so a
 * failed containment stays small, plus host-side probes: process scans, RSS, fds, and the
 * latency another slot sees while an attack runs.
 */

export const ATTACK_TOKEN = "attack-suite-token-7f3a9c";
/** Slot i runs as host uid SLOT_UID_BASE + i when the server is root. */
export const SLOT_UID_BASE = 20_000;
export const isRoot = typeof process.getuid === "function" && process.getuid() === 0;

/** Limits the attack servers run with (flags of `slotpool sandbox-server`). */
export const ATTACK_LIMITS = {
  memoryMb: 256,
  maxProcesses: 128,
  maxFileMb: 50,
  /** Below the memory bound: a slot's tmpfs pages count as its memory (see slot-disk.ts). */
  diskMb: 128,
  timeoutS: 10,
  outputCap: 50_000,
};

export interface HttpAnswer {
  status: number;
  json: any;
  text: string;
}

export interface AttackServer {
  proc: SandboxProcess;
  url: string;
  /** Host directory holding slot_0 … slot_N-1 (never visible to commands). */
  dataDir: string;
  token: string;
  logs: string[];
  request(method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<HttpAnswer>;
  execute(body: Record<string, unknown>): Promise<ExecuteResponse>;
  /** `bash` with require_sandbox set: an unsandboxed server refuses instead of running an attack on the host. */
  bash(slot: number, command: string, opts?: { timeout?: number; allowNetwork?: boolean }): Promise<ExecuteResponse>;
  tool(slot: number, tool: string, args: Record<string, unknown>): Promise<ExecuteResponse>;
  artifact(kind: "read" | "list" | "archive", body: Record<string, unknown>): Promise<HttpAnswer>;
  reset(slot: number): Promise<HttpAnswer>;
  health(): Promise<HttpAnswer>;
  stop(): Promise<void>;
}

export interface StartAttackServerOptions {
  slots?: number;
  extraArgs?: string[];
  env?: NodeJS.ProcessEnv;
  /**
   * Leave the data dir's parent at mkdtemp's 0700 (as `LocalProvisioner` creates it).
   * Default: 0755 so the per-slot uids can reach their workspaces.
   */
  privateParent?: boolean;
}

export async function startAttackServer(opts: StartAttackServerOptions = {}): Promise<AttackServer> {
  const parent = mkdtempSync(join(tmpdir(), "slotpool-sec-"));
  if (!opts.privateParent) chmodSync(parent, 0o755);
  const dataDir = join(parent, "data");
  const logs: string[] = [];
  const proc = await startSandboxProcess({
    slots: opts.slots ?? 3,
    dataDir,
    token: ATTACK_TOKEN,
    extraArgs: [
      "--memory-mb", String(ATTACK_LIMITS.memoryMb),
      "--max-processes", String(ATTACK_LIMITS.maxProcesses),
      "--max-file-mb", String(ATTACK_LIMITS.maxFileMb),
      "--disk-mb", String(ATTACK_LIMITS.diskMb),
      "--timeout", String(ATTACK_LIMITS.timeoutS),
      "--output-cap", String(ATTACK_LIMITS.outputCap),
      ...(opts.extraArgs ?? []),
    ],
    env: { SLOTPOOL_LOG_LEVEL: "debug", ...opts.env },
    onLog: (l) => {
      logs.push(l);
      if (logs.length > 5000) logs.shift();
    },
    startTimeoutMs: 60_000,
  });
  const auth = { authorization: `Bearer ${ATTACK_TOKEN}` };
  const request = async (method: string, path: string, body?: unknown, headers?: Record<string, string>): Promise<HttpAnswer> => {
    const res = await fetch(proc.url + path, {
      method,
      headers: { "content-type": "application/json", ...auth, ...headers },
      ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
      signal: AbortSignal.timeout(120_000),
    });
    const text = await res.text();
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, json, text };
  };
  const execute = async (body: Record<string, unknown>): Promise<ExecuteResponse> => {
    const r = await request("POST", "/execute", body);
    if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.text.slice(0, 500)}`);
    return r.json as ExecuteResponse;
  };
  return {
    proc,
    url: proc.url,
    dataDir,
    token: ATTACK_TOKEN,
    logs,
    request,
    execute,
    bash: (slot, command, o = {}) =>
      execute({
        slot_id: `slot_${slot}`,
        tool: "bash",
        args: { command, require_sandbox: true, allow_network: o.allowNetwork ?? false, ...(o.timeout ? { timeout: o.timeout } : {}) },
      }),
    tool: (slot, tool, args) => execute({ slot_id: `slot_${slot}`, tool, args }),
    artifact: (kind, body) => request("POST", `/artifacts/${kind}`, body),
    reset: (slot) => request("POST", "/reset", { slot_id: `slot_${slot}` }),
    health: () => request("GET", "/health"),
    async stop() {
      await proc.stop(10_000);
      // rm(1), not rmSync: a slot's 4,000-deep tree may still be in the server's trash (deleted in the background).
      spawnSync("rm", ["-rf", parent]);
    },
  };
}

/** Host processes whose command line contains `marker` (the test process itself excluded). */
export function processesWithMarker(marker: string): Array<{ pid: number; cmdline: string }> {
  const found: Array<{ pid: number; cmdline: string }> = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmdline = readFileSync(`/proc/${name}/cmdline`, "utf8").replace(/\0/g, " ").trim();
      if (cmdline.includes(marker)) found.push({ pid: Number(name), cmdline });
    } catch {
      /* exited meanwhile */
    }
  }
  return found;
}

/** Host processes running as `uid` (a slot's uid when the server is root), with their comm. */
export function processesOfUid(uid: number): Array<{ pid: number; comm: string }> {
  const found: Array<{ pid: number; comm: string }> = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (statSync(`/proc/${name}`).uid !== uid) continue;
      found.push({ pid: Number(name), comm: readFileSync(`/proc/${name}/comm`, "utf8").trim() });
    } catch {
      /* exited meanwhile */
    }
  }
  return found;
}

/** What may legitimately stay alive for a slot between calls: its namespace holder(s). */
export const HOLDER_COMMS = new Set(["bwrap", "spawner"]);

/** Waits until `check` returns true (polling), or the bound passes; returns the last value. */
export async function eventually(check: () => boolean, boundMs: number, stepMs = 50): Promise<boolean> {
  const end = Date.now() + boundMs;
  for (;;) {
    if (check()) return true;
    if (Date.now() > end) return false;
    await new Promise((r) => setTimeout(r, stepMs));
  }
}

export function rssKb(pid: number): number {
  const m = /VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : 0;
}

export function fdCount(pid: number): number {
  return readdirSync(`/proc/${pid}/fd`).length;
}

/** Bytes used under a host directory (du -sb equivalent, symlinks not followed). */
export function diskUsage(dir: string): number {
  let total = 0;
  let entries: string[];
  try {
    entries = readdirSync(dir);
  } catch {
    return 0;
  }
  for (const e of entries) {
    const p = join(dir, e);
    try {
      const st = statSync(p, { throwIfNoEntry: false });
      if (!st) continue;
      total += st.isDirectory() ? diskUsage(p) : st.size;
    } catch {
      /* vanished */
    }
  }
  return total;
}

export interface LatencyStats {
  n: number;
  failures: number;
  p50: number;
  p99: number;
  max: number;
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

export function summarize(samples: number[], failures: number): LatencyStats {
  const s = [...samples].sort((a, b) => a - b);
  const r = (x: number) => Math.round(x * 10) / 10;
  return { n: s.length, failures, p50: r(percentile(s, 50)), p99: r(percentile(s, 99)), max: r(s[s.length - 1] ?? NaN) };
}

/**
 * Runs `bash true` on `slot` back to back while `attack` runs (and at least `minSamples`
 * times), and returns the latency the bystander saw. A failed call counts as a failure.
 */
export async function bystanderLatency<T>(server: AttackServer, slot: number, attack: Promise<T>, minSamples = 20): Promise<{ result: T; stats: LatencyStats }> {
  let done = false;
  const settled = attack.finally(() => {
    done = true;
  });
  const samples: number[] = [];
  let failures = 0;
  const probe = (async () => {
    while (!done || samples.length + failures < minSamples) {
      const t0 = performance.now();
      try {
        const r = await server.bash(slot, "true");
        if (r.success) samples.push(performance.now() - t0);
        else failures++;
      } catch {
        failures++;
      }
    }
  })();
  const [result] = await Promise.all([settled, probe]);
  return { result, stats: summarize(samples, failures) };
}

/** Quiet-time baseline: `n` sequential `bash true` calls on `slot`. */
export async function baselineLatency(server: AttackServer, slot: number, n = 40): Promise<LatencyStats> {
  const samples: number[] = [];
  let failures = 0;
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const r = await server.bash(slot, "true").catch(() => null);
    if (r?.success) samples.push(performance.now() - t0);
    else failures++;
  }
  return summarize(samples, failures);
}

/** Wraps a promise with a hard bound so a hang fails the test instead of stalling the suite. */
export async function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms (hang)`)), ms);
  });
  try {
    return await Promise.race([p, bound]);
  } finally {
    clearTimeout(timer);
  }
}

export interface CliServer {
  url: string;
  pid: number;
  child: import("node:child_process").ChildProcess;
  /** Every stderr line (the JSON logs). */
  logs: string[];
  /** stdout and stderr as received, for "the token never appears" checks. */
  output(): string;
  alive(): boolean;
  /** One `bash` call on a slot of a sandbox-server (slot_0 unless `args.slot`). */
  bash(command: string, args?: Record<string, unknown> & { slot?: number }): Promise<{ success: boolean; output: string; metadata: { sandboxed: boolean } & Record<string, unknown> }>;
  stop(graceMs?: number): Promise<void>;
}

/**
 * Starts a built `slotpool <subcommand>` server (tool-server, executor-server, ...) and waits
 * for its `"msg":"listening"` log line with the URL.
 */
export async function startCliServer(argv: string[], opts: { env?: NodeJS.ProcessEnv; startTimeoutMs?: number; /** A command that execs the server (e.g. setpriv dropping a capability). */ prefix?: string[] } = {}): Promise<CliServer> {
  const { spawn } = await import("node:child_process");
  const { slotpoolCommand } = await import("../../src/pool/slotpool-command.js");
  const { command, args } = slotpoolCommand();
  const [file, ...rest] = [...(opts.prefix ?? []), command, ...args, ...argv] as [string, ...string[]];
  const child = spawn(file, rest, { env: { ...process.env, ...opts.env }, stdio: ["ignore", "pipe", "pipe"] });
  const logs: string[] = [];
  let all = "";
  let buffered = "";
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  child.stdout!.setEncoding("utf8");
  child.stdout!.on("data", (s: string) => {
    all += s;
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`slotpool ${argv[0]} did not log "listening" within ${opts.startTimeoutMs ?? 30_000} ms:\n${logs.slice(-10).join("\n")}`));
    }, opts.startTimeoutMs ?? 30_000);
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (s: string) => {
      all += s;
      buffered += s;
      let nl: number;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        logs.push(line);
        if (line.includes('"listening"')) {
          try {
            const j = JSON.parse(line) as { msg?: string; url?: string };
            if (j.msg === "listening" && j.url) {
              clearTimeout(timer);
              resolve(j.url);
            }
          } catch {
            /* not JSON */
          }
        }
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`slotpool ${argv[0]} exited before listening:\n${logs.slice(-10).join("\n")}`));
    });
  });
  return {
    url,
    pid: child.pid!,
    child,
    logs,
    output: () => all,
    alive: () => child.exitCode === null && child.signalCode === null,
    async bash(command, { slot = 0, ...args } = {}) {
      const res = await fetch(`${url}/execute`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: `slot_${slot}`, tool: "bash", args: { command, ...args } }) });
      return (await res.json()) as Awaited<ReturnType<CliServer["bash"]>>;
    },
    async stop(graceMs = 8_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), graceMs);
      await exited;
      clearTimeout(t);
    },
  };
}
