/**
 * Workspace template benchmark (issue 13).
 *
 *   npm run build && node --import tsx test/bench/template-bench.ts [--resets 40] [--quick] [--network on]
 *
 * Builds two templates on a real sandbox server — 5,000 files and 50,000 files (a source
 * tree with a git repository) — then measures `POST /reset {"template"}` latency p50/p99
 * (each round first dirties the slot: one edited file, one deleted, one new), and as the
 * baseline the cost of giving each trajectory its own copy of the same tree
 * (`cp -a --reflink=auto` + deleting it afterwards, what a per-trajectory checkout costs at
 * the least). Also printed: the first call after each reset (the dirtying command), which
 * waits for the slot's fresh namespace if the background start-up a reset begins has not
 * finished. Calls run with `allow_network: false` (the executor's default) unless
 * `--network on`. Prints the figures and the ratios measured in this one run. Targets: reset
 * into a template p50 ≤ 20 ms, 50k / 5k ≤ 1.5x. Figures depend on the machine's load.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { request } from "undici";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";

const argv = process.argv.slice(2);
const quick = argv.includes("--quick");
const i = argv.indexOf("--resets");
const RESETS = i >= 0 ? Number(argv[i + 1]) : quick ? 15 : 40;
const j = argv.indexOf("--sizes");
const NETWORK = argv[argv.indexOf("--network") + 1] === "on" && argv.includes("--network");
const SIZES = j >= 0 ? argv[j + 1]!.split(",").map(Number) : quick ? [5_000, 20_000] : [5_000, 50_000];

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
};

/** A setup that writes `files` small source files in directories of 100, then commits them. */
function treeSetup(files: number): string[] {
  const dirs = Math.ceil(files / 100);
  return [
    `for d in $(seq 1 ${dirs}); do mkdir -p src/pkg$d; for f in $(seq 1 100); do printf 'def f%d():\\n    return %d\\n' $f $f > src/pkg$d/mod$f.py; done; done`,
    "git init -q . && git add -A && git -c user.email=bench@example.invalid -c user.name=bench commit -qm tree && git gc -q",
  ];
}

async function main(): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-tbench-"));
  const logs: string[] = [];
  const proc = await startSandboxProcess({ slots: 2, dataDir, extraArgs: ["--template-budget-mb", "8192"], startTimeoutMs: 60_000, onLog: (l) => void logs.push(l) });
  const post = async (path: string, body: unknown): Promise<any> => {
    // No client-side deadline: a 50,000-file build takes minutes on a loaded box.
    const r = await request(proc.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), headersTimeout: 0, bodyTimeout: 0 });
    const json: any = await r.body.json();
    if (r.statusCode !== 200) throw new Error(`${path}: HTTP ${r.statusCode} ${JSON.stringify(json)}`);
    return json;
  };
  const results: Array<{ files: number; entries: number; mb: number; buildMs: number; p50: number; p99: number; plainP50: number; firstP50: number; copyP50: number }> = [];
  try {
    const mode = ((await (await fetch(proc.url + "/templates")).json()) as any).mode;
    console.log(`view mode: ${mode}; ${RESETS} resets per template; calls with network ${NETWORK ? "on" : "off"}`);
    for (const files of SIZES) {
      const name = `tree${files}`;
      const b = await post("/templates", { name, setup: treeSetup(files), timeout: 1800 });
      if (!b.success) throw new Error(`build failed: ${b.error}\n${b.output}`);
      const t = b.template;
      const dirty = "echo edit >> src/pkg1/mod1.py && rm src/pkg1/mod2.py && echo new > NEW.txt";
      const lat: number[] = [];
      const plain: number[] = [];
      const first: number[] = [];
      await post("/reset", { slot_id: "slot_0", template: name });
      for (let r = 0; r < RESETS; r++) {
        const t2 = performance.now();
        const d = await post("/execute", { slot_id: "slot_0", tool: "bash", args: { command: dirty, allow_network: NETWORK } });
        first.push(performance.now() - t2);
        if (!d.success) throw new Error(`dirtying failed: ${d.error}`);
        const t0 = performance.now();
        const res = await post("/reset", { slot_id: "slot_0", template: name });
        lat.push(performance.now() - t0);
        if (!res.success) throw new Error(res.error);
        // Plain reset of another slot, same conditions (for reference).
        await post("/execute", { slot_id: "slot_1", tool: "bash", args: { command: "echo x > a.txt", allow_network: NETWORK } });
        const t1 = performance.now();
        await post("/reset", { slot_id: "slot_1" });
        plain.push(performance.now() - t1);
      }
      const check = await post("/execute", { slot_id: "slot_0", tool: "bash", args: { command: "git status --short | wc -l; find . -type f -not -path './.git/*' | wc -l" } });
      // Baseline: one private copy per trajectory of the same tree (host side, as root).
      const store = join(dataDir, ".slotpool", "templates", "store");
      const tree = join(store, readdirSync(store).find((n) => n.startsWith(`${name}-`))!);
      const copies: number[] = [];
      // A copy of a large tree takes minutes on a loaded box: fewer rounds there.
      for (let r = 0; r < Math.min(files > 10_000 ? 2 : 5, RESETS); r++) {
        const dst = join(dataDir, `copy-${r}`);
        const t0 = performance.now();
        execFileSync("cp", ["-a", "--reflink=auto", tree, dst]);
        rmSync(dst, { recursive: true, force: true });
        copies.push(performance.now() - t0);
      }
      const row = { files, entries: t.files, mb: t.size_bytes / 1024 / 1024, buildMs: t.build_ms, p50: pct(lat, 50), p99: pct(lat, 99), plainP50: pct(plain, 50), firstP50: pct(first, 50), copyP50: pct(copies, 50) };
      results.push(row);
      console.log(
        `${String(files).padStart(6)} files (${row.entries} entries, ${row.mb.toFixed(1)} MB, built in ${(row.buildMs / 1000).toFixed(1)} s): ` +
          `reset into template p50 ${row.p50.toFixed(1)} ms p99 ${row.p99.toFixed(1)} ms | first call after it p50 ${row.firstP50.toFixed(1)} ms | plain reset p50 ${row.plainP50.toFixed(1)} ms | ` +
          `copy per trajectory p50 ${row.copyP50.toFixed(1)} ms (${(row.copyP50 / row.p50).toFixed(1)}x the template reset) | after reset: ${check.output.replace(/\n/g, " changed, ")} files`,
      );
    }
    const [small, large] = results;
    if (small && large) {
      console.log(
        `ratio ${large.files}/${small.files} files: template reset p50 ${(large.p50 / small.p50).toFixed(2)}x (target <= 1.5x), copy per trajectory ${(large.copyP50 / small.copyP50).toFixed(2)}x`,
      );
      console.log(`target reset p50 <= 20 ms: ${results.map((r) => `${r.files} files ${r.p50 <= 20 ? "met" : "NOT met"} (${r.p50.toFixed(1)} ms)`).join(", ")}`);
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
