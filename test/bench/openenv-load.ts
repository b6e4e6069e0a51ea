/**
 * Load test of the OpenEnv server (issue 38): many concurrent WebSocket episodes, and the
 * frame attack of hole 7, against `slotpool openenv-server` run as users run it (its own
 * process, so its memory is its own), on 127.0.0.1.
 *
 *   npm run build && node --import tsx test/bench/openenv-load.ts [--episodes 256] [--slots 64] [--attackers 48]
 *
 *  1. `--episodes` WebSocket sessions connect at once, each one episode of examples/shell-tasks
 *     (reset of seed 0: a slot, setupWorkspace; the bash call that solves it; submit, scored in
 *     the slot). There are fewer slots than sessions (`--slots`, in containers of 32): resets
 *     wait for a free slot (the acquire timeout is long), as trainers' sessions do when a run
 *     asks for more than the cluster holds. Every episode must be answered with reward 1.
 *  2. `--attackers` connections each send a 15 MiB frame at once (the attack of hole 7), with
 *     the server's frame budget at 64 MiB: the server must refuse past the budget and stay
 *     bounded in memory.
 * The server's resident memory (VmRSS of its process, every 50 ms, and the kernel's VmHWM) is
 * reported for each phase with the ratio to its idle size. Figures depend on the machine's load
 * (`uptime` is printed before and after).
 */
import { spawn } from "node:child_process";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { percentile } from "../../src/observability/latency-window.js";
import { rawWs } from "../openenv/raw-ws.js";
import { SOLVE_SEED_0, WsClient } from "../openenv/support.js";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const argv = process.argv.slice(2);
const arg = (name: string, fallback: number) => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const EPISODES = arg("--episodes", 256);
const SLOTS = arg("--slots", 64);
const ATTACKERS = arg("--attackers", 48);
const PER_CONTAINER = Math.min(32, SLOTS);
const BUDGET = 64 * 1024 * 1024;

const mib = (kb: number) => `${(kb / 1024).toFixed(0)} MiB`;
function status(pid: number, field: "VmRSS" | "VmHWM"): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, "m").exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) : 0;
}

/** Samples the process's VmRSS every 50 ms until stopped; the peak in kB. */
function sampler(pid: number): { stop(): number } {
  let peak = status(pid, "VmRSS");
  const t = setInterval(() => (peak = Math.max(peak, status(pid, "VmRSS"))), 50);
  return {
    stop: () => {
      clearInterval(t);
      return Math.max(peak, status(pid, "VmRSS"));
    },
  };
}

async function main(): Promise<void> {
  console.log(`load before: ${execFileSync("uptime").toString().trim()}`);
  const server = spawn(
    process.execPath,
    [
      `${ROOT}dist/src/cli/main.js`, "openenv-server", "examples/shell-tasks/env.js", "--port", "0",
      "--slots-per-container", String(PER_CONTAINER), "--min-containers", String(Math.ceil(SLOTS / PER_CONTAINER)), "--max-containers", String(Math.ceil(SLOTS / PER_CONTAINER)),
      "--acquire-timeout-ms", "900000", "--max-sessions", String(EPISODES + ATTACKERS + 16), "--frame-budget-bytes", String(BUDGET),
    ],
    { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] },
  );
  const lines = createInterface({ input: server.stderr! });
  const url = await new Promise<string>((resolve, reject) => {
    lines.on("line", (line) => {
      const m = /"url":"(http:\/\/[^"]+)"/.exec(line);
      if (m && line.includes("listening")) resolve(m[1]!);
    });
    server.once("exit", (code) => reject(new Error(`openenv-server exited with ${code}`)));
    setTimeout(() => reject(new Error("openenv-server did not log 'listening' within 120 s")), 120_000).unref();
  });
  const wsUrl = `${url.replace(/^http/, "ws")}/ws`;
  const pid = server.pid!;
  try {
    // Warm: every container up (one episode per slot), then the idle size.
    await Promise.all(
      Array.from({ length: SLOTS }, async () => {
        const c = await WsClient.connect(wsUrl);
        await c.reset({ seed: 0 });
        await c.call("submit");
        await c.close();
      }),
    );
    const idle = status(pid, "VmRSS");
    console.log(`server idle after warm-up (${SLOTS} slots in ${Math.ceil(SLOTS / PER_CONTAINER)} containers): VmRSS ${mib(idle)}`);

    // 1. Concurrent episodes.
    const s1 = sampler(pid);
    const t0 = performance.now();
    const latencies: number[] = [];
    let rewarded = 0;
    const failures: string[] = [];
    await Promise.all(
      Array.from({ length: EPISODES }, async () => {
        const start = performance.now();
        try {
          const c = await WsClient.connect(wsUrl);
          const reset = await c.reset({ seed: 0 });
          if (reset.type !== "observation") throw new Error(JSON.stringify(reset.data).slice(0, 200));
          await c.call("bash", { command: SOLVE_SEED_0 });
          const end = await c.call("submit");
          if (end.data.reward === 1) rewarded++;
          else failures.push(JSON.stringify(end.data).slice(0, 200));
          await c.close();
          latencies.push(performance.now() - start);
        } catch (err) {
          failures.push(String(err));
        }
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    const peak1 = s1.stop();
    const sorted = [...latencies].sort((a, b) => a - b);
    console.log(`${EPISODES} concurrent WebSocket episodes on ${SLOTS} slots: ${rewarded}/${EPISODES} answered with reward 1 in ${seconds.toFixed(1)} s (${(EPISODES / seconds).toFixed(1)} episodes/s); episode time p50 ${(percentile(sorted, 0.5) / 1000).toFixed(2)} s, p99 ${(percentile(sorted, 0.99) / 1000).toFixed(2)} s`);
    console.log(`  server VmRSS peak ${mib(peak1)} (${(peak1 / idle).toFixed(2)}x idle)`);
    if (failures.length > 0) console.log(`  FAILED: ${failures.length}: ${failures.slice(0, 3).join(" | ")}`);

    // 2. The frame attack of hole 7: ATTACKERS x 15 MiB frames at once, budget 64 MiB.
    const s2 = sampler(pid);
    const frame = 15 * 1024 * 1024;
    const attackers = await Promise.all(Array.from({ length: ATTACKERS }, () => rawWs(wsUrl)));
    for (const a of attackers) a.ws?.startFrame(frame, frame);
    // Each attacker is answered: refused (close 1013), or its frame read whole and answered (not JSON: INVALID_JSON). At most 120 s.
    const answered = () => attackers.every((a) => a.ws === undefined || a.ws.closeCode !== undefined || a.ws.texts.length > 0);
    for (let waited = 0; !answered() && waited < 120_000; waited += 50) await new Promise((r) => setTimeout(r, 50));
    const refused = attackers.filter((a) => a.ws?.closeCode === 1013).length;
    const read = attackers.filter((a) => a.ws?.closeCode === undefined && (a.ws?.texts.length ?? 0) > 0).length;
    for (const a of attackers) a.ws?.socket.destroy();
    const peak2 = s2.stop();
    const health = await fetch(`${url}/health`);
    console.log(`${ATTACKERS} connections x 15 MiB frames (${((ATTACKERS * frame) / 2 ** 20).toFixed(0)} MiB sent, frame budget ${BUDGET / 2 ** 20} MiB): ${refused} refused with 1013, ${read} read whole and answered, ${ATTACKERS - refused - read} unanswered; server VmRSS peak ${mib(peak2)} (${(peak2 / idle).toFixed(2)}x idle), /health ${health.status}`);
    console.log(`server VmHWM (its peak over the whole run): ${mib(status(pid, "VmHWM"))}`);
  } finally {
    const exited = new Promise((r) => server.once("exit", r));
    server.kill("SIGTERM");
    await exited;
    console.log(`load after: ${execFileSync("uptime").toString().trim()}`);
  }
}

await main();
