import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { request } from "undici";
import { loadToolModule, ToolModuleError } from "../../src/executor/external-tool.js";
import { ToolServer } from "../../src/executor/tool-server.js";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { testTools, type SleepProbe } from "./support/echo-tools.js";

const TOKEN = "tool-server-test-token";
const EXAMPLE = new URL("../../examples/tool-server/weather-tools.mjs", import.meta.url).pathname;

async function call(url: string, method: string, path: string, body?: unknown, token: string | null = TOKEN) {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (token) headers["authorization"] = `Bearer ${token}`;
  const res = await request(`${url}${path}`, { method: method as "GET", headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.body.text();
  return { status: res.statusCode, body: text ? (JSON.parse(text) as Record<string, any>) : undefined };
}

describe("ToolServer", () => {
  const probe: SleepProbe = { running: 0, peak: 0 };
  let server: ToolServer;
  let url: string;

  beforeAll(async () => {
    process.env["WEATHER_API_KEY"] = "test-weather-key";
    const example = await loadToolModule(EXAMPLE);
    server = new ToolServer({ tools: [...example, ...testTools(probe)], token: TOKEN, maxConcurrency: 2 });
    url = await server.listen(0, "127.0.0.1");
  });
  afterAll(async () => {
    await server.close();
    delete process.env["WEATHER_API_KEY"];
  });

  it("answers /health without a token", async () => {
    const r = await call(url, "GET", "/health", undefined, null);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ status: "ok", tools: 5 });
  });

  it("requires the bearer token: none → 401, wrong → 403", async () => {
    expect((await call(url, "GET", "/tools", undefined, null)).status).toBe(401);
    expect((await call(url, "GET", "/tools", undefined, "nope")).status).toBe(403);
    const bad = await call(url, "POST", "/execute", { tool: { name: "unit_convert", arguments: { value: 1, to: "celsius" } } }, "nope");
    expect(bad.status).toBe(403);
    expect(bad.body!["error"]).toMatch(/invalid token/);
  });

  it("lists the external tools as OpenAI schemas", async () => {
    const r = await call(url, "GET", "/tools");
    expect(r.status).toBe(200);
    const names = (r.body!["tools"] as Array<{ function: { name: string } }>).map((t) => t.function.name);
    expect(names).toEqual(["lookup_weather", "unit_convert", "echo_context", "slow", "explode"]);
    const weather = (r.body!["tools"] as Array<{ function: { name: string; parameters: Record<string, unknown> } }>)[0]!;
    expect(weather.function.parameters["required"]).toEqual(["city"]);
  });

  it("runs a tool with the credential from its own environment", async () => {
    const r = await call(url, "POST", "/execute", { trajectory_id: "t1", tool: { name: "lookup_weather", arguments: { city: "Oslo" }, uniq_id: "u1" } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ success: true, uniq_id: "u1", metadata: { city: "Oslo", days_ahead: 0 } });
    expect(r.body!["output"]).toMatch(/^Oslo, today: \w+, -?\d+ °C$/);
  });

  it("passes trajectory id, slot id and container address to the tool", async () => {
    const r = await call(url, "POST", "/execute", { trajectory_id: "t9", slot_id: "slot_3", container_addr: "http://10.0.0.1:1", tool: { name: "echo_context", arguments: { text: "hi" } } });
    expect(r.body).toMatchObject({ success: true, output: "hi", metadata: { trajectory_id: "t9", slot_id: "slot_3", container_addr: "http://10.0.0.1:1" } });
  });

  it("returns clear error results for unknown tools, bad arguments and failures", async () => {
    const unknown = await call(url, "POST", "/execute", { tool: { name: "web_search", arguments: {} } });
    expect(unknown.body).toMatchObject({ success: false });
    expect(unknown.body!["error"]).toMatch(/unknown tool 'web_search'; available tools: lookup_weather/);
    const bad = await call(url, "POST", "/execute", { tool: { name: "unit_convert", arguments: { value: "hot", to: "kelvin" } } });
    expect(bad.body!["error"]).toMatch(/invalid arguments for tool 'unit_convert': value: .*; to: /);
    const boom = await call(url, "POST", "/execute", { tool: { name: "explode", arguments: {} } });
    expect(boom.body).toMatchObject({ success: false, error: "tool 'explode' failed: kaboom" });
    const malformed = await call(url, "POST", "/execute", { tool: { arguments: {} } });
    expect(malformed.status).toBe(400);
    expect(malformed.body!["error"]).toMatch(/tool\.name/);
  });

  it("never runs more than maxConcurrency calls at once", async () => {
    probe.peak = 0;
    const t0 = performance.now();
    const rs = await Promise.all(Array.from({ length: 6 }, () => call(url, "POST", "/execute", { tool: { name: "slow", arguments: { ms: 150 } } })));
    expect(rs.every((r) => r.body!["success"] === true)).toBe(true);
    expect(probe.peak).toBe(2);
    expect(performance.now() - t0).toBeGreaterThanOrEqual(3 * 150 - 20);
  });

  it("times a call out after timeout_s", async () => {
    const r = await call(url, "POST", "/execute", { tool: { name: "slow", arguments: { ms: 5000 } }, timeout_s: 1 });
    expect(r.body).toMatchObject({ success: false, metadata: { timeout: true } });
    expect(r.body!["error"]).toMatch(/did not finish within 1 s/);
  });

  it("rejects a module without a default-exported array", async () => {
    await expect(loadToolModule(new URL("./support/direct-slot-pool.ts", import.meta.url).pathname)).rejects.toThrow(ToolModuleError);
  });
});

describe("slotpool tool-server (CLI)", () => {
  it("serves the example module and never logs the API key", async () => {
    const { command, args } = slotpoolCommand();
    const child = spawn(command, [...args, "tool-server", "--port", "0", "--tools", EXAMPLE, "--max-concurrency", "4"], {
      env: { ...process.env, WEATHER_API_KEY: "super-secret-weather-key", TOOL_SERVER_TOKEN: TOKEN, SLOTPOOL_LOG_LEVEL: "debug" },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let logs = "";
    try {
      const url = await new Promise<string>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no listening line: ${logs}`)), 15_000);
        child.stderr.on("data", (d: Buffer) => {
          logs += d.toString();
          const m = /"msg":"listening"/.test(logs) && /"url":"([^"]+)"/.exec(logs);
          if (m) {
            clearTimeout(timer);
            resolve(m[1]!);
          }
        });
        child.once("exit", (code) => reject(new Error(`exited ${code}: ${logs}`)));
      });
      const r = await call(url, "POST", "/execute", { tool: { name: "lookup_weather", arguments: { city: "Lima", days_ahead: 2 } } });
      expect(r.body).toMatchObject({ success: true, metadata: { city: "Lima", days_ahead: 2 } });
      expect((await call(url, "GET", "/tools", undefined, null)).status).toBe(401);
    } finally {
      child.kill("SIGTERM");
      await new Promise((r) => child.once("exit", r));
    }
    expect(logs).toContain('"msg":"tool call"');
    expect(logs).not.toContain("super-secret-weather-key");
  });
});
