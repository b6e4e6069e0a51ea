/**
 * `/metrics` (Prometheus text) on the sandbox server and the executor service carries
 * calls, errors, latency histograms, slots by state, containers and scale events — checked
 * after real traffic, so each counter must have moved.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { startAttackServer, startCliServer, type AttackServer, type CliServer } from "../security/support.js";
import { isHistogram, parseProm, sum } from "./prom.js";

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

describe("sandbox server /metrics", () => {
  let server: AttackServer;
  it("counts calls by tool and outcome, HTTP errors by route and status, call latency, resets and slots by state; needs the token", async () => {
    server = await startAttackServer({ slots: 2 });
    cleanups.push(() => server.stop());
    await server.bash(0, "echo ok");
    await server.bash(0, "exit 3");
    await server.bash(1, "sleep 5", { timeout: 1 });
    await server.tool(0, "read_file", { path: "missing.txt" });
    await server.request("POST", "/execute", { slot_id: "slot_0", tool: "nope" });
    await server.reset(1);
    const unauth = await fetch(`${server.url}/metrics`);
    expect(unauth.status).toBe(401);
    const res = await server.request("GET", "/metrics");
    expect(res.status).toBe(200);
    const m = parseProm(res.text);
    expect(sum(m, "slotpool_sandbox_calls_total", { tool: "bash", outcome: "ok" })).toBeGreaterThanOrEqual(1);
    expect(sum(m, "slotpool_sandbox_calls_total", { tool: "bash", outcome: "error" })).toBeGreaterThanOrEqual(1);
    expect(sum(m, "slotpool_sandbox_calls_total", { tool: "bash", outcome: "timeout" })).toBe(1);
    expect(sum(m, "slotpool_sandbox_calls_total", { tool: "read_file" })).toBe(1);
    expect(sum(m, "slotpool_sandbox_errors_total", { route: "/execute", status: "400" })).toBe(1);
    expect(isHistogram(m, "slotpool_sandbox_call_duration_seconds")).toBe(true);
    expect(sum(m, "slotpool_sandbox_call_duration_seconds_count", { tool: "bash" })).toBe(3);
    expect(sum(m, "slotpool_sandbox_resets_total")).toBe(1);
    expect(sum(m, "slotpool_sandbox_slots", { state: "idle" }) + sum(m, "slotpool_sandbox_slots", { state: "busy" })).toBe(2);
    expect(m.has("slotpool_sandbox_slots")).toBe(true);
  }, 60_000);
});

describe("executor service /metrics", () => {
  let exec: CliServer;
  const TOKEN = "metrics-exec-token-77aa";
  it("carries executor calls, errors and latency, pool slots and containers by state, acquire latency and scale events", async () => {
    const base = mkdtempSync(join(tmpdir(), "slotpool-obs-"));
    chmodSync(base, 0o755);
    exec = await startCliServer(["executor-server", "--port", "0", "--token", TOKEN, "--provisioner", "local", "--slots-per-container", "1", "--min-containers", "1", "--max-containers", "2", "--data-dir", join(base, "data")], { startTimeoutMs: 60_000 });
    cleanups.push(async () => {
      await exec.stop(15_000);
      rmSync(base, { recursive: true, force: true });
    });
    const post = (path: string, body: unknown) =>
      fetch(`${exec.url}${path}`, { method: "POST", headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json());
    // Two trajectories on one 1-slot container: demand forces a scale event.
    const [a, b] = await Promise.all([
      post("/execute", { trajectory_id: "m-a", tool: { name: "bash", arguments: { command: "echo a" } } }),
      post("/execute", { trajectory_id: "m-b", tool: { name: "bash", arguments: { command: "exit 2" } } }),
    ]);
    expect(a.output).toBe("a");
    expect(b.success).toBe(false);
    await post("/release", { trajectory_id: "m-a", reset_workspace: true });
    const res = await fetch(`${exec.url}/metrics`, { headers: { authorization: `Bearer ${TOKEN}` } });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/text\/plain/);
    const m = parseProm(await res.text());
    expect(sum(m, "slotpool_executor_calls_total", { tool: "bash" })).toBe(2);
    expect(sum(m, "slotpool_executor_errors_total", { tool: "bash" })).toBe(1);
    expect(isHistogram(m, "slotpool_executor_call_duration_seconds")).toBe(true);
    expect(sum(m, "slotpool_pool_slots", { state: "held" })).toBe(1);
    expect(sum(m, "slotpool_pool_slots", { state: "free" })).toBe(1);
    expect(m.get("slotpool_pool_slots")!.map((s) => s.labels["state"]).sort()).toEqual(["free", "held", "lost"]);
    expect(sum(m, "slotpool_pool_containers", { state: "ready" })).toBe(2);
    expect(isHistogram(m, "slotpool_pool_acquire_seconds")).toBe(true);
    expect(sum(m, "slotpool_pool_scale_events_total", { result: "ok" })).toBeGreaterThanOrEqual(1);
    expect(m.has("slotpool_pool_slots_lost_total")).toBe(true);
    expect(m.has("slotpool_executor_queued_calls")).toBe(true);
    expect(m.has("slotpool_executor_in_flight_calls")).toBe(true);
    const unauth = await fetch(`${exec.url}/metrics`);
    expect(unauth.status).toBe(401);
  }, 90_000);
});
