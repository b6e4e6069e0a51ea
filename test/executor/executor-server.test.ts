import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { request } from "undici";
import { ExecutorServer } from "../../src/executor/executor-server.js";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { MetricsRegistry } from "../../src/observability/metrics.js";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { startNomadEmulator } from "../support/nomad-emulator.js";
import { DirectSlotPool } from "./support/direct-slot-pool.js";
import { startSandboxes, type Sandboxes } from "./support/sandboxes.js";

const TOKEN = "executor-test-token";

/** Sends a raw JSON text, as the original's Python client (pydantic model_dump → httpx) does. */
async function send(url: string, method: string, path: string, raw?: string, token: string | null = TOKEN) {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (token) headers["authorization"] = `Bearer ${token}`;
  const res = await request(`${url}${path}`, { method: method as "GET", headers, body: raw });
  const text = await res.body.text();
  let body: any;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.statusCode, body, contentType: String(res.headers["content-type"] ?? "") };
}

describe("executor service routes", () => {
  let sandboxes: Sandboxes;
  let pool: DirectSlotPool;
  let executor: ToolExecutor;
  let server: ExecutorServer;
  let url: string;

  beforeAll(async () => {
    sandboxes = await startSandboxes(1, 4);
    pool = new DirectSlotPool(sandboxes.containers);
    const metrics = new MetricsRegistry();
    executor = new ToolExecutor({ pool, metrics, config: { batchWindowMs: 1 } });
    await executor.start();
    server = new ExecutorServer({ executor, pool, token: TOKEN, metrics });
    url = await server.listen(0, "127.0.0.1");
  });
  afterAll(async () => {
    await server?.close();
    await executor?.close();
    await pool?.stop();
    await sandboxes?.stop();
  });

  it("answers /health without a token and guards the rest: none → 401, wrong → 403", async () => {
    expect(await send(url, "GET", "/health", undefined, null)).toMatchObject({ status: 200, body: { status: "ok" } });
    const body = JSON.stringify({ trajectory_id: "x", tool: { name: "bash", arguments: { command: "true" } } });
    expect((await send(url, "POST", "/execute", body, null)).status).toBe(401);
    expect((await send(url, "POST", "/execute", body, "wrong")).status).toBe(403);
    expect((await send(url, "GET", "/status", undefined, null)).status).toBe(401);
    expect((await send(url, "POST", "/release", JSON.stringify({ trajectory_id: "x" }), "wrong")).status).toBe(403);
  });

  it("speaks the original's JSON: execute (nulls, alias, uniq_id), artifacts, release", async () => {
    const exec = await send(
      url,
      "POST",
      "/execute",
      '{"trajectory_id": "py-1", "tool": {"name": "terminal", "arguments": {"command": "echo hello > out.txt && cat out.txt"}, "uniq_id": "call-7"}, "timeout_s": null}',
    );
    expect(exec.status).toBe(200);
    expect(exec.body).toMatchObject({ success: true, output: "hello", error: "", uniq_id: "call-7" });
    expect(exec.body.metadata.exit_code).toBe(0);

    const read = await send(url, "POST", "/artifacts/read", '{"trajectory_id": "py-1", "path": "out.txt", "encoding": "text", "max_bytes": null, "include_sha256": true}');
    expect(read.body).toMatchObject({ success: true, content: "hello\n", path: "out.txt" });
    expect(read.body.sha256).toMatch(/^[0-9a-f]{64}$/);
    const list = await send(url, "POST", "/artifacts/list", '{"trajectory_id": "py-1", "path": ".", "recursive": false, "max_entries": null}');
    expect(list.body.entries.map((e: { path: string }) => e.path)).toContain("out.txt");
    const archive = await send(url, "POST", "/artifacts/archive", '{"trajectory_id": "py-1", "path": ".", "format": "tar.gz", "max_bytes": null, "max_entries": null}');
    expect(archive.body).toMatchObject({ success: true, encoding: "base64", format: "tar.gz" });

    const rel = await send(url, "POST", "/release", '{"trajectory_id": "py-1", "reset_workspace": true}');
    expect(rel).toMatchObject({ status: 200, body: { status: "ok" } });
    expect(pool.releases.at(-1)).toMatchObject({ reset: true });
    const gone = await send(url, "POST", "/artifacts/read", '{"trajectory_id": "py-1", "path": "out.txt"}');
    expect(gone.body).toMatchObject({ success: false });
    expect(gone.body.error).toMatch(/holds no slot/);
  });

  it("serves a Python client written like the original's (stdlib, pydantic-style bodies)", async () => {
    const script = new URL("./support/original_client.py", import.meta.url).pathname;
    const out = await new Promise<string>((resolve, reject) => {
      const py = spawn("python3", [script, url, TOKEN], { stdio: ["ignore", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      py.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
      py.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      py.once("exit", (code) => (code === 0 ? resolve(stdout) : reject(new Error(`python exited ${code}: ${stderr}`))));
    });
    const seen = JSON.parse(out) as Record<string, [number, any]>;
    expect(seen["write"]).toEqual([200, expect.objectContaining({ success: true, uniq_id: "u-1" })]);
    expect(seen["terminal"]![1]).toMatchObject({ success: true, output: "hi from python\nhello.txt", uniq_id: "u-2" });
    expect(seen["read"]![1]).toMatchObject({ success: true, content: "hi from python" });
    expect(seen["list"]![1].entries.map((e: { path: string }) => e.path)).toContain("notes/hello.txt");
    expect(seen["archive"]![1]).toMatchObject({ success: true, format: "tar.gz" });
    expect(seen["status"]![1]).toHaveProperty("queue_size");
    expect(seen["status"]![1]).toHaveProperty("total_requests");
    expect(seen["release"]).toEqual([200, { status: "ok" }]);
  });

  it("applies timeout_s to the call", async () => {
    const t0 = performance.now();
    const r = await send(url, "POST", "/execute", JSON.stringify({ trajectory_id: "to-1", tool: { name: "bash", arguments: { command: "sleep 20" } }, timeout_s: 1 }));
    expect(r.body.success).toBe(false);
    expect(r.body.metadata.timeout).toBe(true);
    // bound: cut at its 1 s timeout, not after the command's 20 s: 10 s leaves a loaded box 9 s.
    expect(performance.now() - t0).toBeLessThan(10_000);
    await send(url, "POST", "/release", JSON.stringify({ trajectory_id: "to-1", reset_workspace: true }));
  });

  it("accepts OpenAI-style string arguments (the JSON text of an object) as well as objects; text that is not a JSON object is a 400 naming arguments", async () => {
    const r = await send(url, "POST", "/execute", JSON.stringify({ trajectory_id: "oa-1", tool: { name: "bash", arguments: JSON.stringify({ command: "echo from-openai" }) } }));
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ success: true, output: "from-openai" });
    const bad = await send(url, "POST", "/execute", JSON.stringify({ trajectory_id: "oa-1", tool: { name: "bash", arguments: "command: ls" } }));
    expect(bad.status).toBe(400);
    expect(bad.body.error).toMatch(/arguments is text that is not a JSON object/);
    expect(String(bad.body.field)).toContain("arguments");
    await send(url, "POST", "/release", JSON.stringify({ trajectory_id: "oa-1" }));
  });

  it("returns tool-level failures as results, and bad bodies as 400 naming the field", async () => {
    const unknown = await send(url, "POST", "/execute", JSON.stringify({ trajectory_id: "e-1", tool: { name: "nope", arguments: {} } }));
    expect(unknown.status).toBe(200);
    expect(unknown.body.error).toMatch(/unknown tool 'nope'/);
    const bad = await send(url, "POST", "/execute", JSON.stringify({ trajectory_id: "", tool: { name: "bash" } }));
    expect(bad.status).toBe(400);
    expect(bad.body).toMatchObject({ field: "trajectory_id" });
    expect(bad.body.error).toMatch(/trajectory_id must not be empty/);
    expect((await send(url, "POST", "/execute", "{not json")).status).toBe(400);
    expect((await send(url, "GET", "/execute")).status).toBe(405);
    expect((await send(url, "GET", "/nowhere")).status).toBe(404);
  });

  it("reports status with the original's keys and pool counts, and Prometheus metrics", async () => {
    const s = await send(url, "GET", "/status");
    expect(s.status).toBe(200);
    expect(s.body).toMatchObject({ queue_size: 0, in_flight: 0 });
    expect(s.body.total_requests).toBeGreaterThanOrEqual(3);
    expect(s.body.total_errors).toBeGreaterThanOrEqual(2);
    expect(s.body.pool.slots.total).toBe(4);
    expect(s.body.latency_ms.count).toBe(s.body.total_requests);
    const m = await send(url, "GET", "/metrics");
    expect(m.contentType).toMatch(/^text\/plain; version=0\.0\.4/);
    expect(m.body).toMatch(/slotpool_executor_calls_total\{kind="sandbox",tool="bash"\} \d+/);
    expect(m.body).toMatch(/slotpool_executor_call_duration_seconds_bucket\{kind="sandbox",le="0\.1"\} \d+/);
  });
});

/** Starts `slotpool executor-server` and resolves with its URL from the "listening" log line. */
function startExecutorServer(extraArgs: string[], env: NodeJS.ProcessEnv = {}) {
  const { command, args } = slotpoolCommand();
  const child = spawn(command, [...args, "executor-server", "--port", "0", ...extraArgs], {
    env: { ...process.env, TOOL_EXECUTOR_TOKEN: TOKEN, ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const state = { logs: "" };
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const url = new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no listening line within 40 s:\n${state.logs}`)), 40_000);
    child.stderr.on("data", (d: Buffer) => {
      state.logs += d.toString();
      for (const line of state.logs.split("\n")) {
        if (!line.includes('"msg":"listening"') || !line.includes('"name":"executor-server","url"')) continue;
        clearTimeout(timer);
        resolve((JSON.parse(line) as { url: string }).url);
      }
    });
    void exited.then((code) => reject(new Error(`exited ${code}:\n${state.logs}`)));
  });
  return { child, state, exited, url };
}

describe("slotpool executor-server (CLI, Nomad provisioner on the Nomad API emulator)", () => {
  it("runs tool calls in allocations of the sandbox job and purges it on SIGTERM", async () => {
    const nomad = await startNomadEmulator();
    const jobId = `exec-test-${process.pid}`;
    const srv = startExecutorServer(["--provisioner", "nomad", "--job-id", jobId, "--slots-per-container", "2", "--min-containers", "1", "--max-containers", "1"], { NOMAD_ADDR: nomad.address });
    try {
      const url = await srv.url;
      const r = await send(url, "POST", "/execute", JSON.stringify({ trajectory_id: "nomad-1", tool: { name: "bash", arguments: { command: "echo via-nomad" } } }));
      expect(r.body).toMatchObject({ success: true, output: "via-nomad" });
      expect(nomad.allocations(jobId).length).toBeGreaterThanOrEqual(1);
      srv.child.kill("SIGTERM");
      expect(await srv.exited).toBe(0);
      expect(srv.state.logs).toContain('"msg":"stopped"');
      expect(nomad.requests.some((q) => q.method === "DELETE" && q.path.startsWith(`/v1/job/${jobId}`))).toBe(true);
    } finally {
      if (srv.child.exitCode === null) srv.child.kill("SIGKILL");
      await nomad.stop();
    }
  }, 60_000);
});

describe("slotpool executor-server (CLI, local provisioner)", () => {
  it("serves tool calls on real sandbox containers and releases every slot on SIGTERM", async () => {
    const { command, args } = slotpoolCommand();
    const child = spawn(
      command,
      [...args, "executor-server", "--port", "0", "--provisioner", "local", "--slots-per-container", "2", "--min-containers", "1", "--max-containers", "2", "--no-network"],
      { env: { ...process.env, TOOL_EXECUTOR_TOKEN: TOKEN }, stdio: ["ignore", "pipe", "pipe"] },
    );
    let logs = "";
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no listening line within 30 s:\n${logs}`)), 30_000);
        child.stderr.on("data", (d: Buffer) => {
          logs += d.toString();
          for (const line of logs.split("\n")) {
            if (!line.includes('"msg":"listening"') || !line.includes("executor-server")) continue;
            clearTimeout(timer);
            resolve((JSON.parse(line) as { url: string }).url);
          }
        });
        void exited.then((code) => reject(new Error(`exited ${code}:\n${logs}`)));
      });
      const r = await send(url, "POST", "/execute", JSON.stringify({ trajectory_id: "cli-1", tool: { name: "bash", arguments: { command: "echo from-cli; echo x > kept.txt", allow_network: true } } }));
      expect(r.body).toMatchObject({ success: true, output: "from-cli" });
      if (r.body.metadata.sandboxed) expect(r.body.metadata.network_isolated).toBe(true);
      const status = await send(url, "GET", "/status");
      expect(status.body.pool.slots.held).toBe(1);
      // a second trajectory, still running when the server is told to stop
      const pending = send(url, "POST", "/execute", JSON.stringify({ trajectory_id: "cli-2", tool: { name: "bash", arguments: { command: "sleep 30" } } }));
      // Signal once the call runs and the pool is done scaling: Node 20 can lose a SIGTERM that
      // arrives while it spawns a child (a container starting), which is not what this test is about.
      for (let i = 0; i < 100; i++) {
        const st = await send(url, "GET", "/status");
        if (st.body.in_flight === 1 && st.body.pool.containers.starting === 0) break;
        await new Promise((res) => setTimeout(res, 100));
      }
      child.kill("SIGTERM");
      const last = await pending.catch((e: Error) => ({ status: 0, body: { error: e.message } }));
      expect(last.status === 0 || last.body.success === false).toBe(true);
      expect(await exited).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill("SIGKILL");
    }
    expect(logs).toContain("shutting down: releasing every slot");
    expect(logs).toContain('"msg":"stopped"');
    expect(logs).not.toContain(TOKEN);
  }, 60_000);
});
