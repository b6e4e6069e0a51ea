/**
 * Fork speed for branching (issue 30): fresh vs back-to-back children, and E2B's fork.
 *
 *   npm run build && node --import tsx test/bench/fork-speed-bench.ts [--rounds 40] [--children 8] [--quick]
 *
 * Part 1, one real sandbox server (as root or not, whoever runs it), a parent slot with a
 * few hundred files and `--children` child slots, `POST /fork` timed from the client:
 * - "fresh": the children are reset (as `lease.fork` gets free slots), left 300 ms to warm,
 *   then the parent forks into them;
 * - "back-to-back": the parent forks into the same children again right away (they received
 *   a fork a moment earlier and ran nothing since: a tree search forking repeatedly), and
 *   once more after each child ran one command ("used": it must be stopped and get a new disk).
 * Part 2, `Sandbox.fork({count: 2})` with the real `e2b` SDK against an E2bServer over a
 * local pool (what `slotpool e2b-server` serves), timed until both forks are back; the
 * parent forks again 2 more times right away (back to back), each timed too.
 * Prints each p50/p99 side by side and the back-to-back / fresh ratio. Targets: ratio ≈ 1,
 * `Sandbox.fork({count: 2})` p50 ≤ 20 ms. Figures depend on the machine's load (printed).
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox } from "e2b";
import { request } from "undici";
import { E2bServer } from "../../src/e2b/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";
import { SlotPool } from "../../src/pool/slot-pool.js";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const opt = (name: string, fallback: number): number => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const ROUNDS = opt("--rounds", quick ? 10 : 40);
const CHILDREN = opt("--children", 8);

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
};
const fmt = (xs: number[]): string => `p50 ${pct(xs, 50).toFixed(1).padStart(6)} ms  p99 ${pct(xs, 99).toFixed(1).padStart(6)} ms  (n=${xs.length})`;
const load = (): string => loadavg().map((l) => l.toFixed(1)).join(" ");
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function slotForks(): Promise<{ fresh: number[]; back: number[]; used: number[] }> {
  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-fsbench-"));
  const logs: string[] = [];
  const proc = await startSandboxProcess({ slots: CHILDREN + 1, dataDir, extraArgs: ["--disk-mb", "256", "--no-network"], startTimeoutMs: 60_000, onLog: (l) => void logs.push(l) });
  const post = async (path: string, body: unknown): Promise<any> => {
    const r = await request(proc.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const json: any = await r.body.json();
    if (r.statusCode !== 200) throw new Error(`${path}: HTTP ${r.statusCode} ${JSON.stringify(json)}`);
    return json;
  };
  const bash = async (slot: string, command: string): Promise<string> => {
    const r = await post("/execute", { slot_id: slot, tool: "bash", args: { command } });
    if (!r.success) throw new Error(`${slot}: ${command}: ${r.error} ${r.output}`);
    return r.output as string;
  };
  const children = Array.from({ length: CHILDREN }, (_, i) => `slot_${i + 1}`);
  const fork = async (): Promise<number> => {
    const t0 = performance.now();
    await post("/fork", { slot_id: "slot_0", into: children });
    return performance.now() - t0;
  };
  const fresh: number[] = [];
  const back: number[] = [];
  const used: number[] = [];
  try {
    await bash("slot_0", "mkdir -p src && for i in $(seq 1 300); do echo $i > src/f$i.txt; done");
    for (let r = -2; r < ROUNDS; r++) {
      // Chains end as a group's root is reset (the depth stays 1–4, as in fork-bench).
      if (r % 4 === 0) {
        await post("/reset", { slot_id: "slot_0" });
        await bash("slot_0", "mkdir -p src && for i in $(seq 1 300); do echo $i > src/f$i.txt; done");
      }
      await Promise.all(children.map((c) => post("/reset", { slot_id: c })));
      await sleep(300); // their namespaces start in the background (as a free slot's have)
      await bash("slot_0", `echo fresh${r} > src/f1.txt`);
      const f = await fork();
      // Back to back: the same children, which received a fork a moment ago.
      await bash("slot_0", `echo back${r} > src/f1.txt`);
      const b = await fork();
      const seen = await Promise.all(children.map((c) => bash(c, "cat src/f1.txt")));
      if (seen.some((s) => s.trim() !== `back${r}`)) throw new Error(`round ${r}: a child does not see the parent's last write: ${JSON.stringify(seen)}`);
      // Used: each child ran a command since the fork (the fork above's check).
      await bash("slot_0", `echo used${r} > src/f1.txt`);
      const u = await fork();
      if (r < 0) continue;
      fresh.push(f);
      back.push(b);
      used.push(u);
    }
  } catch (err) {
    console.error(`last server log lines:\n${logs.slice(-15).join("\n")}`);
    throw err;
  } finally {
    await proc.stop(10_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
  return { fresh, back, used };
}

async function e2bForks(): Promise<{ first: number[]; again: number[] }> {
  const baseDir = mkdtempSync(join(tmpdir(), "slotpool-fsbench-e2b-"));
  chmodSync(baseDir, 0o755);
  const slots = 8;
  const pool = new SlotPool({ provisioner: new LocalProvisioner({ slotsPerContainer: slots, baseDir }), slotsPerContainer: slots, minContainers: 1, maxContainers: 1 });
  await pool.start();
  const apiKey = "bench-key";
  const server = new E2bServer({ pool, apiKey });
  const url = await server.listen(0, "127.0.0.1");
  const opts = { apiUrl: url, sandboxUrl: url, apiKey };
  const first: number[] = [];
  const again: number[] = [];
  try {
    for (let r = -2; r < ROUNDS; r++) {
      const parent = await Sandbox.create(opts);
      await parent.commands.run("mkdir -p src && for i in $(seq 1 50); do echo $i > src/f$i.txt; done");
      const kids: Sandbox[] = [];
      for (let k = 0; k < 3; k++) {
        const t0 = performance.now();
        const got = await parent.fork({ count: 2 });
        const ms = performance.now() - t0;
        const ok = got.filter((x): x is Sandbox => x instanceof Sandbox);
        if (ok.length !== 2) throw new Error(`fork failed: ${got.map(String).join("; ")}`);
        kids.push(...ok);
        if (r >= 0) (k === 0 ? first : again).push(ms);
      }
      const outs = await Promise.all(kids.slice(-2).map((k) => k.commands.run("cat src/f50.txt")));
      if (outs.some((o) => o.stdout !== "50\n")) throw new Error("a fork did not see the parent's files");
      await Promise.all([...kids, parent].map((k) => k.kill()));
      await sleep(200);
    }
  } finally {
    await server.close();
    await pool.stop({ purge: true });
    rmSync(baseDir, { recursive: true, force: true });
  }
  return { first, again };
}

const loadBefore = load();
const s = await slotForks();
const e = await e2bForks();
console.log(`fork-speed-bench: uid ${process.getuid?.()}, ${ROUNDS} rounds, load average ${loadBefore} before, ${load()} after`);
console.log(`  POST /fork into ${CHILDREN} fresh children (reset, 300 ms idle)      ${fmt(s.fresh)}`);
console.log(`  POST /fork into ${CHILDREN} back-to-back children (forked a moment ago) ${fmt(s.back)}`);
console.log(`  POST /fork into ${CHILDREN} used children (ran a command since)       ${fmt(s.used)}`);
console.log(`  Sandbox.fork({count: 2}) (e2b SDK, E2bServer)                  ${fmt(e.first)}   target p50 ≤ 20 ms`);
console.log(`  Sandbox.fork({count: 2}) again right away                     ${fmt(e.again)}`);
console.log(`  ratio back-to-back / fresh p50: ${(pct(s.back, 50) / pct(s.fresh, 50)).toFixed(2)}x; used / fresh: ${(pct(s.used, 50) / pct(s.fresh, 50)).toFixed(2)}x; Sandbox.fork({count: 2}) / fresh: ${(pct(e.first, 50) / pct(s.fresh, 50)).toFixed(2)}x`);
