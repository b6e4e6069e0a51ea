/**
 * Every stream between a client and a slot has a byte bound and a timeout (issue 28): a
 * program that never reads its stdin cannot make the sandbox server buffer what a client
 * sends, and a FIFO the slot planted where a file is read cannot hang the server.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { rssKb, startAttackServer, within, type AttackServer } from "./support.js";

const MIB = 1024 * 1024;

let server: AttackServer;
beforeAll(async () => {
  server = await startAttackServer({ slots: 2 });
  expect((await server.health()).json.bwrap_available).toBe(true);
}, 60_000);
afterAll(async () => {
  await server?.stop();
});

/** Starts a process session; resolves with its pid, its stdout so far, and a way to drop the stream. */
async function startSession(slot: string, script: string) {
  const ctrl = new AbortController();
  const res = await fetch(server.url + "/processes/start", {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${server.token}` },
    body: JSON.stringify({ slot_id: slot, cmd: "/bin/bash", args: ["-c", script], stdin: true }),
    signal: ctrl.signal,
  });
  expect(res.status).toBe(200);
  const events: Array<{ type: string; pid?: number; data?: string }> = [];
  let buf = "";
  const done = (async () => {
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        buf += Buffer.from(chunk).toString("utf8");
        for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
          events.push(JSON.parse(buf.slice(0, nl)));
          buf = buf.slice(nl + 1);
        }
      }
    } catch {
      /* aborted */
    }
  })();
  const end = Date.now() + 15_000;
  while (!events.some((e) => e.type === "start") && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
  const pid = events.find((e) => e.type === "start")!.pid!;
  const stdout = () => events.filter((e) => e.type === "stdout").map((e) => Buffer.from(e.data!, "base64").toString("utf8")).join("");
  return { pid, events, stdout, done, abort: () => ctrl.abort() };
}

describe("stdin of a process session", () => {
  it("a program that never reads its stdin: the server holds a bounded amount, then answers 429 naming the bound", async () => {
    const p = await startSession("slot_0", "exec sleep 300");
    const rss0 = rssKb(server.proc.pid!);
    const chunk = Buffer.alloc(MIB, 0x61).toString("base64");
    let sent = 0;
    let refused: { status: number; text: string } | undefined;
    const started = Date.now();
    while (sent < 160 * MIB) {
      const r = await server.request("POST", "/processes/input", { slot_id: "slot_0", pid: p.pid, data: chunk });
      if (r.status !== 200) {
        refused = { status: r.status, text: r.text };
        break;
      }
      sent += MIB;
    }
    const rss1 = rssKb(server.proc.pid!);
    expect(refused, `${sent / MIB} MiB accepted with no refusal`).toBeDefined();
    expect(refused!.status).toBe(429);
    expect(refused!.text).toMatch(/not reading its stdin/);
    expect(refused!.text).toMatch(/8388608 bytes/);
    // Accepted: the bound plus what the pipe itself holds (64 KiB by default, up to 1 MiB).
    expect(sent).toBeLessThanOrEqual(10 * MIB);
    // The refusal came after the wait for room (backpressure first), and not much later.
    expect(Date.now() - started).toBeGreaterThan(5_000);
    expect((rss1 - rss0) / 1024, `server RSS grew by ${((rss1 - rss0) / 1024).toFixed(0)} MB`).toBeLessThan(64);
    // One write larger than the bound is refused at once.
    const big = await server.request("POST", "/processes/input", { slot_id: "slot_0", pid: p.pid, data: Buffer.alloc(9 * MIB).toString("base64") });
    expect(big.status).toBe(413);
    expect(big.text).toMatch(/at most 8388608 bytes per write/);
    await server.request("POST", "/processes/kill-all", { slot_id: "slot_0" });
    p.abort();
  }, 90_000);

  it("a program that reads gets every byte, in order, through the bound (backpressure, not loss)", async () => {
    const p = await startSession("slot_1", "sha256sum | cut -c1-16");
    const { createHash } = await import("node:crypto");
    const hash = createHash("sha256");
    for (let i = 0; i < 24; i++) {
      const data = Buffer.alloc(MIB, i);
      hash.update(data);
      const r = await server.request("POST", "/processes/input", { slot_id: "slot_1", pid: p.pid, data: data.toString("base64") });
      expect(r.status, r.text).toBe(200);
    }
    expect((await server.request("POST", "/processes/close-stdin", { slot_id: "slot_1", pid: p.pid })).status).toBe(200);
    await within(30_000, "session end", p.done);
    expect(p.stdout().trim()).toBe(hash.digest("hex").slice(0, 16));
  }, 90_000);
});

describe("reads of slot content by the server", () => {
  it("a FIFO where a file is read: read_file, artifacts read and archive answer at once, never wait on it", async () => {
    const made = await server.bash(0, "mkfifo /workspace/pipe && mkdir -p /workspace/d && mkfifo /workspace/d/pipe && echo hi > /workspace/d/f && echo made");
    expect(made.output).toBe("made");
    const read = await within(10_000, "read_file of a FIFO", server.tool(0, "read_file", { path: "pipe" }));
    expect(read.success).toBe(false);
    expect(read.error).toMatch(/not a regular file/);
    const art = await within(10_000, "artifacts read of a FIFO", server.artifact("read", { slot_id: "slot_0", path: "pipe" }));
    expect(art.json.success, art.text).toBe(false);
    expect(art.text).toMatch(/not a regular file/);
    const tar = await within(10_000, "artifacts archive of a dir with a FIFO", server.artifact("archive", { slot_id: "slot_0", path: "d" }));
    expect(tar.status, tar.text.slice(0, 300)).toBe(200);
    // A symlink to an endless device is refused, not streamed.
    await server.bash(0, "ln -sf /dev/zero /workspace/zero");
    const zero = await within(10_000, "read_file of a symlink to /dev/zero", server.tool(0, "read_file", { path: "zero" }));
    expect(zero.success).toBe(false);
    await server.reset(0);
  }, 60_000);
});
