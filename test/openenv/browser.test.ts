/**
 * The browser tools in OpenEnv/MCP episodes (issue 40): an env whose toolsets include `browser`
 * (examples/web-form) offers them over MCP with their JSON Schemas; a trainer's client drives
 * the episode's own browser, in the episode's slot, and `submit` scores what that browser shows.
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebFormEnv from "../../examples/web-form/env.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { silentLogger } from "../../src/observability/logger.js";
import { OpenEnvServer } from "../../src/openenv/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { BROWSER_TEST, chromium } from "../sandbox/browser-helpers.js";

function refOf(snapshot: string, line: RegExp): string {
  const m = snapshot.split("\n").find((l) => line.test(l))?.match(/\[ref=([a-z0-9]+)\]/);
  if (!m) throw new Error(`no ${line} in:\n${snapshot}`);
  return `@${m[1]}`;
}

describe.skipIf(!chromium)("the browser over MCP (skipped without Chromium)", BROWSER_TEST, () => {
  let backend: ToolBackend;
  let env: WebFormEnv;
  let server: OpenEnvServer;
  let url: string;

  beforeAll(async () => {
    const log = silentLogger();
    const pool = { slotsPerContainer: 2, minContainers: 1, maxContainers: 1, acquireTimeoutMs: 30_000 };
    backend = await poolBackend(AgentEnvConfigSchema.parse({ pool }), new LocalProvisioner({ slotsPerContainer: 2 }), log);
    env = new WebFormEnv({}, { backend, logger: log });
    await env.start();
    server = new OpenEnvServer({ env, logger: log });
    url = await server.listen(0, "127.0.0.1");
  }, 120_000);
  afterAll(async () => {
    await server?.close();
    await env?.close();
    await backend?.close();
  });

  it("tools/list offers the seed's browser tools; the client books through the episode's browser and submit scores 1", async () => {
    const client = new Client({ name: "browser-test", version: "1" });
    const transport = new StreamableHTTPClientTransport(new URL(`${url}/mcp`));
    await client.connect(transport);
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name)).toEqual(expect.arrayContaining(["browser_navigate", "browser_snapshot", "browser_click", "browser_type", "browser_vision", "submit"]));
    const click = tools.find((t) => t.name === "browser_click")!;
    expect(click.inputSchema).toEqual(expect.objectContaining({ type: "object", required: ["ref"], properties: { ref: expect.objectContaining({ type: "string" }) } }));
    expect(JSON.stringify(tools)).not.toMatch(/allow_network/);

    // The episode's item 0: Ada Lovelace, pro plan (examples/web-form getNextItem).
    const call = async (name: string, args: Record<string, unknown> = {}) => {
      const r = await client.callTool({ name, arguments: args });
      expect(r.isError, JSON.stringify(r.content)).toBe(false);
      return r.structuredContent as { output: string };
    };
    await call("browser_navigate", { url: "http://127.0.0.1:8080/" });
    const form = (await call("browser_snapshot")).output;
    await call("browser_type", { ref: refOf(form, /textbox "Full name"/), text: "Ada Lovelace" });
    await call("browser_type", { ref: refOf(form, /textbox "Email"/), text: "ada.0@example.org" });
    await call("browser_click", { ref: refOf(form, /radio "Pro"/) });
    await call("browser_click", { ref: refOf(form, /checkbox "I accept the terms"/) });
    await call("browser_click", { ref: refOf(form, /button "Book seat"/) });
    expect((await call("browser_snapshot")).output).toMatch(/Thanks, Ada Lovelace!/);
    const done = await client.callTool({ name: "submit", arguments: {} });
    expect(done.structuredContent).toEqual(expect.objectContaining({ done: true, reward: 1 }));
    await transport.terminateSession();
    await client.close();
  }, 120_000);
});
