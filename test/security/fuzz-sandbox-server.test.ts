import { readdirSync } from "node:fs";
import { connect } from "node:net";
import { dirname } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fuzzServer, rssMb, send, type FuzzTarget } from "./fuzz-support.js";
import { startAttackServer, within, type AttackServer } from "./support.js";

/**
 * Bad input on every route of a real sandbox server: 4xx with a JSON message, never 5xx,
 * a crash or a hang; healthy and RSS-bounded afterwards.
 */
let server: AttackServer;
let target: FuzzTarget;
let rssBefore = 0;

beforeAll(async () => {
  server = await startAttackServer({ slots: 2 });
  const slot = "slot_0";
  target = {
    name: "sandbox-server",
    url: server.url,
    token: server.token,
    routes: [
      { method: "GET", path: "/health" },
      { method: "GET", path: "/slots" },
      { method: "GET", path: "/metrics" },
      {
        method: "POST",
        path: "/execute",
        validBodies: [
          { slot_id: slot, tool: "bash", args: { command: "echo fuzz" }, execution_id: "e1", timeout: 5 },
          { slot_id: slot, tool: "read_file", args: { path: "notes.txt" } },
          { slot_id: slot, tool: "write_file", args: { path: "fuzz/out.txt", content: "x" } },
          { slot_id: slot, tool: "terminal", args: { command: "true" } },
          { slot_id: slot, tool: "tmux", args: { action: "capture" } },
        ],
      },
      { method: "POST", path: "/batch", validBodies: [[{ slot_id: slot, tool: "bash", args: { command: "true" } }, { slot_id: "slot_1", tool: "bash", args: { command: "echo b" } }]] },
      { method: "POST", path: "/reset", validBodies: [{ slot_id: "slot_1" }] },
      { method: "POST", path: "/artifacts/read", validBodies: [{ slot_id: slot, path: "fuzz/out.txt", encoding: "base64", max_bytes: 10, include_sha256: true }] },
      { method: "POST", path: "/artifacts/list", validBodies: [{ slot_id: slot, path: ".", recursive: true, max_entries: 5 }] },
      { method: "POST", path: "/artifacts/archive", validBodies: [{ slot_id: slot, path: ".", format: "tar.gz", max_bytes: 100_000, max_entries: 10 }] },
    ],
  };
  // Warm up so the baseline includes the holders and JIT.
  await server.bash(0, "true");
  rssBefore = rssMb(server.proc.pid);
});

afterAll(async () => {
  await server?.stop();
});

let crashed: string | null = null;
/** A crash during fuzzing fails the fuzz test; later tests get a fresh server instead of cascading. */
async function restartIfDead(): Promise<void> {
  const h = await server.health().catch(() => null);
  if (h?.status === 200) return;
  crashed ??= server.logs.slice(-4).join("\n") || "no /health answer";
  await server.stop();
  server = await startAttackServer({ slots: 2 });
  rssBefore = rssMb(server.proc.pid);
}

describe("sandbox server under bad input", () => {
  it("random methods, paths, headers and bodies on every route: 4xx with a JSON message, never 5xx or a hang", async () => {
    const report = await fuzzServer(target, { runs: 300, alive: () => (server.proc.child.exitCode !== null || server.proc.child.signalCode ? server.logs.slice(-4).join("\n") : null) });
    console.log("sandbox-server fuzz:", JSON.stringify(report));
    expect(report.requests).toBeGreaterThanOrEqual(100);
    // The fuzzer must reach past auth and validation, not only bounce off them.
    expect(report.byStatus["200"] ?? 0).toBeGreaterThan(20);
    expect(report.byStatus["400"] ?? 0).toBeGreaterThan(20);
  }, 60_000);

  it("a body over the 64 MB limit gets 413, and the server stays up", async () => {
    await restartIfDead();
    const r = await send(server.url, { method: "POST", path: "/execute", headers: { authorization: `Bearer ${server.token}`, "content-type": "application/json" }, body: Buffer.alloc(65 * 1024 * 1024, 0x20) }).catch((e: Error) => ({ status: -1, text: e.message, ms: 0 }));
    // Either the 413 arrives, or the server cut the upload after answering it (EPIPE/ECONNRESET).
    if (r.status !== -1) {
      expect(r.status).toBe(413);
      expect(JSON.parse(r.text).error).toMatch(/larger than/);
    } else expect(r.text).toMatch(/EPIPE|ECONNRESET|socket hang up/);
    expect((await server.health()).status).toBe(200);
  }, 30_000);

  it("a stalled upload and a garbage request line do not block other requests", async () => {
    await restartIfDead();
    const u = new URL(server.url);
    const stalled = connect(Number(u.port), u.hostname);
    stalled.write(`POST /execute HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${server.token}\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{"slot_id":`);
    const garbage = connect(Number(u.port), u.hostname);
    const garbageAnswer = new Promise<string>((resolve) => {
      let text = "";
      garbage.on("data", (d) => (text += d.toString()));
      garbage.on("close", () => resolve(text));
      garbage.on("error", () => resolve(text));
    });
    garbage.write("GARBAGE / \x00\x01 HTTP/9.9\r\n\r\n");
    try {
      const r = await within(20_000, "bash during a stalled upload", server.bash(0, "echo unblocked"));
      expect(r.output).toBe("unblocked");
      expect(await within(20_000, "garbage request", garbageAnswer)).toMatch(/^HTTP\/1\.1 400/);
    } finally {
      stalled.destroy();
      garbage.destroy();
    }
  });

  it("afterwards: healthy, slots usable, nothing written outside the data dir, RSS bounded", async () => {
    expect(crashed, "the server crashed during this file's fuzzing").toBeNull();
    const h = await server.health();
    expect(h.status).toBe(200);
    expect(server.proc.child.exitCode).toBeNull();
    expect((await server.bash(1, "echo ok")).output).toBe("ok");
    // Random paths of read/write/artifacts stayed inside the workspaces.
    expect(readdirSync(dirname(server.dataDir))).toEqual(["data"]);
    expect(readdirSync(server.dataDir).filter((n) => !n.startsWith(".")).sort()).toEqual(["slot_0", "slot_1"]);
    const after = rssMb(server.proc.pid);
    console.log(`sandbox-server RSS: ${rssBefore} MB before fuzzing, ${after} MB after`);
    expect(after).toBeLessThan(Math.max(300, rssBefore + 200));
  });
});

describe("request targets the URL parser rejects (each on a fresh server)", () => {
  for (const path of ["//", "//x", "///%F0%BE%9C%84"]) {
    it(`an unauthenticated request for ${JSON.stringify(path)} gets a 4xx and does not crash the server`, async () => {
      const fresh = await startAttackServer({ slots: 1 });
      try {
        const a = await send(fresh.url, { method: "GET", path, headers: {}, body: undefined }).catch((e: Error) => ({ status: -1, text: e.message, ms: 0 }));
        // wait: a crash caused by the request shows within it (a loaded box could only hide one past it)
        await new Promise((r) => setTimeout(r, 200));
        expect(fresh.proc.child.exitCode, `server died: ${fresh.logs.slice(-3).join("\n")}`).toBeNull();
        expect(a.status).toBeGreaterThanOrEqual(400);
        expect(a.status).toBeLessThan(500);
        expect((await fresh.health()).status).toBe(200);
      } finally {
        await fresh.stop();
      }
    });
  }
});

describe("request size × concurrency (on a fresh server)", () => {
  it("many large bodies at once (8 × 60 MB, each under the 64 MB cap) keep the server's memory bounded", async () => {
    const server = await startAttackServer({ slots: 1 });
    try {
      const before = rssMb(server.proc.pid);
      let peak = before;
      const timer = setInterval(() => {
        try {
          peak = Math.max(peak, rssMb(server.proc.pid));
        } catch {
          /* exited */
        }
      }, 20);
      const body = Buffer.from(JSON.stringify({ slot_id: "slot_0", tool: "write_file", args: { path: "big.txt", content: "a".repeat(60 * 1024 * 1024) } }));
      const headers = { authorization: `Bearer ${server.token}`, "content-type": "application/json" };
      const statuses = await Promise.all(Array.from({ length: 8 }, () => send(server.url, { method: "POST", path: "/execute", headers, body }, 60_000).then((a) => a.status, (e: Error) => e.message)));
      clearInterval(timer);
      console.log(`8 concurrent 60 MB bodies: statuses ${JSON.stringify(statuses)}, server RSS ${before} MB → peak ${peak} MB`);
      expect(statuses.every((s) => typeof s === "number" && s < 500)).toBe(true);
      expect((await server.health()).status).toBe(200);
      expect(peak, `server RSS peaked at ${peak} MB`).toBeLessThan(512);
    } finally {
      await server.stop();
    }
  }, 60_000);

});
