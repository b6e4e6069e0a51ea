import { Sandbox, SandboxError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * `Sandbox.create({ mcp })` (issue 30): E2B's SDK creates the sandbox, then starts
 * `mcp-gateway` in it and kills it when that fails. slotpool has no MCP gateway: create
 * accepts `mcp` (it used to answer 400 before any sandbox existed), the sandbox's
 * `mcp-gateway` says there is none, and the SDK raises "Failed to start MCP gateway: …"
 * with that line and leaves no sandbox behind — as on an E2B template without the gateway.
 */
describe("MCP gateway", () => {
  let h: E2bHarness;
  beforeAll(async () => {
    h = await startE2b({ slots: 2 });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("create with `mcp` fails with the SDK's 'Failed to start MCP gateway' naming why, and no sandbox is left running", async () => {
    const metadata = { mcpCase: String(Date.now()) };
    const err = (await Sandbox.create("base", { ...h.opts, metadata, mcp: { some_server: {} } as never }).catch((e: unknown) => e)) as Error;
    expect(err).toBeInstanceOf(SandboxError);
    expect(err.message).toContain("Failed to start MCP gateway");
    expect(err.message).toContain("slotpool's sandboxes have no MCP gateway");
    expect(await Sandbox.list({ ...h.opts, query: { metadata } }).nextItems()).toEqual([]);
    // Its slot went back to the pool: both slots can be taken again.
    const both = await Promise.all([Sandbox.create(h.opts), Sandbox.create(h.opts)]);
    await Promise.all(both.map((s) => s.kill()));
  }, 60_000);
});
