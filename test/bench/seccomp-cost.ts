/**
 * What the slots' seccomp filter costs (issue 28: "bash true calls/s and the fork benchmark
 * within 5 % of today's, side by side in one run").
 *
 *   npm run build && node --import tsx test/bench/seccomp-cost.ts [--rounds 100] [--calls 5] [--children 4] [--burst 40]
 *
 * Two sandbox servers of this tree run side by side as real processes with the same flags,
 * one with the filter (the default) and one started with `--no-seccomp` (benchmarks only: its
 * /health says seccomp "off", checked below). Rounds interleave the two sides (A B, then B A)
 * so drift of this shared machine falls on both alike. Per round and side:
 *  - `bash true`: `--calls` sequential calls on a warm slot (latency; calls/s = 1000 / mean);
 *  - burst: `--burst` calls spread over both of its other slots at once (calls/s);
 *  - fork: the parent (with 200 files) forks into `--children` slots (`POST /fork`), then each
 *    child runs one `bash true` (its new namespace starts, the filter installed by bubblewrap).
 * Prints p50/p99 per side and the ratio filtered / unfiltered, with the 5 % target.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSandboxProcess, type SandboxProcess } from "../../src/pool/sandbox-process.js";
import { percentile } from "../../src/observability/latency-window.js";

const argv = process.argv.slice(2);
const count = (name: string, fallback: number): number => {
  const i = argv.indexOf(`--${name}`);
  const n = Number(i >= 0 ? argv[i + 1] : fallback);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${name} wants a positive integer`);
  return n;
};
const ROUNDS = count("rounds", 100);
const CALLS = count("calls", 5);
const CHILDREN = count("children", 4);
const BURST = count("burst", 40);
const TARGET = 1.05;
// Slots: 0 = bash true, 1-2 = burst, 3 = fork parent, 4.. = fork children.
const SLOTS = 4 + CHILDREN;

interface Side {
  name: "filtered" | "unfiltered";
  proc: SandboxProcess;
  dataDir: string;
  bash: number[];
  burst: number[];
  fork: number[];
  forkFirstCall: number[];
}

async function startSide(name: Side["name"], uidBase: number): Promise<Side> {
  const dataDir = mkdtempSync(join(tmpdir(), `slotpool-seccomp-${name}-`));
  chmodSync(dataDir, 0o755);
  const proc = await startSandboxProcess({
    slots: SLOTS,
    dataDir,
    extraArgs: ["--slot-uid-base", String(uidBase), ...(name === "unfiltered" ? ["--no-seccomp"] : [])],
    startTimeoutMs: 120_000,
    dieWithParent: true,
  });
  const health = (await (await fetch(`${proc.url}/health`)).json()) as { seccomp?: string; bwrap_available: boolean };
  const want = name === "filtered" ? "filter" : "off";
  if (!health.bwrap_available || health.seccomp !== want) throw new Error(`${name}: /health says bwrap ${health.bwrap_available}, seccomp ${health.seccomp} (want ${want})`);
  return { name, proc, dataDir, bash: [], burst: [], fork: [], forkFirstCall: [] };
}

async function post(side: Side, path: string, body: unknown): Promise<any> {
  const res = await fetch(side.proc.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const json = await res.json();
  if (!res.ok) throw new Error(`${side.name} ${path}: HTTP ${res.status} ${JSON.stringify(json)}`);
  return json;
}

async function bash(side: Side, slot: number, command: string): Promise<number> {
  const t0 = performance.now();
  const r = await post(side, "/execute", { slot_id: `slot_${slot}`, tool: "bash", args: { command, allow_network: false } });
  const ms = performance.now() - t0;
  if (!r.success || r.metadata?.sandboxed !== true) throw new Error(`${side.name}: ${command} failed: ${JSON.stringify(r).slice(0, 300)}`);
  return ms;
}

async function round(side: Side): Promise<void> {
  for (let i = 0; i < CALLS; i++) side.bash.push(await bash(side, 0, "true"));
  const t0 = performance.now();
  await Promise.all([1, 2].map(async (slot) => {
    for (let i = 0; i < BURST / 2; i++) await bash(side, slot, "true");
  }));
  side.burst.push((BURST / (performance.now() - t0)) * 1000);
  await bash(side, 3, "echo $RANDOM > dirty.txt");
  const children = Array.from({ length: CHILDREN }, (_, i) => `slot_${4 + i}`);
  const f0 = performance.now();
  await post(side, "/fork", { slot_id: "slot_3", into: children });
  side.fork.push(performance.now() - f0);
  const c0 = performance.now();
  await Promise.all(children.map((c, i) => bash(side, 4 + i, "test -f dirty.txt")));
  side.forkFirstCall.push(performance.now() - c0);
}

function stats(xs: number[]): { p50: number; p99: number; mean: number } {
  const s = [...xs].sort((a, b) => a - b);
  return { p50: percentile(s, 0.5), p99: percentile(s, 0.99), mean: xs.reduce((a, b) => a + b, 0) / xs.length };
}

function row(label: string, f: number[], u: number[], higherIsBetter = false): number {
  const a = stats(f);
  const b = stats(u);
  const n = (x: number) => x.toFixed(2).padStart(8);
  // The cost ratio: > 1 means the filter is slower.
  const ratio = higherIsBetter ? b.p50 / a.p50 : a.p50 / b.p50;
  console.log(`${label.padEnd(36)} filtered p50 ${n(a.p50)} p99 ${n(a.p99)} | unfiltered p50 ${n(b.p50)} p99 ${n(b.p99)} | cost ratio (p50) ${ratio.toFixed(3)} ${ratio <= TARGET ? "within" : "OVER"} 5 %`);
  return ratio;
}

const sides: Side[] = [];
try {
  sides.push(await startSide("filtered", 300_000), await startSide("unfiltered", 310_000));
  const [F, U] = sides as [Side, Side];
  // Warm: every slot's namespace up, the parent's files written.
  for (const s of sides) {
    await bash(s, 3, "mkdir -p tree && for i in $(seq 200); do echo $i > tree/f$i; done");
    for (let slot = 0; slot < SLOTS; slot++) await bash(s, slot, "true");
  }
  for (let i = 0; i < ROUNDS; i++) {
    for (const s of i % 2 === 0 ? [F, U] : [U, F]) await round(s);
  }
  console.log(`uid ${process.getuid?.()}, ${ROUNDS} rounds interleaved; ${CALLS} sequential calls, a burst of ${BURST} over 2 slots, a fork into ${CHILDREN} children per round and side`);
  row("bash true latency (ms)", F.bash, U.bash);
  console.log(`${"bash true calls/s (sequential, 1000/mean)".padEnd(36)} filtered ${(1000 / stats(F.bash).mean).toFixed(1)} | unfiltered ${(1000 / stats(U.bash).mean).toFixed(1)}`);
  row("bash true calls/s (2 slots at once)", F.burst, U.burst, true);
  row(`fork into ${CHILDREN} (ms)`, F.fork, U.fork);
  row("children's first call after it (ms)", F.forkFirstCall, U.forkFirstCall);
} finally {
  for (const s of sides) {
    await s.proc.stop(10_000);
    rmSync(s.dataDir, { recursive: true, force: true });
  }
}
