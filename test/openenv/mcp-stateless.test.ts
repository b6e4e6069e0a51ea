/**
 * MCP's stateless revision (2026-07-28) at /mcp, beside the 2025-11-25 sessions
 * (mcp-http.test.ts): no initialize, a version on every request, server/discover, results
 * with resultType; an episode spans requests through the handle the server mints.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { eventually, SOLVE_SEED_0, startOpenEnv, type OpenEnvHarness } from "./support.js";

let h: OpenEnvHarness;
beforeAll(async () => {
  h = await startOpenEnv({ slots: 2 });
}, 120_000);
afterAll(async () => {
  await h?.stop();
});

const META = "io.modelcontextprotocol/protocolVersion";
let nextId = 1;
async function rpc(method: string, params: Record<string, unknown> = {}, version = "2026-07-28"): Promise<{ status: number; body: any }> {
  const { _meta, ...rest } = params as { _meta?: Record<string, unknown> };
  const res = await fetch(`${h.url}/mcp`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "application/json, text/event-stream", "mcp-protocol-version": version, "mcp-method": method },
    body: JSON.stringify({ jsonrpc: "2.0", id: nextId++, method, params: { ...rest, _meta: { [META]: version, "io.modelcontextprotocol/clientInfo": { name: "t", version: "1" }, "io.modelcontextprotocol/clientCapabilities": {}, ...(_meta ?? {}) } } }),
  });
  return { status: res.status, body: await res.json() };
}

describe("MCP 2026-07-28 (stateless) at /mcp", () => {
  it("server/discover advertises both revisions and the tools capability; tools/list needs no session", async () => {
    const d = await rpc("server/discover");
    expect(d.body.result).toEqual(expect.objectContaining({ supportedVersions: ["2026-07-28", "2025-11-25"], capabilities: { tools: {} }, resultType: "complete" }));
    const t = await rpc("tools/list");
    expect(t.body.result.resultType).toBe("complete");
    expect(t.body.result.tools.map((x: { name: string }) => x.name)).toEqual(expect.arrayContaining(["bash", "submit"]));
  });

  it("a tools/call with no handle is a one-call episode: run, scored, slot back", async () => {
    const r = await rpc("tools/call", { name: "bash", arguments: { command: "echo one-shot" } });
    expect(r.body.result).toEqual(expect.objectContaining({ resultType: "complete", isError: false }));
    expect(r.body.result.structuredContent).toEqual(expect.objectContaining({ output: "one-shot", done: true, reward: expect.any(Number) }));
    await eventually(() => h.free() === 2, "the slot back");
  });

  it("an episode over several requests: _meta 'new' begins it, its handle continues it, submit scores and ends it", async () => {
    const first = await rpc("tools/call", { name: "bash", arguments: { command: SOLVE_SEED_0 }, _meta: { "dev.slotpool/episode": "new" } });
    const handle = first.body.result._meta["dev.slotpool/episode"];
    expect(handle).toEqual(expect.any(String));
    expect(first.body.result.structuredContent.done).toBe(false);
    expect(h.free()).toBe(1);
    const read = await rpc("tools/call", { name: "bash", arguments: { command: "cat notes/day-0.txt" }, _meta: { "dev.slotpool/episode": handle } });
    expect(read.body.result.structuredContent.output).toBe("release 0 approved");
    const done = await rpc("tools/call", { name: "submit", arguments: {}, _meta: { "dev.slotpool/episode": handle } });
    expect(done.body.result.structuredContent).toEqual(expect.objectContaining({ done: true, reward: expect.any(Number) }));
    await eventually(() => h.free() === 2, "the slot back");
    const after = await rpc("tools/call", { name: "bash", arguments: { command: "true" }, _meta: { "dev.slotpool/episode": handle } });
    expect(after.body.error).toEqual(expect.objectContaining({ code: -32602, message: expect.stringMatching(/names no episode/) }));
  });

  it("a version this server does not speak is refused with -32022 listing the ones it does", async () => {
    const r = await rpc("tools/list", {}, "2099-01-01");
    expect(r.body.error).toEqual(expect.objectContaining({ code: -32022, data: expect.objectContaining({ supported: ["2026-07-28", "2025-11-25"] }) }));
  });
});
