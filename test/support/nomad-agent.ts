/**
 * A real Nomad agent for the real-engine tests (test/engines/): `nomad agent -dev` bound to
 * 127.0.0.1 with a data dir and free ports of its own, configured with the repo's
 * nomad/dev.hcl (so that file is tested against the agent too). The agent is exec'd
 * directly, so its pid is the agent's and SIGINT stops it (a dev agent then destroys its
 * allocations: their processes and containers go with it).
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { delimiter, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { NomadClient } from "../../src/nomad/client.js";
import { HOST_MODE_DATA_DIR } from "../../src/nomad/job.js";

export const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The `nomad` binary on PATH, or undefined. */
export function nomadBinary(): string | undefined {
  for (const dir of (process.env["PATH"] ?? "").split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, "nomad");
    try {
      execFileSync(candidate, ["version"], { stdio: "ignore", timeout: 10_000 });
      return candidate;
    } catch {
      /* not here, or not runnable */
    }
  }
  return undefined;
}

/** Why the real-agent tests cannot run here, or undefined when they can. */
export function nomadSkipReason(): string | undefined {
  if (process.env["SLOTPOOL_SKIP_REAL_ENGINES"]) return "SLOTPOOL_SKIP_REAL_ENGINES is set";
  const bin = nomadBinary();
  if (!bin) return "no `nomad` binary on PATH (put one there; docs/nomad.md says how CI gets its own)";
  // A Nomad client needs root for its drivers' isolation and to run tasks as other users.
  if (process.getuid?.() !== 0) return `not root (uid ${process.getuid?.()}): a Nomad client agent needs root`;
  return undefined;
}

/** Version line of the nomad binary, e.g. "Nomad v1.1.2 (e978d...)". */
export function nomadVersion(): string {
  const bin = nomadBinary();
  return bin ? execFileSync(bin, ["version"], { encoding: "utf8" }).split("\n")[0]!.trim() : "none";
}

/** Why the docker-driver tests cannot run here (no engine, no image), or undefined. */
export function dockerSkipReason(): string | undefined {
  const nomad = nomadSkipReason();
  if (nomad) return nomad;
  const image = process.env["SLOTPOOL_SANDBOX_IMAGE"];
  if (!image) return "SLOTPOOL_SANDBOX_IMAGE is not set (CI builds the image with scripts/build-sandbox-image.sh and sets it)";
  try {
    execFileSync("docker", ["info", "--format", "{{.ServerVersion}}"], { stdio: "ignore", timeout: 20_000 });
  } catch {
    return "no Docker engine answers `docker info` (CI starts one with .ci/docker-engine.sh)";
  }
  try {
    execFileSync("docker", ["image", "inspect", image], { stdio: "ignore", timeout: 20_000 });
  } catch {
    return `the image SLOTPOOL_SANDBOX_IMAGE=${image} is not in the Docker engine (build it with scripts/build-sandbox-image.sh ${image})`;
  }
  return undefined;
}

async function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => (typeof address === "object" && address ? resolvePort(address.port) : reject(new Error("no port"))));
    });
  });
}

export interface NomadAgent {
  /** http://127.0.0.1:PORT */
  address: string;
  /** Environment for a `slotpool` child process that talks to this agent. */
  env: NodeJS.ProcessEnv;
  client: NomadClient;
  pid: number;
  dataDir: string;
  /** The agent's log so far (last `lines` lines). */
  logTail(lines?: number): string;
  /** Deregisters (purges) every job, stops the agent (SIGINT, then SIGKILL after 40 s) and removes its dirs. */
  stop(): Promise<void>;
}

/**
 * Starts `nomad agent -dev -bind 127.0.0.1 -config nomad/dev.hcl -config <ports, data dir>`
 * and waits until its node is ready and has the raw_exec driver (and docker, when asked).
 */
export async function startNomadAgent(options: { docker?: boolean; readyTimeoutMs?: number } = {}): Promise<NomadAgent> {
  const bin = nomadBinary();
  if (!bin) throw new Error("no nomad binary on PATH");
  const root = mkdtempSync(join(tmpdir(), "slotpool-nomad-agent-"));
  const dataDir = join(root, "data");
  const [http, rpc, serf] = [await freePort(), await freePort(), await freePort()];
  const portsFile = join(root, "ports.hcl");
  writeFileSync(portsFile, `data_dir = "${dataDir}"\nports {\n  http = ${http}\n  rpc  = ${rpc}\n  serf = ${serf}\n}\n`);
  const logFile = join(root, "agent.log");
  const log = openSync(logFile, "a");
  const child: ChildProcess = spawn(bin, ["agent", "-dev", "-bind", "127.0.0.1", "-config", join(repoRoot, "nomad", "dev.hcl"), "-config", portsFile], {
    stdio: ["ignore", log, log],
  });
  closeSync(log);
  let exited: number | null | undefined;
  const exit = new Promise<void>((done) => child.once("exit", (code) => ((exited = code), done())));
  const address = `http://127.0.0.1:${http}`;
  const client = new NomadClient({ address, retry: { attempts: 1 } });
  const logTail = (lines = 40) => {
    try {
      return readFileSync(logFile, "utf8").split("\n").slice(-lines).join("\n");
    } catch {
      return "(no log)";
    }
  };
  // Every allocation this agent ran (purged ones drop out of its state): for the clean-up in stop().
  const allocIds = new Set<string>();
  const allocWatch = setInterval(() => {
    void fetch(`${address}/v1/allocations?namespace=*`)
      .then((r) => (r.ok ? (r.json() as Promise<Array<{ ID: string }>>) : []))
      .then((allocs) => allocs.forEach((a) => allocIds.add(a.ID)))
      .catch(() => undefined);
  }, 500);
  allocWatch.unref();
  const stop = async () => {
    try {
      if (exited === undefined) {
        const jobs = await client.listJobs().catch(() => []);
        for (const j of jobs) await client.deregisterJob(j.ID, { purge: true }).catch(() => undefined);
      }
    } finally {
      await client.close().catch(() => undefined);
      if (exited === undefined) {
        child.kill("SIGINT");
        const killer = setTimeout(() => child.kill("SIGKILL"), 40_000);
        await exit;
        clearTimeout(killer);
      }
      // raw_exec without an image keeps workspaces outside Nomad's data dir (HOST_MODE_DATA_DIR):
      // remove those of this agent's allocations too (their servers are gone with the agent).
      clearInterval(allocWatch);
      for (const alloc of allocIds) rmSync(HOST_MODE_DATA_DIR.replace("${NOMAD_ALLOC_ID}", alloc), { recursive: true, force: true });
      rmSync(root, { recursive: true, force: true });
    }
  };

  const deadline = Date.now() + (options.readyTimeoutMs ?? 60_000);
  const wanted = ["raw_exec", ...(options.docker ? ["docker"] : [])];
  let last = "";
  for (;;) {
    if (exited !== undefined) {
      const tail = logTail();
      rmSync(root, { recursive: true, force: true });
      throw new Error(`nomad agent exited (code ${exited}) before it was ready:\n${tail}`);
    }
    try {
      const res = await fetch(`${address}/v1/nodes`);
      if (res.ok) {
        const nodes = (await res.json()) as Array<{ ID: string; Status: string; Drivers?: Record<string, { Healthy: boolean; Detected: boolean }> }>;
        const node = nodes[0];
        last = JSON.stringify(nodes.map((n) => ({ status: n.Status, drivers: Object.fromEntries(Object.entries(n.Drivers ?? {}).map(([k, d]) => [k, d.Healthy])) })));
        if (node?.Status === "ready" && wanted.every((d) => node.Drivers?.[d]?.Healthy)) break;
      }
    } catch (err) {
      last = String(err);
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`nomad agent at ${address} not ready with drivers ${wanted.join(", ")} within ${options.readyTimeoutMs ?? 60_000} ms; last: ${last}\n${logTail()}`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
  return {
    address,
    env: { ...process.env, NOMAD_ADDR: address, NOMAD_TOKEN: "", NOMAD_NAMESPACE: "" },
    client,
    pid: child.pid!,
    dataDir,
    logTail,
    stop,
  };
}
