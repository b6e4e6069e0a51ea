/**
 * Reset cost against what the slot wrote (issue 20): an empty slot, 150,000 files, a
 * 4,000-deep tree; and the longest a `bash true` on another slot waited meanwhile.
 *
 *   npm run build && node --import tsx test/bench/reset-tree.ts [--rounds 5] [--files 150000] [--depth 4000] [--mode disk|fallback|both]
 *
 * "disk": the default, a tmpfs per slot (root, or not root in a user namespace of the
 * server's own): a reset drops and remounts it. "fallback": `--no-disk-workspace`, the
 * workspace is renamed away and deleted by a child process. Each round fills slot_0
 * (not timed), then times `POST /reset` while slot_1 runs `bash true` back to back, and
 * checks the workspace is empty when /reset answers. Prints p50/p99 of the reset, the
 * bystander's p99 and longest wait per case, and the longest /health answer meanwhile (it
 * runs nothing but the server's event loop: a stall of that loop shows there). Rounds are few for the large cases (filling 150,000
 * files takes seconds): with 5 rounds p99 is the maximum. Timing figures depend on what
 * else runs on the machine.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";
import { serverView } from "../support/server-view.js";

const argv = process.argv.slice(2);
const flag = (name: string, dflt: string): string => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1]! : dflt;
};
const ROUNDS = Number(flag("rounds", "5"));
const FILES = Number(flag("files", "150000"));
const DEPTH = Number(flag("depth", "4000"));
const MODE = flag("mode", "both");

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

const CASES: Array<{ name: string; fill: string; rounds: number }> = [
  { name: "empty", fill: "true", rounds: Math.max(ROUNDS, 20) },
  { name: `${FILES} files`, fill: `mkdir -p /workspace/f && cd /workspace/f && seq ${FILES} | xargs touch && ls | wc -l`, rounds: ROUNDS },
  {
    name: `${DEPTH}-deep tree`,
    fill: `cd /workspace && python3 -c 'import os
for i in range(${DEPTH}):
    os.mkdir("d"); os.chdir("d")
open("leaf", "w").write("x")' && echo made`,
    rounds: ROUNDS,
  },
];

async function measure(mode: "disk" | "fallback"): Promise<void> {
  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-reset-tree-"));
  const proc = await startSandboxProcess({
    slots: 2,
    dataDir,
    // Room for 150,000 inodes and their slab (counted as the slot's memory where cgroups exist).
    extraArgs: ["--memory-mb", "2048", "--disk-mb", "1024", "--max-timeout", "600", ...(mode === "fallback" ? ["--no-disk-workspace"] : [])],
    startTimeoutMs: 60_000,
  });
  const post = async (path: string, body: unknown): Promise<any> => {
    const res = await fetch(proc.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return { status: res.status, ...(await res.json()) };
  };
  const bash = (slot: number, command: string, timeout = 30) => post("/execute", { slot_id: `slot_${slot}`, tool: "bash", args: { command, timeout, allow_network: false } });
  const workspace = serverView(proc.pid, join(dataDir, "slot_0"));
  try {
    const health = await (await fetch(proc.url + "/health")).json();
    console.log(`${mode}: uid ${process.getuid?.()}, disk ${health.limits?.disk}, ${health.limits?.disk_mb} MB per slot`);
    for (const c of CASES) {
      const lat: number[] = [];
      const allWaits: number[] = [];
      const healthWaits: number[] = [];
      let left = 0;
      for (let r = 0; r < c.rounds; r++) {
        const filled = await bash(0, c.fill, 600);
        if (!filled.success) throw new Error(`filling failed (${c.name}): ${JSON.stringify(filled).slice(0, 500)}`);
        await bash(1, "true");
        let done = false;
        const waits: number[] = [];
        const bystander = (async () => {
          while (!done) {
            const t = performance.now();
            await bash(1, "true");
            waits.push(performance.now() - t);
          }
        })();
        // GET /health back to back: it runs nothing but the server's event loop, so its
        // longest answer bounds how long the reset blocked that loop (bash true adds the CPU).
        const health = (async () => {
          while (!done) {
            const t = performance.now();
            await fetch(proc.url + "/health").then((r) => r.arrayBuffer());
            healthWaits.push(performance.now() - t);
          }
        })();
        // Let the bystander get going before the reset starts.
        await new Promise((res) => setTimeout(res, 50));
        const t0 = performance.now();
        const reset = await post("/reset", { slot_id: "slot_0" });
        lat.push(performance.now() - t0);
        if (reset.status !== 200 || !reset.success) throw new Error(`reset failed (${c.name}): ${JSON.stringify(reset)}`);
        if (readdirSync(workspace).length > 0) left++;
        // One more bystander call after the answer: a wait that spans the reset's tail counts too.
        await new Promise((res) => setTimeout(res, 50));
        done = true;
        await Promise.all([bystander, health]);
        allWaits.push(...waits);
      }
      lat.sort((a, b) => a - b);
      allWaits.sort((a, b) => a - b);
      healthWaits.sort((a, b) => a - b);
      console.log(
        `${mode}: ${c.name.padEnd(16)} ${String(c.rounds).padStart(2)} rounds  reset p50 ${pct(lat, 50).toFixed(1)} ms  p99 ${pct(lat, 99).toFixed(1)} ms  max ${lat.at(-1)!.toFixed(1)} ms` +
          `  other slot's bash true (n=${allWaits.length}) p99 ${pct(allWaits, 99).toFixed(1)} max ${allWaits.at(-1)!.toFixed(1)} ms, >250 ms: ${allWaits.filter((w) => w > 250).length}` +
          `  /health max ${healthWaits.at(-1)!.toFixed(1)} ms  workspace not empty at answer: ${left}`,
      );
    }
  } finally {
    await proc.stop(10_000);
    // rm(1): the trees may still be in the server's trash, too deep for rmSync.
    spawnSync("rm", ["-rf", dataDir]);
  }
}

if (MODE === "disk" || MODE === "both") await measure("disk");
if (MODE === "fallback" || MODE === "both") await measure("fallback");
