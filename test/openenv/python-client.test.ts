/**
 * The server driven by the real OpenEnv Python client (the `openenv` package, pinned in
 * test/python/requirements.txt; scripts/setup-python.sh installs it into .build/python):
 * its GenericEnvClient and MCPToolClient, then the runnable example of docs/trainers.md
 * against `slotpool openenv-server` started as a user starts it. Skips, saying why, where the
 * client could not be installed (no package index).
 */
import { spawn, type ChildProcess } from "node:child_process";
import { execFile } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pythonClients } from "../support/python-clients.js";
import { startOpenEnv, type OpenEnvHarness } from "./support.js";

const run = promisify(execFile);
const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const CHECKS = fileURLToPath(new URL("./python/openenv_checks.py", import.meta.url));
const EXAMPLE = fileURLToPath(new URL("../../examples/openenv-client/solve_shell_task.py", import.meta.url));
const py = pythonClients();

async function checks(url: string, ...names: string[]): Promise<Record<string, Record<string, any>>> {
  const { stdout } = await run(py.python!, [CHECKS, url, ...names], { timeout: 400_000 });
  const out: Record<string, Record<string, any>> = {};
  for (const line of stdout.trim().split("\n")) {
    const r = JSON.parse(line) as Record<string, any>;
    out[r["check"]] = r;
  }
  return out;
}

describe.skipIf(py.python === null)(`the real OpenEnv Python client${py.reason ? ` (skipped: ${py.reason})` : ""}`, () => {
  let h: OpenEnvHarness;
  // One Python process runs every check: importing the client takes tens of seconds on a loaded box.
  let r: Record<string, Record<string, any>>;
  beforeAll(async () => {
    h = await startOpenEnv({ slots: 2, acquireTimeoutMs: 1_500 });
    r = await checks(h.url, "generic_solved", "generic_wrong", "bad_message", "mcp_tool_client", "isolated", "capacity", "validate");
  }, 500_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("GenericEnvClient: solved by scripted tool calls gets reward 1, a wrong answer 0, state counts steps", async () => {
    expect(r["generic_solved"]).toEqual(expect.objectContaining({ ok: true, output: "release 0 approved", step_count: 1, done: true, reward: 1 }));
    expect(r["generic_solved"]!["task"]).toContain("notes/day-0.txt");
    expect(r["generic_wrong"]).toEqual(expect.objectContaining({ ok: true, done: true, reward: 0 }));
  });

  it("a bad message raises the server's VALIDATION_ERROR in the client and the session lives on", async () => {
    expect(r["bad_message"]).toEqual(expect.objectContaining({ ok: true, after: "alive", step_count: 1 }));
    expect(r["bad_message"]!["error"]).toMatch(/VALIDATION_ERROR/);
  });

  it("MCPToolClient: list_tools gives the JSON Schemas, call_tool returns the output, submit the reward", async () => {
    const m = r["mcp_tool_client"]!;
    expect(m).toEqual(expect.objectContaining({ ok: true, output: "written", done: true, reward: 1, step_count: 2 }));
    expect(m["tools"]).toEqual(expect.arrayContaining(["bash", "read_file", "write_file", "submit"]));
    expect(m["bash_schema"].properties.command.type).toBe("string");
  });

  it("OpenEnv's own runtime checks (`openenv validate URL`) pass: health, metadata, schema, MCP, OpenAPI version and the simulation mode's routes", async () => {
    expect(r["validate"]).toEqual(expect.objectContaining({ ok: true, exit_code: 0, passed: true, failed: [], mode: "simulation", profile: "openenv-http/1.x" }));
    expect(r["validate"]!["criteria"]).toEqual(expect.arrayContaining(["health_endpoint", "metadata_endpoint", "schema_endpoint", "mcp_endpoint", "openapi_version_available", "mode_endpoint_consistency"]));
  });

  it("two concurrent episodes are isolated; a third beyond capacity gets CAPACITY_REACHED, and is served once a session closes", async () => {
    expect(r["isolated"]).toEqual(expect.objectContaining({ ok: true, b_sees: expect.stringMatching(/No such file/) }));
    expect(r["capacity"]).toEqual(expect.objectContaining({ ok: true, served_after_close: true }));
    expect(r["capacity"]!["error"]).toMatch(/CAPACITY_REACHED/);
  });
});

describe.skipIf(py.python === null)(`the real OpenEnv Python client and a lost slot${py.reason ? ` (skipped: ${py.reason})` : ""}`, () => {
  let h: OpenEnvHarness;
  beforeAll(async () => {
    h = await startOpenEnv({ slots: 2 });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("a slot lost mid-episode raises the server's EXECUTION_ERROR saying infrastructure failure, no reward; the session lives on", async () => {
    const child = spawn(py.python!, [CHECKS, h.url, "lost_slot"], { stdio: ["pipe", "pipe", "pipe"] });
    let stderr = "";
    child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    const lines = createInterface({ input: child.stdout! });
    const results: Array<Record<string, any>> = [];
    const finished = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    for await (const line of lines) {
      const r = JSON.parse(line) as Record<string, any>;
      results.push(r);
      if (r["phase"] === "ready") {
        // The episode is running in its slot: crash every sandbox server, as lost containers.
        h.killContainers();
        child.stdin!.write("go\n");
      }
    }
    await finished;
    const r = results.find((x) => x["phase"] === undefined);
    expect(r, stderr).toEqual(expect.objectContaining({ ok: true, done: true, reward: null, after_reset: true }));
    expect(r!["error"]).toMatch(/infrastructure failure \(slot_lost\).*no reward.*code: EXECUTION_ERROR/);
  }, 400_000);
});

describe.skipIf(py.python === null)(`examples/openenv-client against \`slotpool openenv-server\`${py.reason ? ` (skipped: ${py.reason})` : ""}`, () => {
  let server: ChildProcess | undefined;
  let url = "";
  beforeAll(async () => {
    server = spawn(process.execPath, [`${ROOT}dist/src/cli/main.js`, "openenv-server", "examples/shell-tasks/env.js", "--port", "0", "--slots-per-container", "2", "--max-containers", "1"], { cwd: ROOT, stdio: ["ignore", "ignore", "pipe"] });
    // The server logs JSON lines to stderr; the 'listening' one holds its URL.
    const lines = createInterface({ input: server.stderr! });
    url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("openenv-server did not log 'listening' within 90 s")), 90_000);
      lines.on("line", (line) => {
        const m = /"url":"(http:\/\/[^"]+)"/.exec(line);
        if (m && line.includes("listening")) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
      server!.once("exit", (code) => reject(new Error(`openenv-server exited with ${code}`)));
    });
  }, 150_000);
  afterAll(async () => {
    if (server && server.exitCode === null) {
      const exited = new Promise((r) => server!.once("exit", r));
      server.kill("SIGTERM");
      await exited;
    }
  });

  it("the runnable example solves an episode (reward 1) and, told to answer wrong, gets 0", async () => {
    const right = await run(py.python!, [EXAMPLE, url], { timeout: 300_000 });
    expect(right.stdout).toContain("tools: bash, read_file, write_file, submit");
    expect(right.stdout).toContain("steps so far: 1");
    expect(right.stdout.trim().split("\n").pop()).toBe('{"done": true, "reward": 1}');
    const wrong = await run(py.python!, [EXAMPLE, url, "--wrong"], { timeout: 300_000 });
    expect(wrong.stdout.trim().split("\n").pop()).toBe('{"done": true, "reward": 0}');
    const health = await fetch(`${url}/health`);
    expect(await health.json()).toEqual({ status: "healthy" });
  }, 650_000);
});
