import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fuzzServer, rssMb, send, type FuzzTarget } from "./fuzz-support.js";
import { startCliServer, type CliServer } from "./support.js";

/**
 * Bad input on every route of a real executor service (`slotpool executor-server`, local
 * provisioner): 4xx with a JSON message, never 5xx, a crash or a hang; RSS bounded.
 */
const TOKEN = "executor-fuzz-token-c4d1";
let server: CliServer;
let target: FuzzTarget;
let rssBefore = 0;
let dataDir: string;

function post(path: string, body: unknown) {
  return send(server.url, { method: "POST", path, headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" }, body: Buffer.from(JSON.stringify(body)) });
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "slotpool-fuzz-exec-"));
  chmodSync(dataDir, 0o755);
  server = await startCliServer(
    ["executor-server", "--port", "0", "--token", TOKEN, "--provisioner", "local", "--slots-per-container", "4", "--min-containers", "1", "--max-containers", "1", "--acquire-timeout-ms", "5000", "--default-timeout", "10", "--data-dir", dataDir, "--no-network"],
    { startTimeoutMs: 60_000 },
  );
  const call = (traj: string, command: string) => ({ trajectory_id: traj, tool: { name: "bash", arguments: { command }, uniq_id: "u1" }, timeout_s: 5 });
  target = {
    name: "executor-server",
    url: server.url,
    token: TOKEN,
    routes: [
      { method: "GET", path: "/health" },
      { method: "GET", path: "/status" },
      { method: "GET", path: "/metrics" },
      { method: "POST", path: "/execute", validBodies: [call("fz-1", "echo fuzz"), call("fz-2", "true"), { trajectory_id: "fz-1", tool: { name: "write_file", arguments: { path: "a.txt", content: "x" } } }] },
      { method: "POST", path: "/release", validBodies: [{ trajectory_id: "fz-1", reset_workspace: true }, { trajectory_id: "fz-2", reset_workspace: false }] },
      { method: "POST", path: "/artifacts/read", validBodies: [{ trajectory_id: "fz-1", path: "a.txt", encoding: "text" }] },
      { method: "POST", path: "/artifacts/list", validBodies: [{ trajectory_id: "fz-1", path: ".", recursive: true }] },
      { method: "POST", path: "/artifacts/archive", validBodies: [{ trajectory_id: "fz-1", path: ".", format: "tar.gz" }] },
    ],
  };
  const warm = await post("/execute", call("warm", "true"));
  expect(warm.status).toBe(200);
  await post("/release", { trajectory_id: "warm", reset_workspace: true });
  rssBefore = rssMb(server.pid);
}, 90_000);

afterAll(async () => {
  await server?.stop(15_000);
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

describe("executor service under bad input", () => {
  it("random methods, paths, headers and bodies: 4xx with a JSON message, never 5xx or a hang", async () => {
    const report = await fuzzServer(target, { runs: 300, alive: () => (server.alive() ? null : server.logs.slice(-4).join("\n")) });
    console.log("executor-server fuzz:", JSON.stringify(report));
    expect(report.byStatus["200"] ?? 0).toBeGreaterThan(20);
    expect(report.byStatus["400"] ?? 0).toBeGreaterThan(20);
  }, 60_000);

  for (const path of ["//", "///%F0%BE%9C%84"]) {
    it(`a request for ${JSON.stringify(path)} gets a 4xx, not a 500`, async () => {
      const a = await send(server.url, { method: "GET", path, headers: {}, body: undefined });
      expect(a.status).toBeGreaterThanOrEqual(400);
      expect(a.status).toBeLessThan(500);
    });
  }

  it("afterwards: alive, executing, no slot left held by the fuzzed trajectories once released, RSS bounded", async () => {
    expect(server.alive()).toBe(true);
    for (const t of ["fz-1", "fz-2"]) await post("/release", { trajectory_id: t, reset_workspace: true });
    const ok = await post("/execute", { trajectory_id: "after", tool: { name: "bash", arguments: { command: "echo after" } }, timeout_s: 10 });
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.text).output).toBe("after");
    await post("/release", { trajectory_id: "after", reset_workspace: true });
    const status = JSON.parse((await send(server.url, { method: "GET", path: "/status", headers: { authorization: `Bearer ${TOKEN}` }, body: undefined })).text);
    console.log("executor /status after fuzzing:", JSON.stringify(status.pool));
    expect(status.pool.held ?? status.pool.slotsHeld ?? 0).toBe(0);
    const after = rssMb(server.pid);
    console.log(`executor-server RSS: ${rssBefore} MB before fuzzing, ${after} MB after`);
    expect(after).toBeLessThan(Math.max(300, rssBefore + 150));
  }, 30_000);
});
