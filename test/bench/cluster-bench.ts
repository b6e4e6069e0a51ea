/**
 * Throughput of the README's main job (examples/shell-tasks, oracle policy) at 256 concurrent
 * trajectories on a real Nomad cluster built on this machine (scripts/nomad-cluster.sh: one
 * server, three clients in network namespaces, raw_exec): on 1 node (the other two marked
 * ineligible) and on 3 nodes, trajectories per second each, and the ratio. All nodes share
 * this box's cores, so the ratio says what spreading costs or gains here, not what three
 * machines would give.
 *
 * Run (root, nomad on PATH): npm run build && npx tsx test/bench/cluster-bench.ts
 * Knobs (env): BENCH_GROUPS (default 32), BENCH_GROUP_SIZE (8), BENCH_CONCURRENCY (groups in
 * flight, 32: 32 × 8 = 256 trajectories at once), BENCH_SLOTS (slots per container, 32).
 */
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { repoRoot } from "../support/nomad-agent.js";
import { clusterSkipReason, startNomadCluster, type NomadCluster } from "../support/nomad-cluster.js";

const GROUPS = Number(process.env["BENCH_GROUPS"] ?? 32);
const GROUP_SIZE = Number(process.env["BENCH_GROUP_SIZE"] ?? 8);
const CONCURRENCY = Number(process.env["BENCH_CONCURRENCY"] ?? 32);
const SLOTS = Number(process.env["BENCH_SLOTS"] ?? 32);
const run = promisify(execFile);

async function oneRun(cluster: NomadCluster, dir: string, label: string): Promise<{ trajectories: number; seconds: number }> {
  const config = join(dir, `${label}.json`);
  // The same job on both: what the nodes can place of it is the difference (a 2-core node with
  // 24 GB places 3 containers of 32 slots, by the job's default cpu and memory).
  const containers = Math.ceil((GROUP_SIZE * CONCURRENCY) / SLOTS);
  writeFileSync(config, JSON.stringify({ pool: { slotsPerContainer: SLOTS, minContainers: 3, maxContainers: containers + 1, nomad: { driver: "raw_exec", jobId: `bench-${label}-${process.pid}` } } }));
  const args = ["dist/src/cli/main.js", "process", "examples/shell-tasks/env.js", "--provisioner", "nomad", "--config", config, "--out", join(dir, `${label}.jsonl`), "--groups", String(GROUPS), "--group-size", String(GROUP_SIZE), "--concurrency", String(CONCURRENCY), "--no-progress", "--no-report"];
  const child = spawn(process.execPath, args, { cwd: repoRoot, env: cluster.env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (c: Buffer) => (stdout += c.toString()));
  child.stderr!.on("data", (c: Buffer) => (stderr = (stderr + c.toString()).slice(-4000)));
  let peak = 0;
  let peakContainers = 0;
  const placed = setInterval(() => {
    void cluster.runningAllocations().then((allocs) => {
      const mine = allocs.filter((a) => a.job === `bench-${label}-${process.pid}`);
      peak = Math.max(peak, new Set(mine.map((a) => a.node)).size);
      peakContainers = Math.max(peakContainers, mine.length);
    }, () => undefined);
  }, 1000);
  const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
  clearInterval(placed);
  console.log(`${label}: up to ${peakContainers} containers on ${peak} node(s)`);
  const trajectories = Number(/trajectories\s+(\d+) scored/.exec(stdout)?.[1] ?? NaN);
  const seconds = Number(/elapsed\s+([\d.]+) s/.exec(stdout)?.[1] ?? NaN);
  if (code !== 0 || !/success rate\s+100\.0%/.test(stdout)) throw new Error(`${label}: the run failed (exit ${code}):\n${stdout}\n${stderr}`);
  return { trajectories, seconds };
}

async function main(): Promise<void> {
  const skip = clusterSkipReason();
  if (skip) {
    console.log(`cluster-bench skipped: ${skip}`);
    return;
  }
  const dir = mkdtempSync(join(tmpdir(), "cluster-bench-"));
  const cluster = await startNomadCluster();
  try {
    const others = cluster.nodes.slice(1);
    for (const n of others) await run("nomad", ["node", "eligibility", "-disable", n.id], { env: cluster.env });
    const one = await oneRun(cluster, dir, "1node");
    for (const n of others) await run("nomad", ["node", "eligibility", "-enable", n.id], { env: cluster.env });
    const three = await oneRun(cluster, dir, "3nodes");
    const rate = (r: { trajectories: number; seconds: number }) => r.trajectories / r.seconds;
    console.log(`${GROUP_SIZE * CONCURRENCY} concurrent trajectories, ${GROUPS * GROUP_SIZE} in all, ${SLOTS} slots per container, on this box:`);
    console.log(`  1 node : ${rate(one).toFixed(2)} trajectories/s (${one.trajectories} in ${one.seconds.toFixed(1)} s)`);
    console.log(`  3 nodes: ${rate(three).toFixed(2)} trajectories/s (${three.trajectories} in ${three.seconds.toFixed(1)} s)`);
    console.log(`  3 nodes / 1 node: ${(rate(three) / rate(one)).toFixed(2)}x`);
  } finally {
    await cluster.down();
    rmSync(dir, { recursive: true, force: true });
  }
}

await main();
