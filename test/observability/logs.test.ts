/**
 * Logs: tokens never reach them (sandbox server, executor service, ToolServer, Nomad CLI),
 * and lines about a call carry the trajectory id, the slot and the allocation.
 */
import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { startNomadEmulator, type NomadEmulator } from "../support/nomad-emulator.js";
import { startAttackServer, startCliServer, within, type CliServer } from "../security/support.js";

const EXEC_TOKEN = "exec-log-token-a81b44d2";
const TOOL_TOKEN = "tool-log-token-5c6e7f80";
const API_KEY = "weather-api-key-0d9e8f7a";
const NOMAD_TOKEN = "nomad-log-token-19c2b3a4";

const cleanups: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const c of cleanups.reverse()) await c().catch(() => undefined);
});

async function hit(url: string, path: string, auth: string | undefined, body?: unknown): Promise<number> {
  const res = await fetch(url + path, {
    method: body === undefined ? "GET" : "POST",
    headers: { "content-type": "application/json", ...(auth ? { authorization: auth } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  await res.text();
  return res.status;
}

describe("tokens are never logged", () => {
  it("sandbox server (token from SANDBOX_TOKEN): right, wrong, near-miss and missing tokens, at debug level", async () => {
    // startSandboxProcess hands the server its token through SANDBOX_TOKEN (never argv).
    const s = await startAttackServer({ slots: 1, env: { SLOTPOOL_LOG_LEVEL: "trace" } });
    cleanups.push(() => s.stop());
    for (const auth of [undefined, "Bearer wrong", `Bearer ${s.token}x`, `Bearer ${s.token.slice(0, -2)}`, `Basic ${s.token}`]) await hit(s.url, "/slots", auth);
    await hit(s.url, "/execute", `Bearer ${s.token}`, { slot_id: "slot_0", tool: "bash", args: { command: "env; echo done" } });
    await hit(s.url, "/execute", `Bearer ${s.token}`, { slot_id: "slot_9", tool: "bash", args: { command: "true" } });
    await s.proc.stop(10_000);
    const all = s.logs.join("\n");
    expect(s.logs.length).toBeGreaterThan(3);
    expect(all).not.toContain(s.token);
    expect(all).not.toContain(s.token.slice(0, 12));
  }, 60_000);

  it("executor service, its ToolServer and their sandbox servers: no token or API key in any output", async () => {
    const tools = await startCliServer(["tool-server", "--port", "0", "--tools", resolve("examples/tool-server/weather-tools.mjs"), "--token", TOOL_TOKEN], {
      env: { WEATHER_API_KEY: API_KEY, SLOTPOOL_LOG_LEVEL: "trace" },
    });
    cleanups.push(() => tools.stop());
    const base = mkdtempSync(join(tmpdir(), "slotpool-logs-"));
    chmodSync(base, 0o755);
    const exec = await startCliServer(
      ["executor-server", "--port", "0", "--provisioner", "local", "--slots-per-container", "2", "--min-containers", "1", "--max-containers", "1", "--data-dir", join(base, "data"), "--tool-server-url", tools.url],
      { env: { TOOL_EXECUTOR_TOKEN: EXEC_TOKEN, TOOL_EXECUTOR_TOOL_SERVER_TOKEN: TOOL_TOKEN, SLOTPOOL_LOG_LEVEL: "trace" }, startTimeoutMs: 60_000 },
    );
    cleanups.push(async () => {
      await exec.stop(15_000);
      rmSync(base, { recursive: true, force: true });
    });
    for (const auth of [undefined, "Bearer nope", `Bearer ${EXEC_TOKEN}x`]) expect(await hit(exec.url, "/status", auth)).toBeGreaterThanOrEqual(401);
    const ok = `Bearer ${EXEC_TOKEN}`;
    expect(await hit(exec.url, "/execute", ok, { trajectory_id: "log-1", tool: { name: "bash", arguments: { command: "echo hi" } } })).toBe(200);
    expect(await hit(exec.url, "/execute", ok, { trajectory_id: "log-1", tool: { name: "lookup_weather", arguments: { city: "Oslo" } } })).toBe(200);
    expect(await hit(tools.url, "/execute", `Bearer ${TOOL_TOKEN}z`, { tool: { name: "lookup_weather", arguments: { city: "Oslo" } } })).toBe(403);
    expect(await hit(exec.url, "/release", ok, { trajectory_id: "log-1", reset_workspace: true })).toBe(200);
    const status = await fetch(`${exec.url}/status`, { headers: { authorization: ok } }).then((r) => r.text());
    await exec.stop(15_000);
    await tools.stop();
    const out = exec.output() + tools.output() + status;
    expect(exec.logs.length).toBeGreaterThan(3);
    for (const secret of [EXEC_TOKEN, TOOL_TOKEN, API_KEY]) expect(out).not.toContain(secret);
    // The per-container sandbox tokens (random) are not logged either.
    expect(out).not.toMatch(/"token":"[^"[]/);
  }, 90_000);

  it("'slotpool jobs prune' with NOMAD_TOKEN, accepted and denied", async () => {
    const nomad: NomadEmulator = await startNomadEmulator({ token: NOMAD_TOKEN });
    cleanups.push(() => nomad.stop());
    const { command, args } = slotpoolCommand();
    const run = (token: string) =>
      within(
        30_000,
        "jobs prune",
        new Promise<string>((resolveOut) => {
          const child = spawn(command, [...args, "jobs", "prune", "--dry-run"], { env: { ...process.env, NOMAD_ADDR: nomad.address, NOMAD_TOKEN: token, SLOTPOOL_LOG_LEVEL: "trace" } });
          let out = "";
          child.stdout.on("data", (d: Buffer) => (out += d.toString()));
          child.stderr.on("data", (d: Buffer) => (out += d.toString()));
          child.once("exit", (code) => resolveOut(`${out}\nexit ${code}`));
        }),
      );
    const accepted = await run(NOMAD_TOKEN);
    const denied = await run(`${NOMAD_TOKEN}-wrong`);
    expect(accepted).toMatch(/exit 0/);
    expect(denied).toMatch(/denied|403|ACL/i);
    expect(accepted + denied).not.toContain(NOMAD_TOKEN);
  }, 60_000);
});

describe("log lines about a call carry the trajectory id, the slot and the allocation", () => {
  let exec: CliServer;
  let base: string;
  beforeAll(async () => {
    base = mkdtempSync(join(tmpdir(), "slotpool-logs2-"));
    chmodSync(base, 0o755);
    exec = await startCliServer(["executor-server", "--port", "0", "--provisioner", "local", "--slots-per-container", "2", "--min-containers", "1", "--max-containers", "1", "--data-dir", join(base, "data")], {
      env: { SLOTPOOL_LOG_LEVEL: "debug" },
      startTimeoutMs: 60_000,
    });
  }, 90_000);
  afterAll(async () => {
    await exec?.stop(15_000);
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it("every executor log line naming a trajectory also names its slot and allocation, and each call is logged", async () => {
    const post = (path: string, body: unknown) => fetch(exec.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json());
    // One plain call, one failing call, one where the model tried to set a isolation argument.
    await post("/execute", { trajectory_id: "traj-logs-a", tool: { name: "bash", arguments: { command: "echo a" } } });
    await post("/execute", { trajectory_id: "traj-logs-a", tool: { name: "bash", arguments: { command: "exit 4" } } });
    await post("/execute", { trajectory_id: "traj-logs-b", tool: { name: "bash", arguments: { command: "echo b", allow_network: true } } });
    await post("/release", { trajectory_id: "traj-logs-a", reset_workspace: true });
    await post("/release", { trajectory_id: "traj-logs-b", reset_workspace: true });
    // The service's lines come through its stderr pipe: wait until both trajectories' have arrived.
    for (let i = 0; i < 1200 && !["traj-logs-a", "traj-logs-b"].every((t) => exec.logs.some((l) => l.includes(t))); i++) await new Promise((r) => setTimeout(r, 50));
    const lines = exec.logs.map((l) => {
      try {
        return JSON.parse(l) as Record<string, unknown>;
      } catch {
        return null;
      }
    });
    const aboutCalls = lines.filter((l): l is Record<string, unknown> => !!l && JSON.stringify(l).includes("traj-logs-"));
    console.log("executor log lines naming a trajectory:\n" + aboutCalls.map((l) => JSON.stringify(l)).join("\n"));
    for (const t of ["traj-logs-a", "traj-logs-b"]) expect(aboutCalls.some((l) => JSON.stringify(l).includes(t)), `no log line about ${t}'s calls`).toBe(true);
    for (const l of aboutCalls) {
      const text = JSON.stringify(l);
      expect(text, `line without a slot: ${text}`).toMatch(/"slot(Id|_id|Key)?":"[^"]*slot_\d+/);
      expect(text, `line without an allocation/container: ${text}`).toMatch(/"(allocation|containerId|alloc|container|containerId)":"[^"]+"|"slot":"[^"/]+\/slot_\d+"/);
    }
  }, 60_000);
});
