/**
 * What network on costs (issue 11): per call (`bash true`, sequential, one slot) and per
 * slot start (reset, then the first call, which waits for the slot's new namespace),
 * network on (own namespace + slirp4netns + routes) against network off, in one run.
 *
 *   npm run build && node --import tsx test/bench/network-cost.ts [--calls 200] [--starts 20]
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";

const argv = process.argv.slice(2);
const flag = (name: string, fallback: number): number => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : fallback;
};
const CALLS = flag("calls", 200);
const STARTS = flag("starts", 20);

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const dataDir = mkdtempSync(join(tmpdir(), "slotpool-netcost-"));
const proc = await startSandboxProcess({ slots: 2, dataDir, extraArgs: [], startTimeoutMs: 60_000 });
const post = async (path: string, body: unknown): Promise<any> => {
  const res = await fetch(proc.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  return res.json();
};
const bash = async (slot: number, net: boolean) => {
  const r = await post("/execute", { slot_id: `slot_${slot}`, tool: "bash", args: { command: "true", allow_network: net } });
  if (!r.success) throw new Error(JSON.stringify(r));
};
try {
  for (const net of [false, true]) {
    const slot = net ? 1 : 0;
    await bash(slot, net);
    const calls: number[] = [];
    for (let i = 0; i < CALLS; i++) {
      const t0 = performance.now();
      await bash(slot, net);
      calls.push(performance.now() - t0);
    }
    const starts: number[] = [];
    for (let i = 0; i < STARTS; i++) {
      await post("/reset", { slot_id: `slot_${slot}` });
      const t0 = performance.now();
      await bash(slot, net);
      starts.push(performance.now() - t0);
    }
    console.log(`network ${net ? "on " : "off"}: bash true p50 ${pct(calls, 50).toFixed(2)} ms p99 ${pct(calls, 99).toFixed(2)} ms | reset then first call p50 ${pct(starts, 50).toFixed(1)} ms p99 ${pct(starts, 99).toFixed(1)} ms`);
  }
} finally {
  await proc.stop(10_000);
  rmSync(dataDir, { recursive: true, force: true });
}
