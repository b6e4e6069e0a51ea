/**
 * /mcp driven by the MCP SDK for Python 2.3 from the package index (.build/python-mcp): its
 * default client discovers the server (server/discover) and speaks MCP's stateless revision
 * 2026-07-28 — once refused here — and its legacy mode the 2025-11-25 sessions.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pythonClients } from "../support/python-clients.js";
import { startOpenEnv, type OpenEnvHarness } from "./support.js";

const run = promisify(execFile);
const CHECKS = fileURLToPath(new URL("./python/mcp_checks.py", import.meta.url));
const py = pythonClients("python-mcp");

describe.skipIf(py.python === null)(`the MCP SDK for Python 2.3 at /mcp${py.reason ? ` (skipped: ${py.reason})` : ""}`, () => {
  let h: OpenEnvHarness;
  let r: Record<string, Record<string, any>>;
  beforeAll(async () => {
    h = await startOpenEnv({ slots: 2 });
    const { stdout } = await run(py.python!, [CHECKS, h.url, "modern", "legacy"], { timeout: 300_000 });
    r = Object.fromEntries(stdout.trim().split("\n").map((l) => JSON.parse(l) as Record<string, any>).map((x) => [x["check"], x]));
  }, 400_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("the default client speaks 2026-07-28 (discovered, no initialize): tools, a one-call episode, an episode over requests by its handle with reward 1", () => {
    const m = r["modern"]!;
    expect(m, JSON.stringify(m)).toEqual(expect.objectContaining({ ok: true, era: "modern", read: "release 0 approved", done: true }));
    expect(m["versions"]).toContain("2026-07-28");
    expect(m["tools"]).toEqual(expect.arrayContaining(["bash", "submit"]));
    expect(m["one_shot"]).toEqual(expect.objectContaining({ output: "stateless", done: true }));
    expect(m["handle"]).toEqual(expect.any(String));
    expect(typeof m["reward"]).toBe("number");
  });

  it("mode='legacy' (2025-11-25): the initialize handshake and one session, one episode", () => {
    const l = r["legacy"]!;
    expect(l, JSON.stringify(l)).toEqual(expect.objectContaining({ ok: true, era: "legacy", read: expect.stringContaining("in-session") }));
    expect(l["tools"]).toBeGreaterThanOrEqual(4);
  });
});
