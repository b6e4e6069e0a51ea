/**
 * `slotpool openenv-server ENV` as a user runs it: the pool flags reach the env's pool, a token
 * guards every route but /health (the WebSocket too), SIGTERM ends every episode; mistakes in
 * the command line are usage errors naming the problem.
 */
import { spawn, spawnSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import WebSocket from "ws";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";

function startCli(extra: string[]) {
  const { command, args } = slotpoolCommand();
  const child = spawn(command, [...args, "openenv-server", "examples/shell-tasks/env.js", "--port", "0", ...extra], { stdio: ["ignore", "pipe", "pipe"] });
  const state = { logs: "" };
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const url = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line within 90 s:\n${state.logs}`)), 90_000);
    const onData = (d: Buffer) => {
      state.logs += d.toString();
      for (const line of state.logs.split("\n")) {
        if (!line.includes('"msg":"listening"') || !line.includes('"name":"openenv-server"')) continue;
        clearTimeout(timer);
        resolve((JSON.parse(line) as { url: string }).url);
      }
    };
    child.stderr.on("data", onData);
    child.stdout.on("data", onData);
    void exited.then((code) => reject(new Error(`exited ${code}:\n${state.logs}`)));
  });
  return { child, state, exited, url };
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
  }, 120_000);
});
