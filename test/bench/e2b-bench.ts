/**
 * E2B-compatible API benchmark (issue 24).
 *
 *   npm run build && node --import tsx test/bench/e2b-bench.ts [--rounds 100] [--quick] [--slots 8]
 *
 * A local pool of real sandbox servers behind `E2bServer` on 127.0.0.1, driven by the real
 * `e2b` SDK. Each round, one client: `Sandbox.create()` then the first `commands.run("echo hi")`
 * on it, timed from the call to create until the run's result is back (what an RL rollout
 * waits for before its first tool call), split into create and first run; then the sandbox
 * is killed (not timed; it releases and resets the slot). The pool is warm (its containers
 * are up before the first round; a few unmeasured rounds come first). Prints p50/p99.
 * Target: create → first result p50 ≤ 30 ms (E2B's cloud quotes about 150 ms for create).
 * Then fork: a sandbox with a few files forks into 2 (`sandbox.fork({count: 2})`), timed
 * until both forks are back, and until the first command on each fork has answered.
 * Figures depend on the machine's load.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { E2bServer } from "../../src/e2b/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const arg = (name: string, fallback: number) => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const ROUNDS = arg("--rounds", quick ? 30 : 100);
const SLOTS = arg("--slots", 8);

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};
const fmt = (xs: number[]) => `p50 ${pct(xs, 50).toFixed(1)} ms  p99 ${pct(xs, 99).toFixed(1)} ms  (n=${xs.length})`;

async function main(): Promise<void> {
  const baseDir = mkdtempSync(join(tmpdir(), "slotpool-e2bbench-"));
  chmodSync(baseDir, 0o755);
  const pool = new SlotPool({ provisioner: new LocalProvisioner({ slotsPerContainer: SLOTS, baseDir }), slotsPerContainer: SLOTS, minContainers: 1, maxContainers: 1 });
  await pool.start();
  const apiKey = "bench-key";
  const server = new E2bServer({ pool, apiKey });
  const url = await server.listen(0, "127.0.0.1");
  const opts = { apiUrl: url, sandboxUrl: url, apiKey };
  try {
    const total: number[] = [];
    const create: number[] = [];
    const firstRun: number[] = [];
    for (let round = -5; round < ROUNDS; round++) {
      const t0 = performance.now();
      const sbx = await Sandbox.create(opts);
      const t1 = performance.now();
      const r = await sbx.commands.run("echo hi");
      const t2 = performance.now();
      if (r.stdout !== "hi\n") throw new Error(`unexpected output ${JSON.stringify(r.stdout)}`);
      await sbx.kill();
      if (round < 0) continue; // warm-up
      total.push(t2 - t0);
      create.push(t1 - t0);
      firstRun.push(t2 - t1);
    }
    const fork: number[] = [];
    const forkRun: number[] = [];
    const forkRounds = Math.max(10, Math.floor(ROUNDS / 3));
    for (let round = -2; round < forkRounds; round++) {
      const parent = await Sandbox.create(opts);
      await parent.commands.run("mkdir -p src && for i in $(seq 1 50); do echo $i > src/f$i.txt; done");
      const t0 = performance.now();
      const kids = await parent.fork({ count: 2 });
      const t1 = performance.now();
      const ok = kids.filter((k): k is Sandbox => k instanceof Sandbox);
      if (ok.length !== 2) throw new Error(`fork failed: ${kids.map(String).join("; ")}`);
      const outs = await Promise.all(ok.map((k) => k.commands.run("cat src/f50.txt")));
      const t2 = performance.now();
      if (outs.some((o) => o.stdout !== "50\n")) throw new Error("a fork did not see the parent's files");
      await Promise.all([...ok, parent].map((k) => k.kill()));
      if (round < 0) continue;
      fork.push(t1 - t0);
      forkRun.push(t2 - t0);
    }
    console.log(`e2b-bench: ${ROUNDS} rounds, one client, pool of ${SLOTS} slots on 127.0.0.1 (load average ${(await import("node:os")).loadavg().map((l) => l.toFixed(1)).join(" ")})`);
    console.log(`  Sandbox.create → first commands.run result  ${fmt(total)}   target p50 ≤ 30 ms`);
    console.log(`    Sandbox.create                            ${fmt(create)}`);
    console.log(`    first commands.run("echo hi")             ${fmt(firstRun)}`);
    console.log(`  sandbox.fork({count: 2})                    ${fmt(fork)}`);
    console.log(`    fork → first command answered on both     ${fmt(forkRun)}`);
  } finally {
    await server.close();
    await pool.stop({ purge: true });
    rmSync(baseDir, { recursive: true, force: true });
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
