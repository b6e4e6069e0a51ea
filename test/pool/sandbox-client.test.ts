import { mkdtemp, rm } from "node:fs/promises";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SandboxRequestError } from "../../src/pool/errors.js";
import { SandboxClient } from "../../src/pool/sandbox-client.js";
import { startSandboxProcess, type SandboxProcess } from "../../src/pool/sandbox-process.js";

// Against a real `slotpool sandbox-server` (npm run build first).
let server: SandboxProcess;
let dataDir: string;
let client: SandboxClient;
const TOKEN = "client-test-token-123456";

beforeAll(async () => {
  dataDir = await mkdtemp(join(tmpdir(), "slotpool-client-"));
  server = await startSandboxProcess({ slots: 2, dataDir, token: TOKEN });
  client = new SandboxClient({ containerId: "c0", url: server.url, token: TOKEN, maxConcurrency: 4 });
});

afterAll(async () => {
  await client?.close();
  await server?.stop();
  await rm(dataDir, { recursive: true, force: true });
});

describe("SandboxClient against a real sandbox server", () => {
  it("checks health and runs commands with the bearer token", async () => {
    const health = await client.health();
    expect(health).toMatchObject({ status: "ok", slots: 2 });
    // The typed keys a pool reads: what allow_network gets here, and if nothing, why.
    expect(["slirp4netns", "unavailable"]).toContain(health.internet);
    if (health.internet === "unavailable") expect(health.internet_unavailable_reason).toMatch(/\S/);
    expect(typeof health.fast_path).toBe("boolean");
    const res = await client.execute({ slot_id: "slot_0", tool: "bash", args: { command: "echo hi-$((1+2))" }, execution_id: "e1" });
    expect(res.success).toBe(true);
    expect(res.output.trim()).toBe("hi-3");
    expect(res.execution_id).toBe("e1");
  });

  it("turns a wrong token into a SandboxRequestError with the status and a hint", async () => {
    const bad = new SandboxClient({ containerId: "c0", url: server.url, token: "wrong" });
    try {
      const err = await bad.execute({ slot_id: "slot_0", tool: "bash", args: { command: "true" } }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SandboxRequestError);
      expect([401, 403]).toContain((err as SandboxRequestError).status);
      expect((err as Error).message).toMatch(/token/);
    } finally {
      await bad.close();
    }
  });

  it("reports the server's validation error", async () => {
    const err = await client.execute({ slot_id: "slot_9", tool: "bash", args: { command: "true" } }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxRequestError);
    expect((err as SandboxRequestError).status).toBeGreaterThanOrEqual(400);
    expect((err as Error).message).toMatch(/slot/);
  });

  it("batch keeps order; batchStream delivers each line as its call finishes", async () => {
    const results = await client.batch([
      { slot_id: "slot_0", tool: "bash", args: { command: "echo a" } },
      { slot_id: "slot_1", tool: "bash", args: { command: "echo b" } },
    ]);
    expect(results.map((r) => r.output.trim())).toEqual(["a", "b"]);
    const seen: Array<[number, string, number]> = [];
    const t0 = Date.now();
    const streamed = await client.batchStream(
      [
        { slot_id: "slot_0", tool: "bash", args: { command: "sleep 1.5; echo slow" } },
        { slot_id: "slot_1", tool: "bash", args: { command: "echo fast" } },
      ],
      (i, r) => seen.push([i, r.output.trim(), Date.now() - t0]),
    );
    expect(streamed.map((r) => r.output.trim())).toEqual(["slow", "fast"]);
    expect(seen.map((s) => s[0])).toEqual([1, 0]);
    expect(seen[0]![2]).toBeLessThan(1_200); // the fast one did not wait for the slow one
  });

  it("reset clears the workspace; artifacts read, list and archive", async () => {
    await client.execute({ slot_id: "slot_1", tool: "write_file", args: { path: "dir/note.txt", content: "hello" } });
    const read = await client.readArtifact({ slot_id: "slot_1", path: "dir/note.txt", include_sha256: true });
    expect(read).toMatchObject({ success: true, content: "hello", bytes: 5 });
    const list = await client.listArtifacts({ slot_id: "slot_1", path: ".", recursive: true });
    expect(list.entries.map((e) => e.path)).toContain("dir/note.txt");
    const archive = await client.archiveArtifacts({ slot_id: "slot_1", path: "dir" });
    expect(archive.success).toBe(true);
    expect(Buffer.from(archive.content, "base64").subarray(0, 2)).toEqual(Buffer.from([0x1f, 0x8b]));
    expect((await client.reset("slot_1")).success).toBe(true);
    const after = await client.execute({ slot_id: "slot_1", tool: "bash", args: { command: "ls -A" } });
    expect(after.output.trim()).toBe("");
  });

  it("bounds every call by a deadline", async () => {
    const err = await client
      .execute({ slot_id: "slot_0", tool: "bash", args: { command: "sleep 5" }, timeout: 10 }, { timeoutMs: 300 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxRequestError);
    expect((err as Error).message).toMatch(/did not answer POST \/execute within 300 ms/);
  });

  it("bounds the calls in flight per container", async () => {
    const one = new SandboxClient({ containerId: "c0", url: server.url, token: TOKEN, maxConcurrency: 1 });
    try {
      const t0 = Date.now();
      await Promise.all([
        one.execute({ slot_id: "slot_0", tool: "bash", args: { command: "sleep 0.6" } }),
        one.execute({ slot_id: "slot_1", tool: "bash", args: { command: "sleep 0.6" } }),
      ]);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(1_200); // one after the other
      // /health is not held up behind the bound.
      let slowDone = false;
      const slow = one.execute({ slot_id: "slot_0", tool: "bash", args: { command: "sleep 3" } }).finally(() => (slowDone = true));
      await one.health();
      // It answered while the call still ran: the event, not an 800 ms bound.
      expect(slowDone).toBe(false);
      await slow;
    } finally {
      await one.close();
    }
  });

  it("passes the caller's abort through unchanged", async () => {
    const controller = new AbortController();
    const p = client.execute({ slot_id: "slot_1", tool: "bash", args: { command: "sleep 3" } }, { signal: controller.signal });
    setTimeout(() => controller.abort(new Error("caller gave up")), 100);
    await expect(p).rejects.toThrow("caller gave up");
  });

  it("rejects answers that do not match the protocol", async () => {
    const fake: Server = createServer((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ status: "ok" }));
    });
    await new Promise<void>((r) => fake.listen(0, "127.0.0.1", r));
    const port = (fake.address() as { port: number }).port;
    const c = new SandboxClient({ containerId: "fake", url: `http://127.0.0.1:${port}` });
    try {
      await expect(c.health()).rejects.toThrow(/unexpected body: slots/);
    } finally {
      await c.close();
      await new Promise((r) => fake.close(r));
    }
  });

  it("turns a refused connection into a SandboxRequestError and a loss signal", async () => {
    const dir = await mkdtemp(join(tmpdir(), "slotpool-client-dead-"));
    const doomed = await startSandboxProcess({ slots: 1, dataDir: dir });
    const failures: SandboxRequestError[] = [];
    const c = new SandboxClient({ containerId: "doomed", url: doomed.url, onConnectionFailure: (e) => failures.push(e) });
    try {
      expect((await c.health()).status).toBe("ok");
      await doomed.stop();
      const err = await c.execute({ slot_id: "slot_0", tool: "bash", args: { command: "true" } }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SandboxRequestError);
      expect((err as Error).message).toMatch(/cannot reach sandbox doomed/);
      expect(failures).toHaveLength(1);
    } finally {
      await c.close();
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses a malformed URL with a clear error", () => {
    expect(() => new SandboxClient({ containerId: "x", url: "not a url" })).toThrow(/not a valid URL/);
    expect(() => new SandboxClient({ containerId: "x", url: "ftp://127.0.0.1:1" })).toThrow(/http or https/);
  });
});
