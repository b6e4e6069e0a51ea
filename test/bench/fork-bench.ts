/**
 * Fork benchmark (issue 23).
 *
 *   npm run build && node --import tsx test/bench/fork-bench.ts [--rounds 200] [--children 8] [--sizes 5000,50000] [--chain 20] [--quick] [--no-template]
 *
 * On a real sandbox server (as root or not, whoever runs it): one parent slot per size writes
 * a tree of N small files itself (not a template: `awk` in the slot); then each round, for
 * each size in turn (interleaved, so a change in the machine's load hits both sizes alike),
 * the parent dirties one file and forks into the same 8 children (`POST /fork`), timed from
 * the client; then every child runs one command (as a branch would) and checks the file
 * ("used children": the fork resets them first); then the children are reset, as
 * `lease.fork` gets them (free slots are reset on release), and the parent forks again
 * ("fresh children": no reset needed). Baselines measured in the
 * same run: copying the parent's tree once inside the slot (`cp -a`, what a fork by copying
 * costs per child; 8 children cost 8 of them), and resetting 8 slots into a template of the
 * same tree (`POST /reset {"template"}`, concurrently: the cheapest way to start 8 children
 * from a prepared state, without the parent's own changes). Targets: fork p50 ≤ 20 ms, and
 * 50,000-file / 5,000-file p50 ≤ 1.5x, over the whole run (the p50 of each quarter of the
 * rounds is printed: a cost that grows with the run shows there). Each fork leaves one more
 * layer under the parent (a fork turns its writes into a layer), as repeated forks of a live
 * slot do; after `--chain` forks the parent is reset and writes its tree again (as a
 * group's root is reset after its group: chains end), untimed, so every quarter of the run
 * sees the same chain depths (1 to `--chain`). Figures depend on the machine's load.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "undici";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const opt = (name: string): string | undefined => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const ROUNDS = Number(opt("--rounds") ?? (quick ? 10 : 200));
const CHAIN = Number(opt("--chain") ?? 20);
const CHILDREN = Number(opt("--children") ?? 8);
const SIZES = (opt("--sizes") ?? (quick ? "2000,20000" : "5000,50000")).split(",").map(Number);
const TEMPLATE = !argv.includes("--no-template");

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};

/** Writes `files` small files in dirs of 100 (one awk: seconds, not minutes, for 50,000). */
function writeTree(files: number): string {
  const dirs = Math.ceil(files / 100);
  return (
    `seq 0 ${dirs - 1} | sed 's|^|src/pkg|' | xargs mkdir -p && ` +
    `awk -v n=${files} 'BEGIN{for(i=0;i<n;i++){f=sprintf("src/pkg%d/mod%d.py", int(i/100), i%100); print "def f():\\n    return " i > f; close(f)}}' && ` +
    `find src -type f | wc -l`
  );
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-fbench-"));
  const logs: string[] = [];
  const slots = CHILDREN + SIZES.length;
  const proc = await startSandboxProcess({
    slots,
    dataDir,
    extraArgs: ["--disk-mb", "1024", "--memory-mb", "2048", "--template-budget-mb", "8192", "--no-network"],
    startTimeoutMs: 60_000,
    onLog: (l) => void logs.push(l),
  });
  const post = async (path: string, body: unknown): Promise<any> => {
    const r = await request(proc.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), headersTimeout: 0, bodyTimeout: 0 });
    const json: any = await r.body.json();
    if (r.statusCode !== 200) throw new Error(`${path}: HTTP ${r.statusCode} ${JSON.stringify(json)}`);
    return json;
  };
  const bash = async (slot: number, command: string): Promise<string> => {
    const r = await post("/execute", { slot_id: `slot_${slot}`, tool: "bash", args: { command }, timeout: 1800 });
    if (!r.success) throw new Error(`slot_${slot}: ${command.slice(0, 80)}: ${r.error} ${r.output}`);
    return r.output as string;
  };
  // Parents: one slot per size; children: the next CHILDREN slots, shared (each fork resets them).
  const parents = SIZES.map((_, i) => i);
  const children = Array.from({ length: CHILDREN }, (_, i) => `slot_${SIZES.length + i}`);
  const results: Array<{ files: number; p50: number; p99: number; freshP50: number; freshP99: number; copyMs: number; tplP50?: number }> = [];
  try {
    console.log(`uid ${process.getuid?.()}; fork into ${CHILDREN} children, ${ROUNDS} rounds per size, sizes interleaved round by round`);
    const lat: number[][] = SIZES.map(() => []);
    const freshLat: number[][] = SIZES.map(() => []);
    let mode = "";
    const restart = async (k: number): Promise<void> => {
      await post("/reset", { slot_id: `slot_${parents[k]}` });
      await bash(parents[k]!, writeTree(SIZES[k]!));
    };
    for (const [k, files] of SIZES.entries()) {
      const t0 = performance.now();
      const count = (await bash(parents[k]!, writeTree(files))).trim();
      console.log(`slot_${parents[k]}: ${count} files written in the slot in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    }
    for (let r = 0; r < ROUNDS; r++) {
      for (const [k] of SIZES.entries()) {
        const p = parents[k]!;
        // Two forks per round: the chain ends after CHAIN of them (untimed).
        if (CHAIN > 0 && r > 0 && (2 * r) % CHAIN === 0) await restart(k);
        await bash(p, `echo round${r} > src/pkg0/mod0.py`);
        const f0 = performance.now();
        const f = await post("/fork", { slot_id: `slot_${p}`, into: children });
        lat[k]!.push(performance.now() - f0);
        mode = f.mode;
        // Each child works a little (as a branch would) and sees the parent's state at the fork.
        const seen = await Promise.all(children.map((c) => bash(Number(c.slice(5)), "cat src/pkg0/mod0.py")));
        if (seen.some((o) => o.trim() !== `round${r}`)) throw new Error(`round ${r}: a child does not see the parent's last write: ${JSON.stringify(seen)}`);
        // Children fresh from a reset (as lease.fork gets them: free slots are reset on release).
        await Promise.all(children.map((c) => post("/reset", { slot_id: c })));
        await new Promise((res) => setTimeout(res, 300)); // their namespaces start in the background
        await bash(p, `echo fresh${r} > src/pkg0/mod0.py`);
        const g0 = performance.now();
        await post("/fork", { slot_id: `slot_${p}`, into: children });
        freshLat[k]!.push(performance.now() - g0);
        const seen2 = await Promise.all(children.map((c) => bash(Number(c.slice(5)), "cat src/pkg0/mod0.py")));
        if (seen2.some((o) => o.trim() !== `fresh${r}`)) throw new Error(`round ${r}: a fresh child does not see the parent's last write: ${JSON.stringify(seen2)}`);
      }
    }
    for (const [k, files] of SIZES.entries()) {
      const p = parents[k]!;
      // Baseline: one copy of the parent's tree (what a fork by copying costs per child).
      const copies: number[] = [];
      for (let r = 0; r < (files > 10_000 ? 2 : 3); r++) {
        const c0 = performance.now();
        await bash(p, "cp -a /workspace/src /tmp/copy && rm -rf /tmp/copy");
        copies.push(performance.now() - c0);
      }
      const row: (typeof results)[number] = { files, p50: pct(lat[k]!, 50), p99: pct(lat[k]!, 99), freshP50: pct(freshLat[k]!, 50), freshP99: pct(freshLat[k]!, 99), copyMs: pct(copies, 50) };
      const quarters = (xs: number[]): string =>
        [0, 1, 2, 3].map((q) => pct(xs.slice(Math.floor((q * xs.length) / 4), Math.floor(((q + 1) * xs.length) / 4)), 50).toFixed(1)).join(" / ");
      console.log(`${String(files).padStart(6)} files: fork p50 by quarter of the run (ms): used children ${quarters(lat[k]!)}; fresh children ${quarters(freshLat[k]!)}`);
      if (TEMPLATE) {
        // Baseline: the children reset into a template holding the same tree, concurrently.
        const name = `tree${files}`;
        const b = await post("/templates", { name, setup: [writeTree(files)], timeout: 1800 });
        if (!b.success) throw new Error(`template build failed: ${b.error}`);
        const tl: number[] = [];
        for (let r = 0; r < Math.min(ROUNDS, 10); r++) {
          await Promise.all(children.map((c) => bash(Number(c.slice(5)), "echo x > dirty")));
          const r0 = performance.now();
          const rs = await Promise.all(children.map((c) => post("/reset", { slot_id: c, template: name })));
          tl.push(performance.now() - r0);
          if (rs.some((x) => !x.success)) throw new Error(`template reset failed: ${JSON.stringify(rs.find((x) => !x.success))}`);
        }
        row.tplP50 = pct(tl, 50);
      }
      results.push(row);
      console.log(
        `${String(files).padStart(6)} files, mode ${mode}: fork into ${CHILDREN} used children p50 ${row.p50.toFixed(1)} ms p99 ${row.p99.toFixed(1)} ms, ` +
          `fresh children p50 ${row.freshP50.toFixed(1)} ms p99 ${row.freshP99.toFixed(1)} ms | ` +
          `one copy of the tree ${row.copyMs.toFixed(0)} ms (x${CHILDREN} children: ${((row.copyMs * CHILDREN) / 1000).toFixed(1)} s) | ` +
          (row.tplP50 !== undefined ? `${CHILDREN} template resets p50 ${row.tplP50.toFixed(1)} ms` : "template baseline skipped"),
      );
    }
    const [small, large] = results;
    if (small && large) {
      console.log(
        `ratio ${large.files}/${small.files} files: fork p50 ${(large.p50 / small.p50).toFixed(2)}x used children, ${(large.freshP50 / small.freshP50).toFixed(2)}x fresh children (target <= 1.5x), one copy ${(large.copyMs / small.copyMs).toFixed(1)}x`,
      );
      const verdict = (ms: number) => `${ms <= 20 ? "met" : "NOT met"} (${ms.toFixed(1)} ms)`;
      console.log(`target fork p50 <= 20 ms: ${results.map((r) => `${r.files} files: used children ${verdict(r.p50)}, fresh children ${verdict(r.freshP50)}`).join("; ")}`);
    }
  } catch (err) {
    console.error(`failed: ${String(err)}\nlast server log lines:\n${logs.slice(-15).join("\n")}`);
    process.exitCode = 1;
  } finally {
    await proc.stop(10_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

await main();
