/**
 * First call of a fresh trajectory through the executor service, with a warm pool: the
 * executor-server (HTTP, as envs in other languages use it) over a real SlotPool of local
 * sandbox servers. Each sample is one `POST /execute` of `bash true` under a trajectory id
 * never seen before (the executor acquires a slot, the sandbox runs the command in the
 * slot's namespace), then `POST /release` with a reset, outside the figure, and a pause so
 * the slot's namespace is warm again (as between an env's trajectories). Target: p50 ≤ 10 ms.
 *
 * Also printed, to tell the parts apart: the same call straight to the sandbox server
 * (`sandbox direct`), a later call of the same trajectory through the service (`next call`),
 * and the first call through the in-process ToolExecutor (no executor HTTP hop).
 *
 * Run: npm run build && npx tsx test/bench/executor-first-call.ts
 *      [--samples 100] [--slots 10] [--pause-ms 30]
 * Figures on a shared machine are noisy: compare the rows of one run.
 */
import { Agent, request } from "undici";
import { ExecutorServer } from "../../src/executor/executor-server.js";
import { createToolBackend } from "../../src/executor/tool-backend.js";
import { parseToolBackendConfig } from "../../src/executor/backend-config.js";
import { percentile } from "../../src/observability/latency-window.js";
import { waitForWarmPool } from "../support/warm-pool.js";

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  const v = i >= 0 ? Number(process.argv[i + 1]) : fallback;
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} must be a number >= 0, got ${process.argv[i + 1]}`);
  return v;
}
const SAMPLES = arg("samples", 100);
const SLOTS = arg("slots", 10);
const PAUSE_MS = arg("pause-ms", 30);

// The one nearest-rank formula the pool, the executor and the run statistics use.
const pct = (xs: number[], q: number): number => percentile([...xs].sort((a, b) => a - b), q);
const row = (label: string, xs: number[]) =>
  console.log(`${label.padEnd(44)} p50 ${pct(xs, 0.5).toFixed(2).padStart(6)} ms   p90 ${pct(xs, 0.9).toFixed(2).padStart(6)} ms   (n=${xs.length})`);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const backend = await createToolBackend(parseToolBackendConfig({ pool: { provisioner: "local", slotsPerContainer: SLOTS, minContainers: 1, maxContainers: 1 } }));
const server = new ExecutorServer({ executor: backend.executor, pool: backend.pool });
const url = await server.listen(0, "127.0.0.1");
// The env's client: keep-alive connections, as any HTTP client library keeps them.
const client = new Agent({ connections: 4, keepAliveTimeout: 60_000 });

async function post(path: string, body: unknown): Promise<Record<string, unknown>> {
  const res = await request(url + path, { method: "POST", dispatcher: client, headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const answer = (await res.body.json()) as Record<string, unknown>;
  if (res.statusCode !== 200) throw new Error(`${path}: HTTP ${res.statusCode} ${JSON.stringify(answer)}`);
  return answer;
}
const call = (trajectory: string) => post("/execute", { trajectory_id: trajectory, tool: { name: "bash", arguments: { command: "true" } } });

try {
  // A warm pool: every slot's namespace up (the server pre-warms them at start). No calls
  // before the samples, so the first samples land on slots that never ran a call.
  await waitForWarmPool(backend.pool);

  const first: number[] = [];
  const next: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const id = `fresh-${i}`;
    let t = performance.now();
    const r = await call(id);
    first.push(performance.now() - t);
    if (r["success"] !== true) throw new Error(`first call failed: ${JSON.stringify(r)}`);
    t = performance.now();
    await call(id);
    next.push(performance.now() - t);
    await post("/release", { trajectory_id: id, reset_workspace: true });
    await sleep(PAUSE_MS); // the released slot warms its fresh namespace in the background
  }

  const inProcess: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const id = `inproc-${i}`;
    const t = performance.now();
    const r = await backend.executor.execute(id, { name: "bash", arguments: { command: "true" } });
    inProcess.push(performance.now() - t);
    if (!r.success) throw new Error(`in-process first call failed: ${r.error}`);
    await backend.executor.release(id);
    await sleep(PAUSE_MS);
  }

  // The sandbox server alone, same command, for the floor under the executor's figures.
  const slot = await backend.pool.acquire({ trajectoryId: "direct" });
  const direct: number[] = [];
  for (let i = 0; i < SAMPLES; i++) {
    const t = performance.now();
    const r = await slot.execute({ tool: "bash", args: { command: "true" } });
    direct.push(performance.now() - t);
    if (!r.success) throw new Error(`direct call failed: ${r.error}`);
  }
  await backend.pool.release(slot, { reset: false });

  console.log(`executor service over 1 local sandbox server × ${SLOTS} slots, ${SAMPLES} samples, ${PAUSE_MS} ms between trajectories\n`);
  row("first call, fresh trajectory (HTTP service)", first);
  row("next call, same trajectory (HTTP service)", next);
  row("first call, fresh trajectory (in-process)", inProcess);
  row("sandbox direct (pool slot, no executor)", direct);
  console.log(`\ntarget: first call through the service p50 ≤ 10 ms → ${pct(first, 0.5) <= 10 ? "met" : "NOT met"}`);
} finally {
  await client.close();
  await server.close(1000);
  await backend.close();
}
