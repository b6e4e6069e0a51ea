/**
 * A real multi-node Nomad cluster for the engine tests: scripts/nomad-cluster.sh (one server,
 * three clients, each client in a network namespace of its own on a private bridge, raw_exec),
 * on a prefix and a /24 of this test process's own so that two test runs on one machine do
 * not collide. Faults act on one client node: its sandbox servers interrupted (SIGINT), the
 * whole node killed -9, drained, or silently cut off (its veth taken down).
 */
import { execFile, execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { nomadSkipReason, repoRoot } from "./nomad-agent.js";

const run = promisify(execFile);
const SCRIPT = join(repoRoot, "scripts", "nomad-cluster.sh");

/** Why the cluster tests cannot run here, or undefined. */
export function clusterSkipReason(): string | undefined {
  const nomad = nomadSkipReason();
  if (nomad) return nomad;
  for (const tool of ["ip", "nsenter", "curl"]) {
    try {
      execFileSync("sh", ["-c", `command -v ${tool}`], { stdio: "ignore" });
    } catch {
      return `no ${tool} on PATH (scripts/setup.sh installs it)`;
    }
  }
  return undefined;
}

export interface ClusterNode {
  /** 1-based, as the script numbers them. */
  index: number;
  name: string;
  netns: string;
  /** The veth end on the bridge: down cuts the node off silently. */
  veth: string;
  id: string;
}

export interface NomadCluster {
  address: string;
  env: NodeJS.ProcessEnv;
  nodes: ClusterNode[];
  dir: string;
  /** Pids of every process in the node's network namespace (its agent, task executors, sandbox servers). */
  pidsOf(node: ClusterNode): number[];
  /** SIGINT to the node's sandbox servers (as when the node shuts down). */
  interruptServers(node: ClusterNode): number[];
  /** SIGKILL to everything on the node, agent included. */
  killNode(node: ClusterNode): number[];
  startClient(node: ClusterNode): Promise<void>;
  drain(node: ClusterNode): Promise<void>;
  undrain(node: ClusterNode): Promise<void>;
  /** Takes the node's veth down (or up again): no socket closes, packets just stop. */
  cut(node: ClusterNode, off: boolean): Promise<void>;
  /** Node ids by status ("ready", "down", ...). */
  nodeStatus(): Promise<Record<string, string>>;
  /** Running allocations (of every job) by node id. */
  runningAllocations(): Promise<Array<{ id: string; job: string; node: string }>>;
  /** Jobs not dead. */
  liveJobs(): Promise<string[]>;
  logTail(node?: ClusterNode): string;
  down(): Promise<void>;
}

export async function startNomadCluster(): Promise<NomadCluster> {
  const dir = mkdtempSync(join(tmpdir(), "slotpool-cluster-"));
  // A prefix and subnet of this process's own: a link name is at most 15 characters.
  const tag = (process.pid % 46656).toString(36).padStart(3, "0");
  const prefix = `sp${tag}`;
  const subnet = `10.${200 + (process.pid % 50)}.${Math.floor(process.pid / 50) % 250}`;
  const env = { ...process.env, SLOTPOOL_CLUSTER_PREFIX: prefix, SLOTPOOL_CLUSTER_SUBNET: subnet, SLOTPOOL_CLUSTER_CLIENTS: "3" };
  const script = (...args: string[]) => run("bash", [SCRIPT, ...args], { env, timeout: 120_000 });
  const { stdout } = await script("up", dir);
  const address = /NOMAD_ADDR=(\S+)/.exec(stdout)?.[1];
  if (!address) throw new Error(`nomad-cluster.sh up printed no NOMAD_ADDR: ${stdout}`);
  const api = async <T>(path: string, init?: RequestInit): Promise<T> => {
    const res = await fetch(`${address}${path}`, init);
    if (!res.ok) throw new Error(`${init?.method ?? "GET"} ${path}: ${res.status} ${await res.text()}`);
    return (await res.json()) as T;
  };
  const listed = await api<Array<{ ID: string; Name: string }>>("/v1/nodes");
  const nodes: ClusterNode[] = [1, 2, 3].map((i) => {
    const name = `${prefix}-node${i}`;
    const id = listed.find((n) => n.Name === name)?.ID;
    if (!id) throw new Error(`node ${name} is not in the cluster: ${JSON.stringify(listed)}`);
    return { index: i, name, netns: `${prefix}n${i}`, veth: `${prefix}v${i}`, id };
  });
  const pidsOf = (node: ClusterNode) =>
    execFileSync("ip", ["netns", "pids", node.netns], { encoding: "utf8" })
      .split(/\s+/)
      .filter(Boolean)
      .map(Number);
  const cmdline = (pid: number) => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    } catch {
      return [];
    }
  };
  const signal = (pids: number[], sig: NodeJS.Signals) => pids.filter((pid) => {
    try {
      process.kill(pid, sig);
      return true;
    } catch {
      return false;
    }
  });
  const nomadEnv = { ...process.env, NOMAD_ADDR: address, NOMAD_TOKEN: "", NOMAD_NAMESPACE: "" };
  return {
    address,
    env: nomadEnv,
    nodes,
    dir,
    pidsOf,
    interruptServers: (node) => signal(pidsOf(node).filter((pid) => cmdline(pid).includes("sandbox-server")), "SIGINT"),
    killNode: (node) => signal(pidsOf(node), "SIGKILL"),
    startClient: async (node) => {
      await script("start-client", String(node.index), dir);
    },
    drain: async (node) => {
      await run("nomad", ["node", "drain", "-enable", "-yes", "-detach", "-deadline", "20s", node.id], { env: nomadEnv });
    },
    undrain: async (node) => {
      await run("nomad", ["node", "drain", "-disable", "-yes", node.id], { env: nomadEnv });
      await run("nomad", ["node", "eligibility", "-enable", node.id], { env: nomadEnv });
    },
    cut: async (node, off) => {
      await run("ip", ["link", "set", node.veth, off ? "down" : "up"]);
    },
    nodeStatus: async () => Object.fromEntries((await api<Array<{ ID: string; Status: string }>>("/v1/nodes")).map((n) => [n.ID, n.Status])),
    runningAllocations: async () =>
      (await api<Array<{ ID: string; JobID: string; NodeID: string; ClientStatus: string }>>("/v1/allocations?namespace=*"))
        .filter((a) => a.ClientStatus === "running")
        .map((a) => ({ id: a.ID, job: a.JobID, node: a.NodeID })),
    liveJobs: async () => (await api<Array<{ ID: string; Status: string }>>("/v1/jobs?namespace=*")).filter((j) => j.Status !== "dead").map((j) => j.ID),
    logTail: (node) => {
      try {
        return readFileSync(join(dir, node ? `client${node.index}.log` : "server.log"), "utf8").split("\n").slice(-30).join("\n");
      } catch {
        return "(no log)";
      }
    },
    down: async () => {
      await script("down", dir);
    },
  };
}
