/**
 * Reset latency and the reset barrier (issue 11, hole 1).
 *
 *   npm run build && node --import tsx test/bench/reset-barrier.ts [--rounds 50] [--baseline DIR]
 *
 * Each round: a `bash_stateful` call leaves `sleep 313 &` running (marked with a unique
 * argv[0]) and a loop that keeps creating files in the workspace, then `POST /reset`.
 * Prints the reset latency p50/p99 and how many rounds still had the marked process alive
 * or files in the workspace right when /reset answered, or files 200 ms later (all 0 =
 * reset is a barrier).
 * `--baseline DIR`: first the same rounds against a built checkout in DIR (e.g. the code
 * before issue 11: `git worktree add --detach /tmp/sp-base 5b5ed74 && cp -a node_modules
 * /tmp/sp-base/ && (cd /tmp/sp-base && npm run build)`), for before/after in one run.
 * Timing figures depend on what else runs on the machine.
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";
import { serverView } from "../support/server-view.js";
import { baselineEnv } from "./baseline.js";

const argv = process.argv.slice(2);
const i = argv.indexOf("--rounds");
const ROUNDS = i >= 0 ? Number(argv[i + 1]) : 50;

/** Pids of live (not zombie) processes whose command line contains `marker`. */
function marked(marker: string): number[] {
  const pids: number[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d) || Number(d) === process.pid) continue;
    try {
      if (readFileSync(`/proc/${d}/cmdline`, "utf8").includes(marker)) pids.push(Number(d));
    } catch {
      /* exited */
    }
  }
  return pids.filter(running);
}

function running(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^\d+ \(.*\) [ZX]/s.test(stat);
  } catch {
    return false;
  }
}

function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** One server (this tree's, or a built checkout's `dist/src/cli/main.js`), ROUNDS rounds. */
async function measure(label: string, mainScript?: string): Promise<void> {
  const env = baselineEnv(mainScript);
  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-reset-bench-"));
  const proc = await startSandboxProcess({
    slots: 2,
    dataDir,
    extraArgs: [],
    startTimeoutMs: 60_000,
    ...(mainScript ? { mainScript } : {}),
    ...(env ? { env } : {}),
  });
  const post = async (path: string, body: unknown): Promise<any> => {
    const res = await fetch(proc.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    return res.json();
  };
  try {
    const lat: number[] = [];
    let survivors = 0;
    let filesAtAnswer = 0;
    let filesLater = 0;
    let filesBefore = 0;
    // The server's view: as root the workspace is its tmpfs, in its own mount namespace.
    const workspace = serverView(proc.pid, join(dataDir, "slot_0"));
    for (let r = 0; r < ROUNDS; r++) {
      const marker = `slotpool-rb-${process.pid}-${r}`;
      // A marked sleep and a loop that keeps (re)creating 64 files in the workspace.
      const command = `(exec -a ${marker} sleep 313) & bash -c 'i=0; while :; do : > /workspace/${marker}.$((i++ % 64)); done' ${marker}-loop & echo ok`;
      const planted = await post("/execute", { slot_id: "slot_0", tool: "bash_stateful", args: { command } });
      if (planted.output !== "ok") throw new Error(`plant failed: ${JSON.stringify(planted)}`);
      // Wait until the marked process exists (the subshell execs after "ok" is printed).
      let pids = marked(marker);
      for (let k = 0; k < 100 && pids.length === 0; k++) {
        await new Promise((res) => setTimeout(res, 10));
        pids = marked(marker);
      }
      if (pids.length === 0) throw new Error(`the marked process of round ${r} never appeared`);
      // Control: the loop's files show where this bench looks (else "0 files" would mean nothing).
      for (let k = 0; k < 100 && !readdirSync(workspace).some((f) => f.includes(marker)); k++) await new Promise((res) => setTimeout(res, 10));
      if (readdirSync(workspace).some((f) => f.includes(marker))) filesBefore++;
      const t0 = performance.now();
      const reset = await post("/reset", { slot_id: "slot_0" });
      lat.push(performance.now() - t0);
      if (!reset.success) throw new Error(`reset failed: ${JSON.stringify(reset)}`);
      // Only the known pid: a scan of /proc would take long enough to hide the race.
      if (pids.some(running)) survivors++;
      if (readdirSync(workspace).length > 0) filesAtAnswer++;
      await new Promise((res) => setTimeout(res, 200));
      if (readdirSync(workspace).some((f) => f.includes(marker))) filesLater++;
    }
    lat.sort((a, b) => a - b);
    console.log(`${label}: reset after bash_stateful: ${ROUNDS} rounds  p50 ${pct(lat, 50).toFixed(1)} ms  p99 ${pct(lat, 99).toFixed(1)} ms  rounds with (when /reset answered) the process alive: ${survivors}, files in the workspace: ${filesAtAnswer}; with files 200 ms later: ${filesLater} (control: the loop's files seen before the reset in ${filesBefore} of ${ROUNDS} rounds)`);
  } finally {
    await proc.stop(10_000);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

const b = argv.indexOf("--baseline");
if (b >= 0) {
  const main = join(resolve(argv[b + 1] ?? "."), "dist", "src", "cli", "main.js");
  if (!existsSync(main)) throw new Error(`no ${main}: run 'npm run build' in ${argv[b + 1]} first`);
  await measure("baseline", main);
}
await measure("current");
