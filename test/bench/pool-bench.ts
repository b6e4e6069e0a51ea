/**
 * SlotPool benchmarks.
 * Run: `npm run build && node --expose-gc --import tsx test/bench/pool-bench.ts [--bookkeeping-only|--burst-only] [--local]`
 *
 * 1. Bookkeeping: an in-memory provisioner of 1,000 containers × 10 slots (no HTTP): the
 *    cost of acquire+release (target p99 ≤ 1 ms), of handing a released slot to a waiter,
 *    and the memory the pool's records take.
 * 2. Burst: 500 acquires arriving at once on a pool of one container; time until every one
 *    holds a slot (scale-up from demand in one call, containers started as real sandbox
 *    servers) through the NomadProvisioner and the Nomad API emulator, or with `--local` the
 *    LocalProvisioner.
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NomadClient } from "../../src/nomad/client.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { NomadProvisioner } from "../../src/pool/nomad-provisioner.js";
import type { Provisioner } from "../../src/pool/provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import type { LeasedSlot } from "../../src/pool/types.js";
import { MemoryProvisioner } from "../pool/support/memory-provisioner.js";
import { startNomadEmulator } from "../support/nomad-emulator.js";

function quantile(sorted: number[], q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * q))]!;
}

function summary(name: string, samplesMs: number[]): void {
  const s = [...samplesMs].sort((a, b) => a - b);
  const mean = s.reduce((a, b) => a + b, 0) / s.length;
  console.log(
    `${name.padEnd(44)} n=${String(s.length).padEnd(6)} p50=${(quantile(s, 0.5) * 1000).toFixed(1)} µs  p99=${(quantile(s, 0.99) * 1000).toFixed(1)} µs  max=${(s.at(-1)! * 1000).toFixed(1)} µs  mean=${(mean * 1000).toFixed(1)} µs`,
  );
}

async function bookkeeping(): Promise<void> {
  const containers = 1000;
  const slotsPer = 10;
  console.log(`\n== bookkeeping: in-memory provisioner, ${containers} containers × ${slotsPer} slots ==`);
  global.gc?.();
  const heapBefore = process.memoryUsage().heapUsed;
  const provisioner = new MemoryProvisioner({ slots: slotsPer });
  const pool = new SlotPool({
    slotsPerContainer: slotsPer,
    minContainers: containers,
    maxContainers: containers,
    leaseTimeoutMs: 0,
    healthIntervalMs: 3_600_000,
    provisioner,
    createClient: provisioner.clientFactory,
  });
  const t0 = performance.now();
  await pool.start();
  console.log(`start (1,000 containers up and admitted): ${(performance.now() - t0).toFixed(0)} ms`);
  global.gc?.();
  const heapAfter = process.memoryUsage().heapUsed;
  console.log(
    `pool memory: ${((heapAfter - heapBefore) / 1024 / 1024).toFixed(1)} MiB heap for ${containers * slotsPer} slots (incl. test-double clients)` +
      `${global.gc ? "" : " — run with --expose-gc for a cleaner figure"}`,
  );

  // Load levels: the scan for the lowest free container gets longer as the pool fills.
  for (const load of [0, 0.5, 0.99]) {
    const held: LeasedSlot[] = [];
    const toHold = Math.floor(containers * slotsPer * load);
    for (let i = 0; i < toHold; i++) held.push(await pool.acquire({ trajectoryId: `h${i}` }));
    for (let i = 0; i < 2_000; i++) {
      const s = await pool.acquire({ trajectoryId: "warm" });
      await pool.release(s, { reset: false });
    }
    const noReset: number[] = [];
    for (let i = 0; i < 20_000; i++) {
      const a = performance.now();
      const s = await pool.acquire({ trajectoryId: `t${i}` });
      await pool.release(s, { reset: false });
      noReset.push(performance.now() - a);
    }
    summary(`acquire+release, ${Math.round(load * 100)}% held, no reset`, noReset);
    const withReset: number[] = [];
    for (let i = 0; i < 20_000; i++) {
      const a = performance.now();
      const s = await pool.acquire({ trajectoryId: `r${i}` });
      await pool.release(s);
      withReset.push(performance.now() - a);
    }
    summary(`acquire+release, ${Math.round(load * 100)}% held, reset (in-memory)`, withReset);
    for (const s of held) await pool.release(s, { reset: false });
  }

  // Waiter handoff: every slot held, 1,000 waiters queued; each release serves the oldest.
  const all: LeasedSlot[] = [];
  for (let i = 0; i < containers * slotsPer; i++) all.push(await pool.acquire({ trajectoryId: `all${i}` }));
  const waiters: Array<Promise<LeasedSlot>> = [];
  for (let i = 0; i < 1_000; i++) waiters.push(pool.acquire({ trajectoryId: `w${i}`, timeoutMs: 60_000 }));
  const handoff: number[] = [];
  for (let i = 0; i < 1_000; i++) {
    const a = performance.now();
    await pool.release(all[i]!, { reset: false });
    await waiters[i]!;
    handoff.push(performance.now() - a);
  }
  summary("release → oldest waiter served (FIFO)", handoff);
  const stats = pool.stats();
  console.log(`pool stats: acquire p50=${stats.acquireLatencyMs.p50.toFixed(3)} ms p99=${stats.acquireLatencyMs.p99.toFixed(3)} ms over ${stats.acquireLatencyMs.count} acquires; scale events ${stats.scaleEvents}`);
  await pool.stop();
}

async function burst(): Promise<void> {
  const slotsPer = 50;
  const maxContainers = 10;
  const useEmulator = !process.argv.includes("--local");
  const baseDir = await mkdtemp(join(tmpdir(), "slotpool-bench-"));
  await chmod(baseDir, 0o755); // slot uids of a root server must traverse it
  let provisioner: Provisioner;
  let cleanup = async () => {};
  if (useEmulator) {
    const nomad = await startNomadEmulator({ dataDir: baseDir });
    provisioner = new NomadProvisioner({
      slotsPerContainer: slotsPer,
      client: new NomadClient({ address: nomad.address }),
      job: { jobId: "pool-bench" },
    });
    cleanup = () => nomad.stop();
  } else {
    provisioner = new LocalProvisioner({ slotsPerContainer: slotsPer, baseDir });
  }
  console.log(
    `\n== burst: 500 acquires at once, ${slotsPer} slots/container, 1 → ${maxContainers} containers, ${useEmulator ? "NomadProvisioner on the Nomad emulator (real sandbox processes)" : "LocalProvisioner"} ==`,
  );
  const pool = new SlotPool({ slotsPerContainer: slotsPer, minContainers: 1, maxContainers, acquireTimeoutMs: 120_000, provisioner });
  try {
    await pool.start();
    const t0 = performance.now();
    const served: number[] = [];
    const slots = await Promise.all(
      Array.from({ length: 500 }, (_, i) =>
        pool.acquire({ trajectoryId: `b${i}` }).then((s) => {
          served.push(performance.now() - t0);
          return s;
        }),
      ),
    );
    const total = performance.now() - t0;
    served.sort((a, b) => a - b);
    console.log(
      `all 500 served in ${total.toFixed(0)} ms (first 50 from the running container: ${served[49]!.toFixed(1)} ms; p50 ${quantile(served, 0.5).toFixed(0)} ms; p99 ${quantile(served, 0.99).toFixed(0)} ms)`,
    );
    console.log(`scale calls: ${pool.scaleLog().map((e) => `${e.from}→${e.to}${e.ok ? "" : " (failed)"}`).join(", ")}`);
    const t1 = performance.now();
    await Promise.all(slots.map((s) => s.execute({ tool: "bash", args: { command: "true" } })));
    console.log(`one bash call in each of the 500 slots: ${(performance.now() - t1).toFixed(0)} ms`);
    const t2 = performance.now();
    await Promise.all(slots.map((s) => pool.release(s)));
    console.log(`release with reset of all 500: ${(performance.now() - t2).toFixed(0)} ms`);
  } finally {
    await pool.stop();
    await cleanup();
    await rm(baseDir, { recursive: true, force: true });
  }
}

const args = new Set(process.argv.slice(2));
if (!args.has("--burst-only")) await bookkeeping();
if (!args.has("--bookkeeping-only")) await burst();
