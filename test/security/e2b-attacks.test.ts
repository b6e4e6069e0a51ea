import { createHash } from "node:crypto";
import { gzipSync } from "node:zlib";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { InvalidArgumentError, RateLimitError, Sandbox, SandboxError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Process } from "../../src/e2b/gen/process/process_pb.js";
import { startE2b, type E2bHarness } from "../e2b/helpers.js";

/**
 * Attacks on the E2B server itself (issue 28): one sandbox must not be able to hang the
 * others, grow the server's memory without bound, write where its signed URL does not
 * reach, or hide its processes. Real local pool, real sandbox servers, the real `e2b` SDK
 * where it can express the attack, raw HTTP / Connect otherwise.
 */

const MiB = 1024 * 1024;

function inSandbox(s: Sandbox): Record<string, string> {
  return { "e2b-sandbox-id": s.sandboxId, "x-access-token": (s as unknown as { envdAccessToken: string }).envdAccessToken };
}

async function within<T>(ms: number, p: Promise<T>, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const t = new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`${what} did not answer within ${ms} ms`)), ms)));
  try {
    return await Promise.race([p, t]);
  } finally {
    clearTimeout(timer);
  }
}

async function connectUnary(h: E2bHarness, s: Sandbox, method: string, body: unknown, extra: Record<string, string> = {}): Promise<{ status: number; json: { code?: string; message?: string; watcherId?: string } }> {
  const res = await fetch(`${h.url}/${method}`, { method: "POST", headers: { "content-type": "application/json", ...inSandbox(s), ...extra }, body: JSON.stringify(body) });
  return { status: res.status, json: (await res.json()) as { code?: string; message?: string } };
}

describe("E2B server attacks: streams and connections", () => {
  let h: E2bHarness;
  beforeAll(async () => {
    h = await startE2b({ slots: 4 });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("66 CreateWatcher calls from two sandboxes are capped per sandbox; a third sandbox's commands, a timeout change and kill answer promptly", async () => {
    const [a, b, c] = await Promise.all([Sandbox.create(h.opts), Sandbox.create(h.opts), Sandbox.create(h.opts)]);
    const calls = [a, b].flatMap((s) => Array.from({ length: 33 }, () => connectUnary(h, s, "filesystem.Filesystem/CreateWatcher", { path: "/home/user", recursive: false })));
    const all = Promise.all(calls);
    await Promise.race([all, new Promise((r) => setTimeout(r, 20_000))]);
    // The other sandbox of the same container is not held up, nor is a kill.
    expect((await within(20_000, c.commands.run("echo still here"), "c's command")).stdout).toBe("still here\n");
    // The control calls that could not get a connection before: a timeout change and a kill.
    await within(20_000, b.setTimeout(120_000), "b's new timeout");
    expect(await within(20_000, a.kill(), "killing a")).toBe(true);
    expect(await within(20_000, b.kill(), "killing b")).toBe(true);
    const results = await within(30_000, all, "66 CreateWatcher calls");
    const ok = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status !== 200);
    expect(ok.length).toBe(16); // 8 per sandbox (--max-watchers-per-sandbox)
    for (const r of refused) {
      expect(r.status).toBe(429);
      expect(r.json).toMatchObject({ code: "resource_exhausted" });
      expect(r.json.message).toMatch(/--max-watchers-per-sandbox/);
    }
    await c.kill();
  }, 120_000);

  it("a sandbox's open streams are capped (429 RateLimitError); others keep working and a kill tears its streams down", async () => {
    const [a, c] = await Promise.all([Sandbox.create(h.opts), Sandbox.create(h.opts)]);
    const started = await Promise.allSettled(Array.from({ length: 40 }, () => a.commands.run("sleep 600", { background: true, timeoutMs: 0 })));
    const ok = started.filter((r) => r.status === "fulfilled");
    const refused = started.filter((r): r is PromiseRejectedResult => r.status === "rejected");
    expect(ok.length).toBe(32); // --max-streams-per-sandbox
    expect(refused.length).toBe(8);
    for (const r of refused) {
      expect(r.reason).toBeInstanceOf(RateLimitError);
      expect(String((r.reason as Error).message)).toMatch(/--max-streams-per-sandbox/);
    }
    expect((await within(20_000, c.commands.run("echo fine"), "c's command")).stdout).toBe("fine\n");
    const sandbox = h.server.registry.get(a.sandboxId)!;
    expect(sandbox.processes.openStreams).toBe(32);
    expect(await within(20_000, a.kill(), "killing a")).toBe(true);
    expect(sandbox.processes.openStreams).toBe(0);
    await c.kill();
  }, 120_000);

  it("abandoned reads of a FIFO hold nothing: refused at once, and other sandboxes keep working", async () => {
    const [a, c] = await Promise.all([Sandbox.create(h.opts), Sandbox.create(h.opts)]);
    await a.commands.run("mkfifo pipe");
    const reads = await within(
      30_000,
      Promise.all(Array.from({ length: 70 }, () => fetch(`${h.url}/files?path=pipe`, { headers: inSandbox(a), signal: AbortSignal.timeout(20_000) }).then(async (r) => ({ status: r.status, body: await r.text() })))),
      "70 FIFO reads",
    );
    // Each answers at once: refused as a FIFO, or (past the sandbox's stream cap) with 429.
    for (const r of reads) {
      expect([400, 429]).toContain(r.status);
      expect(r.body).toMatch(r.status === 400 ? /not a regular file/ : /--max-streams-per-sandbox/);
    }
    expect(reads.filter((r) => r.status === 400).length).toBeGreaterThan(0);
    expect((await within(20_000, c.commands.run("echo fine"), "c's command")).stdout).toBe("fine\n");
    await Promise.all([a.kill(), c.kill()]);
  }, 120_000);

  it("stdin on its way to the sandbox server is bounded per sandbox: past the bound, RateLimitError; what was accepted arrives whole", async () => {
    // A server with a small stdin bound (1 MiB; 32 MiB by default): stdin through the SDK is slow to move.
    const small = await startE2b({ slots: 1, maxStdinBytesPerSandbox: MiB });
    const s = await Sandbox.create(small.opts);
    // The reader takes nothing until `go` exists, so what is sent piles up whatever the
    // machine's speed (reading at once, a loaded box let each piece through before the next
    // arrived, and nothing was refused). 8 MiB fill the sandbox server's own stdin buffer
    // (MAX_STDIN_PENDING_BYTES); the next MiB then waits there for room, on its way, so of
    // two sent at once the second is refused — by this server, naming its own bound.
    const reader = await s.commands.run("while [ ! -e go ]; do sleep 0.05; done; wc -c", { background: true, stdin: true, timeoutMs: 0 });
    const mib = Buffer.alloc(MiB, 97).toString("utf8");
    for (let i = 0; i < 8; i++) await s.commands.sendStdin(reader.pid, mib, { requestTimeoutMs: 60_000 });
    const sends = [0, 1].map(() => s.commands.sendStdin(reader.pid, mib, { requestTimeoutMs: 60_000 }));
    // Whichever arrived second is refused at once; the first waits. bound: the sandbox server
    // holds a waiting write 10 s (STDIN_WAIT_MS); `touch go` follows the refusal at once (a
    // command's round trip, under a second even on a loaded box), well inside it.
    const refused = await Promise.any(sends.map((p) => p.then(() => Promise.reject(new Error("accepted")), (err: unknown) => err)));
    expect(refused).toBeInstanceOf(RateLimitError);
    expect(String((refused as Error).message)).toMatch(/bytes of stdin on their way \(limit 1048576\)/);
    await s.commands.run("touch go");
    const sent = await Promise.allSettled(sends);
    const ok = 8 + sent.filter((r) => r.status === "fulfilled").length;
    expect(ok).toBe(9);
    await s.commands.closeStdin(reader.pid);
    expect((await reader.wait()).stdout.trim()).toBe(String(ok * MiB));
    await s.kill();
    await small.stop();
  }, 120_000);

  it("a process tagged slotpool:helper is listed like any other command", async () => {
    const s = await Sandbox.create(h.opts);
    const client = createClient(Process, createConnectTransport({ baseUrl: h.url, httpVersion: "1.1" }));
    const ac = new AbortController();
    const stream = client.start({ process: { cmd: "/bin/sleep", args: ["60"] }, tag: "slotpool:helper", stdin: false }, { headers: inSandbox(s), signal: ac.signal });
    const first = await stream[Symbol.asyncIterator]().next();
    const pid = (first.value as { event?: { event: { case: string; value: { pid: number } } } }).event!.event.value.pid;
    expect(pid).toBeGreaterThan(0);
    const listed = await s.commands.list();
    expect(listed.find((p) => p.pid === pid)).toMatchObject({ tag: "slotpool:helper" });
    // The server's own helpers stay hidden: a watch's process is not listed.
    const watch = await s.files.watchDir("/home/user", () => undefined);
    expect((await s.commands.list()).map((p) => p.pid).sort()).toEqual([pid]);
    await watch.stop();
    ac.abort();
    await s.kill();
  }, 60_000);
});

describe("E2B server attacks: transfers", () => {
  let h: E2bHarness;
  beforeAll(async () => {
    h = await startE2b({ slots: 4, maxUploadBytes: 24 * MiB, maxDownloadBytes: 4 * MiB, uploadBudgetBytes: 48 * MiB, sandboxUploadBudgetBytes: 32 * MiB });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("files.read of a symlink to /dev/zero is refused and the server's memory stays bounded", async () => {
    const s = await Sandbox.create(h.opts);
    await s.commands.run("ln -s /dev/zero zero");
    const before = process.memoryUsage().rss;
    let peak = before;
    const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 50);
    const err = await s.files.read("zero", { requestTimeoutMs: 8_000 }).catch((e: unknown) => e);
    // wait: memory sampled a while after the refusal, in case a read went on behind it (a loaded box can only read less)
    await new Promise((r) => setTimeout(r, 3_000));
    clearInterval(sampler);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(String((err as Error).message)).toMatch(/not a regular file/);
    expect(peak - before).toBeLessThan(200 * MiB);
    await s.kill();
  }, 60_000);

  it("downloads stream regular files byte for byte; a file above --max-download-mb is a 413", async () => {
    const s = await Sandbox.create(h.opts);
    await s.commands.run("head -c 3500000 /dev/urandom > mid.bin; head -c 5000000 /dev/zero > big.bin");
    const mid = await s.files.read("mid.bin", { format: "bytes" });
    const sha = (await s.commands.run("sha256sum mid.bin")).stdout.split(" ")[0];
    expect(mid.length).toBe(3_500_000);
    expect(createHash("sha256").update(mid).digest("hex")).toBe(sha);
    const err = await s.files.read("big.bin").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect(String((err as Error).message)).toMatch(/5000000 bytes, above this server's download limit of 4194304 bytes \(--max-download-mb\)/);
    await s.kill();
  }, 60_000);

  it("a /files transfer past --file-timeout-s is ended with 504: nothing written, no stream left open", async () => {
    // A server whose transfers may take 1 ms: every read and write passes it.
    const quick = await startE2b({ slots: 1, fileTimeoutMs: 1 });
    const s = await Sandbox.create(quick.opts);
    await s.commands.run("head -c 3000000 /dev/urandom > data.bin");
    const read = await fetch(`${quick.url}/files?path=data.bin`, { headers: inSandbox(s) });
    expect(read.status).toBe(504);
    expect(await read.json()).toMatchObject({ code: 504, message: expect.stringMatching(/did not finish within 0.001 s \(--file-timeout-s\)/) });
    const write = await fetch(`${quick.url}/files?path=new.bin`, { method: "POST", headers: { ...inSandbox(s), "content-type": "application/octet-stream" }, body: Buffer.alloc(MiB) });
    expect(write.status).toBe(504);
    expect(await write.text()).toMatch(/nothing was written/);
    expect((await s.commands.run("ls -A")).stdout).toBe("data.bin\n");
    expect(quick.server.registry.get(s.sandboxId)!.processes.openStreams).toBe(0);
    await s.kill();
    await quick.stop();
  }, 60_000);

  it("concurrent uploads share a byte budget: past it they get 429 naming the bound, and the budget is whole again after", async () => {
    const [a, b, c] = await Promise.all([Sandbox.create(h.opts), Sandbox.create(h.opts), Sandbox.create(h.opts)]);
    const body = Buffer.alloc(20 * MiB, 7);
    const upload = (s: Sandbox, name: string) =>
      fetch(`${h.url}/files?path=${name}`, { method: "POST", headers: { ...inSandbox(s), "content-type": "application/octet-stream" }, body }).then(async (r) => ({ s, name, status: r.status, text: await r.text() }));
    // One sandbox: four uploads of 20 MiB against its 32 MiB.
    const same = await Promise.all([1, 2, 3, 4].map((i) => upload(a, `f${i}.bin`)));
    expect(same.filter((r) => r.status === 429).length).toBeGreaterThan(0);
    for (const r of same.filter((r) => r.status === 429)) expect(r.text).toMatch(/--sandbox-upload-budget-mb/);
    // Three sandboxes at once: 60 MiB against the server's 48 MiB.
    const across = await Promise.all([a, b, c].map((s) => upload(s, "g.bin")));
    expect(across.filter((r) => r.status === 429).length).toBeGreaterThan(0);
    for (const r of across.filter((r) => r.status === 429)) expect(r.text).toMatch(/--upload-budget-mb/);
    // What was accepted was written whole; what was refused was not written.
    for (const r of [...same, ...across]) {
      const size = (await r.s.commands.run(`stat -c %s ${r.name} 2>/dev/null || echo none`)).stdout.trim();
      if (r.status === 200) expect(size).toBe(String(20 * MiB));
    }
    expect(h.server.uploadsInFlight).toBe(0);
    await Promise.all([a.kill(), b.kill(), c.kill()]);
  }, 120_000);

  it("a gzip bomb upload is a 413 and corrupt gzip a 400; a Connect gzip bomb is refused with a 4xx", async () => {
    const s = await Sandbox.create(h.opts);
    const bomb = gzipSync(Buffer.alloc(64 * MiB));
    const up = await fetch(`${h.url}/files?path=bomb.bin`, { method: "POST", headers: { ...inSandbox(s), "content-type": "application/octet-stream", "content-encoding": "gzip" }, body: bomb });
    expect(up.status).toBe(413);
    expect(await up.text()).toMatch(/expands past this server's limit/);
    const bad = await fetch(`${h.url}/files?path=bad.bin`, { method: "POST", headers: { ...inSandbox(s), "content-type": "application/octet-stream", "content-encoding": "gzip" }, body: "not gzip" });
    expect(bad.status).toBe(400);
    expect(await bad.text()).toMatch(/not valid gzip/);
    expect((await s.commands.run("ls bomb.bin bad.bin 2>&1 || true")).stdout).toMatch(/No such file/);
    const rpcBomb = gzipSync(Buffer.from(JSON.stringify({ path: "/home/user/" + "a".repeat(40 * MiB) })));
    const rpc = await fetch(`${h.url}/filesystem.Filesystem/Stat`, { method: "POST", headers: { ...inSandbox(s), "content-type": "application/json", "content-encoding": "gzip" }, body: rpcBomb });
    expect(rpc.status).toBeGreaterThanOrEqual(400);
    expect(rpc.status).toBeLessThan(500);
    await s.kill();
  }, 60_000);

  it("malformed percent-encoding in control-plane paths is a 400", async () => {
    for (const [method, path] of [
      ["GET", "/sandboxes/%E0%A4%A"],
      ["DELETE", "/sandboxes/%"],
      ["POST", "/sandboxes/%ZZ/timeout"],
    ] as const) {
      const res = await fetch(`${h.url}${path}`, { method, headers: { "x-api-key": h.apiKey, "content-type": "application/json" }, ...(method === "POST" ? { body: '{"timeout": 10}' } : {}) });
      expect(res.status, `${method} ${path}`).toBe(400);
      expect(await res.json()).toMatchObject({ code: 400, message: expect.stringMatching(/malformed percent-encoding/) });
    }
    const list = await fetch(`${h.url}/v2/sandboxes?metadata=${encodeURIComponent("a=%E0%A4%A")}`, { headers: { "x-api-key": h.apiKey } });
    expect(list.status).toBe(400);
  });

  it("a signed upload URL writes exactly its one path; found from its signature without a sandbox id; one operation; expiry", async () => {
    const s = await Sandbox.create(h.opts);
    const other = await Sandbox.create(h.opts);
    const url = await s.uploadUrl("notes.txt");
    const form = (parts: Array<[string, string]>) => {
      const f = new FormData();
      for (const [name, text] of parts) f.append("file", new Blob([text]), name);
      return f;
    };
    // The attack as first found (the sandbox named, as the SDK sends it): a body of several
    // parts wrote every part, ~/.bashrc included, which later commands source.
    const named = await fetch(url, { method: "POST", headers: { "e2b-sandbox-id": s.sandboxId }, body: form([["notes.txt", "again\n"], [".bashrc", "echo pwned\n"]]) });
    expect(await s.files.exists(".bashrc")).toBe(false);
    expect(await s.files.exists("notes.txt")).toBe(false);
    expect(named.status).toBe(400);
    expect(url).not.toMatch(/sandbox/i);
    // No E2b-Sandbox-Id header: the signature finds the sandbox.
    const one = await fetch(url, { method: "POST", body: form([["notes.txt", "signed write\n"]]) });
    expect(one.status).toBe(200);
    expect(await s.files.read("notes.txt")).toBe("signed write\n");
    expect(await other.files.exists("notes.txt")).toBe(false);
    // Several parts through one signed URL: refused, nothing written.
    const many = await fetch(url, { method: "POST", body: form([["notes.txt", "again\n"], [".bashrc", "echo pwned\n"]]) });
    expect(many.status).toBe(400);
    expect(await many.text()).toMatch(/exactly one file/);
    expect(await s.files.read("notes.txt")).toBe("signed write\n");
    expect(await s.files.exists(".bashrc")).toBe(false);
    // Another path with the same signature, or the other operation: 401.
    const moved = new URL(url);
    moved.searchParams.set("path", ".bashrc");
    expect((await fetch(moved, { method: "POST", body: form([[".bashrc", "x"]]) })).status).toBe(401);
    expect((await fetch(url, { method: "GET" })).status).toBe(401);
    const read = await s.downloadUrl("notes.txt");
    expect(await (await fetch(read)).text()).toBe("signed write\n");
    expect((await fetch(read, { method: "POST", body: form([["notes.txt", "x"]]) })).status).toBe(401);
    // Expiry is honoured.
    const short = await s.downloadUrl("notes.txt", { useSignatureExpiration: 1 });
    expect((await fetch(short)).status).toBe(200);
    // wait: past the signature's 1 s expiry (whole seconds: 2.1 s passes it whatever the rounding)
    await new Promise((r) => setTimeout(r, 2_100));
    const expired = await fetch(short);
    expect(expired.status).toBe(401);
    // In envd's words (E2B's Python tests compare the whole body).
    expect(await expired.json()).toEqual({ code: 401, message: "signature is already expired" });
    // A killed sandbox's signed URLs open nothing.
    await s.kill();
    expect((await fetch(read)).status).toBe(401);
    await other.kill();
  }, 60_000);

  it("a multipart upload is all or nothing: one bad part and no part is written", async () => {
    const s = await Sandbox.create(h.opts);
    await s.commands.run("mkdir -p adir; echo keep > kept.txt; chmod 0751 kept.txt");
    const send = (parts: Array<[string, string]>) => {
      const f = new FormData();
      for (const [name, text] of parts) f.append("file", new Blob([text]), name);
      return fetch(`${h.url}/files`, { method: "POST", headers: inSandbox(s), body: f });
    };
    const outside = await send([["first.txt", "1"], ["/etc/evil", "2"]]);
    const onDir = await send([["second.txt", "1"], ["adir", "2"]]);
    const under = await send([["third.txt", "1"], ["kept.txt/x", "2"]]);
    // First what the attack is after: the good parts before a bad one were not written.
    expect((await s.commands.run("ls -A")).stdout.split("\n").filter(Boolean).sort()).toEqual(["adir", "kept.txt"]);
    expect(outside.status).toBe(403); // a place the sandbox's user cannot write (E2B: permission denied)
    expect(await outside.text()).toMatch(/permission denied.*nothing was written/);
    expect(onDir.status).toBe(400);
    expect(await onDir.text()).toMatch(/is a directory; nothing was written/);
    expect(under.status).toBe(400);
    // All good: every part lands, an existing file keeps its mode.
    const good = await send([["kept.txt", "new\n"], ["deep/er/two.txt", "two\n"]]);
    expect(good.status).toBe(200);
    expect((await s.commands.run("cat kept.txt deep/er/two.txt; stat -c %a kept.txt; ls -A")).stdout).toBe("new\ntwo\n751\nadir\ndeep\nkept.txt\n");
    await s.kill();
  }, 60_000);
});
