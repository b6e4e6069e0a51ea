import { resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fuzzServer, rssMb, send, type FuzzTarget } from "./fuzz-support.js";
import { startCliServer, type CliServer } from "./support.js";

/**
 * Bad input on every route of a real ToolServer (`slotpool tool-server` with the example
 * weather tools): 4xx with a JSON message, never 5xx, a crash or a hang; RSS bounded.
 */
const TOKEN = "tool-server-fuzz-token-51b2";
let server: CliServer;
let target: FuzzTarget;
let rssBefore = 0;

beforeAll(async () => {
  server = await startCliServer(["tool-server", "--port", "0", "--tools", resolve("examples/tool-server/weather-tools.mjs"), "--token", TOKEN, "--timeout", "5"], {
    env: { WEATHER_API_KEY: "fuzz-key" },
  });
  target = {
    name: "tool-server",
    url: server.url,
    token: TOKEN,
    routes: [
      { method: "GET", path: "/health" },
      { method: "GET", path: "/tools" },
      {
        method: "POST",
        path: "/execute",
        validBodies: [
          { trajectory_id: "t1", tool: { name: "lookup_weather", arguments: { city: "Oslo", days_ahead: 1 }, uniq_id: "u1" }, timeout_s: 2 },
          { tool: { name: "unit_convert", arguments: { value: 20, to: "fahrenheit" } }, slot_id: "slot_0", container_addr: "127.0.0.1:1" },
        ],
      },
    ],
  };
  await send(server.url, { method: "GET", path: "/health", headers: {}, body: undefined });
  rssBefore = rssMb(server.pid);
});

afterAll(async () => {
  await server?.stop();
});

describe("ToolServer under bad input", () => {
  it("random methods, paths, headers and bodies: 4xx with a JSON message, never 5xx or a hang", async () => {
    const report = await fuzzServer(target, { runs: 500, alive: () => (server.alive() ? null : server.logs.slice(-4).join("\n")) });
    console.log("tool-server fuzz:", JSON.stringify(report));
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

  it("afterwards: alive, healthy, answering tool calls, RSS bounded", async () => {
    expect(server.alive()).toBe(true);
    const ok = await send(server.url, {
      method: "POST",
      path: "/execute",
      headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: Buffer.from(JSON.stringify({ tool: { name: "unit_convert", arguments: { value: 100, to: "celsius" } } })),
    });
    expect(ok.status).toBe(200);
    expect(JSON.parse(ok.text).output).toMatch(/37\.8 °C/);
    const after = rssMb(server.pid);
    console.log(`tool-server RSS: ${rssBefore} MB before fuzzing, ${after} MB after`);
    expect(after).toBeLessThan(Math.max(250, rssBefore + 150));
  });
});
