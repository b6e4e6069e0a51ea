/**
 * `slotpool openenv-server ENV` as a user runs it: the pool flags reach the env's pool, a token
 * guards every route but /health (the WebSocket too), the Nomad provisioner works as in the
 * other servers (here on the repository's Nomad API emulator), SIGTERM ends every episode;
 * mistakes in the command line are usage errors naming the problem.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import WebSocket from "ws";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { startNomadEmulator } from "../support/nomad-emulator.js";
import { SOLVE_SEED_0 } from "./support.js";
import { startServerCli } from "../support/server-cli.js";

function startCli(extra: string[], env: NodeJS.ProcessEnv = {}) {
  return startServerCli("openenv-server", ["examples/shell-tasks/env.js", "--port", "0", ...extra], env, 90_000);
}

function wsFrames(url: string, headers: Record<string, string>, messages: unknown[]): Promise<Array<Record<string, any>>> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    const frames: Array<Record<string, any>> = [];
    ws.once("error", reject);
    ws.once("unexpected-response", (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
    ws.once("open", () => ws.send(JSON.stringify(messages[0])));
    ws.on("message", (d) => {
      frames.push(JSON.parse(d.toString()) as Record<string, any>);
      if (frames.length < messages.length) ws.send(JSON.stringify(messages[frames.length]));
      else ws.close();
    });
    ws.once("close", () => resolve(frames));
  });
}

describe("slotpool openenv-server (CLI, local provisioner)", () => {
  it("serves the env with the pool flags and a token; SIGTERM stops it cleanly", async () => {
    const srv = startCli(["--slots-per-container", "2", "--max-containers", "1", "--acquire-timeout-ms", "2000", "--token", "sekrit"]);
    try {
      const url = await srv.url;
      expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: "healthy" });
      expect((await fetch(`${url}/metadata`)).status).toBe(401);
      const meta = await fetch(`${url}/metadata`, { headers: { authorization: "Bearer sekrit" } });
      expect(((await meta.json()) as { name: string }).name).toBe("shell-tasks");
      const wsUrl = `${url.replace(/^http/, "ws")}/ws`;
      await expect(wsFrames(wsUrl, {}, [{ type: "state" }])).rejects.toThrow(/HTTP 401/);
      const frames = await wsFrames(wsUrl, { authorization: "Bearer sekrit" }, [{ type: "reset", data: { seed: 0 } }, { type: "state" }]);
      expect(frames[0]!["data"].observation.task).toContain("notes/day-0.txt");
      expect(frames[1]!["data"]).toEqual(expect.objectContaining({ step_count: 0, done: false }));
    } finally {
      srv.child.kill("SIGTERM");
    }
    expect(await srv.exited).toBe(0);
    expect(srv.state.logs).toContain('"msg":"stopped"');
  }, 150_000);

  it("command-line mistakes are usage errors (exit 2) naming the problem", () => {
    const { command, args } = slotpoolCommand();
    const cli = (...a: string[]) => spawnSync(command, [...args, "openenv-server", ...a], { encoding: "utf8", timeout: 60_000 });
    const noEnv = cli();
    expect(noEnv.status).toBe(2);
    expect(noEnv.stderr).toContain("missing ENV");
    const exposed = cli("examples/shell-tasks/env.js", "--host", "0.0.0.0");
    expect(exposed.status).toBe(2);
    expect(exposed.stderr).toMatch(/listens beyond loopback, so it needs a token/);
    const badFlag = cli("examples/shell-tasks/env.js", "--slots-per-container", "zero");
    expect(badFlag.status).toBe(2);
    expect(badFlag.stderr).toContain("--slots-per-container");
    const help = cli("--help");
    expect(help.status).toBe(0);
    expect(help.stdout).toContain("usage: slotpool openenv-server ENV");
    expect(help.stdout).toContain("--model-url-allow PREFIX");
    const badAllow = cli("examples/shell-tasks/env.js", "--model-url-allow", "ftp://x/v1");
    expect(badAllow.status).toBe(2);
    expect(badAllow.stderr).toMatch(/--model-url-allow ftp:\/\/x\/v1: only http and https/);
    const shortSecret = cli("examples/shell-tasks/env.js", "--episode-secret", "short");
    expect(shortSecret.status).toBe(2);
    expect(shortSecret.stderr).toContain("--episode-secret must be at least 16 characters");
  }, 120_000);

  it("the server's bounds come from the flags and the --config file's openenv section (flags win)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "openenv-cli-"));
    const config = join(dir, "config.json");
    writeFileSync(config, JSON.stringify({ maxTurns: 5, openenv: { maxSeed: 3, modelUrlAllow: ["http://127.0.0.1:9/v1"] } }));
    const srv = startCli(["--slots-per-container", "1", "--max-containers", "1", "--config", config, "--model-url-allow", "http://127.0.0.1:7/v1"]);
    try {
      const url = await srv.url;
      expect(srv.state.logs).toContain('"run_model_urls":["http://127.0.0.1:7/v1"]');
      const post = (path: string, body: unknown) => fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      const far = await post("/reset", { seed: 4 });
      expect(far.status).toBe(422);
      expect(((await far.json()) as { error: string }).error).toMatch(/from 0 to 3/);
      const refused = await post("/run", { seed: 0, model: { base_url: "http://127.0.0.1:9/v1", model: "m" } });
      expect(refused.status).toBe(403);
    } finally {
      srv.child.kill("SIGTERM");
      await srv.exited;
      rmSync(dir, { recursive: true, force: true });
    }
  }, 150_000);
});

describe("slotpool openenv-server (CLI, Nomad provisioner on the Nomad API emulator)", () => {
  it("runs episodes in allocations of the sandbox job: solved gets reward 1, wrong 0; SIGTERM ends them and purges the job", async () => {
    const nomad = await startNomadEmulator();
    const jobId = `openenv-test-${process.pid}`;
    const srv = startCli(["--provisioner", "nomad", "--job-id", jobId, "--slots-per-container", "2", "--min-containers", "1", "--max-containers", "1", "--acquire-timeout-ms", "60000"], { NOMAD_ADDR: nomad.address });
    try {
      const url = await srv.url;
      expect(srv.state.logs).toMatch(/"provisioner":"nomad".*"msg":"listening"/);
      const wsUrl = `${url.replace(/^http/, "ws")}/ws`;
      const step = (tool: string, args: Record<string, unknown> = {}) => ({ type: "step", data: { type: "call_tool", tool_name: tool, arguments: args } });
      const solved = await wsFrames(wsUrl, {}, [{ type: "reset", data: { seed: 0 } }, step("bash", { command: `${SOLVE_SEED_0} && hostname` }), { type: "state" }, step("submit")]);
      expect(solved[0]!["data"].observation.task).toContain("notes/day-0.txt");
      expect(solved[1]!["data"].observation.result.structured_content.exit_code).toBe(0);
      expect(solved[2]!["data"]).toEqual(expect.objectContaining({ step_count: 1, done: false }));
      expect(solved[3]!["data"]).toEqual(expect.objectContaining({ done: true, reward: 1 }));
      const wrong = await wsFrames(wsUrl, {}, [{ type: "reset", data: { seed: 0 } }, step("submit")]);
      expect(wrong[1]!["data"]).toEqual(expect.objectContaining({ done: true, reward: 0 }));
      // The slots were the job's: its allocation runs the sandbox server the episodes used.
      const allocs = nomad.allocations(jobId);
      expect(allocs.length).toBeGreaterThanOrEqual(1);
      const state = (await (await fetch(`${url}/state`)).json()) as Record<string, unknown>;
      expect(state).toEqual(expect.objectContaining({ active_episodes: 0, sessions: 0 }));
      srv.child.kill("SIGTERM");
      expect(await srv.exited).toBe(0);
      expect(srv.state.logs).toContain('"msg":"stopped"');
      expect(nomad.requests.some((q) => q.method === "DELETE" && q.path.startsWith(`/v1/job/${jobId}`))).toBe(true);
    } finally {
      if (srv.child.exitCode === null) srv.child.kill("SIGKILL");
      await nomad.stop();
    }
  }, 180_000);
});
