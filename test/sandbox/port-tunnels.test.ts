import { createHash, randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openSlotPort, SlotPortError } from "../../src/pool/slot-port.js";
import type { LeasedSlot } from "../../src/pool/types.js";
import { SLOT_UID_BASE, isRoot, readEvents, startServer, type TestServer } from "./helpers.js";

/**
 * Port tunnels (`GET /ports/connect`, protocol/port-tunnel.ts), through the pool's client
 * (`openSlotPort`): a connection to a port where a slot's process sessions listen, made inside
 * that slot's network namespace. What a session serves is reachable, with its bytes both ways;
 * nothing else is: another slot's ports, the host's, a port nobody listens on (502 naming it),
 * a `bash` call's server (its own namespace).
 */

const TOKEN = "port-tunnel-test-token";

interface Ev {
  type: string;
  data?: string;
}

/** A process session in `slot` running `script` (bash); its output so far and its end. */
async function session(s: TestServer, slot: string, script: string, allowNetwork = false) {
  const res = await fetch(s.url + "/processes/start", {
    method: "POST",
    headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}` },
    body: JSON.stringify({ slot_id: slot, cmd: "/bin/bash", args: ["-c", script], allow_network: allowNetwork }),
  });
  expect(res.status).toBe(200);
  const events: Ev[] = [];
  const done = readEvents(res, events);
  const out = () =>
    events
      .filter((e) => e.type === "stdout" || e.type === "stderr")
      .map((e) => Buffer.from(e.data!, "base64").toString("utf8"))
      .join("");
  return { done, out };
}

async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** A python3 server on the slot's loopback at `port`; prints "listening" once bound. */
function pyServer(port: number, body: string, host = "127.0.0.1"): string {
  return `exec /usr/bin/python3 -u -c '
import socket, sys, hashlib
s = socket.socket(${host.includes(":") ? "socket.AF_INET6" : "socket.AF_INET"}); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("${host}", ${port})); s.listen(16)
print("listening", flush=True)
while True:
    c, _ = s.accept()
${body
  .split("\n")
  .map((l) => "    " + l)
  .join("\n")}
'`;
}

/** Answers each connection with `hello <tag>` and closes. */
const hello = (port: number, tag: string, host?: string) => pyServer(port, `c.sendall(b"hello ${tag}\\n"); c.close()`, host);
/** Reads until the client's end (FIN), then answers the byte count and sha256 of what it got, and closes. */
const digest = (port: number) =>
  pyServer(
    port,
    `h = hashlib.sha256(); n = 0
while True:
    d = c.recv(65536)
    if not d: break
    h.update(d); n += len(d)
c.sendall(f"{n} {h.hexdigest()}\\n".encode()); c.close()`,
  );
/** Sends `mb` MB of a known pattern, printing how many bytes it has handed to the kernel as it goes. */
const flood = (port: number, mb: number) =>
  pyServer(
    port,
    `chunk = bytes(range(256)) * 256
sent = 0
for i in range(${mb} * 16):
    c.sendall(chunk); sent += len(chunk)
    if i % 16 == 0: print("sent", sent, flush=True)
print("sent", sent, "done", flush=True); c.close()`,
  );

/**
 * Whether the python3 process whose command line holds `marker` is blocked waiting for socket
 * buffer space (its wchan), read from the host's /proc (the slot's processes run as a uid the
 * tests may read).
 */
/** The kernel functions a send() on a full socket sleeps in (sk_stream_wait_memory sleeps in wait_woken). */
const SOCKET_WAITS = ["sk_stream_wait_memory", "wait_woken"];
function blockedOnSocket(marker: string): boolean {
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      const cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8");
      if (cmd.startsWith("/usr/bin/python3") && cmd.includes(marker) && SOCKET_WAITS.includes(readFileSync(`/proc/${pid}/wchan`, "utf8"))) return true;
    } catch {
      /* gone, or not ours to read */
    }
  }
  return false;
}

/** Resident memory of the node processes from `pid` down (the sandbox server re-executes itself in a mount namespace). */
function nodeRss(pid: number): number {
  const children = new Map<number, number[]>();
  for (const p of readdirSync("/proc").filter((x) => /^\d+$/.test(x))) {
    try {
      const ppid = Number(readFileSync(`/proc/${p}/stat`, "utf8").replace(/^.*\) /s, "").split(" ")[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(p)]);
    } catch {
      /* gone */
    }
  }
  let total = 0;
  const todo = [pid];
  while (todo.length > 0) {
    const p = todo.pop()!;
    todo.push(...(children.get(p) ?? []));
    try {
      if (readFileSync(`/proc/${p}/comm`, "utf8").trim() !== "node") continue;
      total += Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${p}/status`, "utf8"))?.[1] ?? 0) * 1024;
    } catch {
      /* gone */
    }
  }
  return total;
}

/** Host uids of the port relays running now (their command line names the binary). */
function relayUids(): number[] {
  const uids: number[] = [];
  for (const pid of readdirSync("/proc").filter((p) => /^\d+$/.test(p))) {
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("slotpool-port-relay")) continue;
      uids.push(Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1]));
    } catch {
      /* gone */
    }
  }
  return uids;
}

/** Everything a socket sends until its end. */
function readAll(sock: Socket): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    sock.on("data", (d: Buffer) => chunks.push(d));
    sock.once("end", () => resolve(Buffer.concat(chunks)));
    sock.once("error", reject);
  });
}

describe("port tunnels into a slot's network namespace", () => {
  let s: TestServer;
  let hostServer: Server;
  let hostPort = 0;
  const lease = (slotId: string): LeasedSlot => ({ slotId, container: { id: "c", index: 0, url: s.url, token: TOKEN, slots: 3 }, touch: () => undefined }) as unknown as LeasedSlot;
  const open = (slot: string, port: number, allowNetwork = false) => openSlotPort(lease(slot), port, { allowNetwork });
  const refusal = async (p: Promise<unknown>): Promise<SlotPortError> => {
    const err = await p.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SlotPortError);
    return err as SlotPortError;
  };

  beforeAll(async () => {
    s = await startServer({ slots: 3, token: TOKEN, extraArgs: ["--port-idle-timeout-s", "2"] });
    // A server on the host's loopback: no slot may reach it through a tunnel.
    hostServer = createServer((c) => c.end("host secret\n"));
    await new Promise<void>((r) => hostServer.listen(0, "127.0.0.1", () => r()));
    hostPort = (hostServer.address() as { port: number }).port;
  }, 90_000);
  afterAll(async () => {
    hostServer?.close();
    await s?.stop();
  });

  it("reaches a server a process session started (IPv4 and IPv6 loopback); a port nobody listens on is a 502 naming it; other slots' and the host's ports are not reachable", async () => {
    const port = 41_000 + Math.floor(Math.random() * 1000);
    const a = await session(s, "slot_0", hello(port, "slot0"));
    await until(() => a.out().includes("listening"), "slot_0's server");
    expect((await readAll(await open("slot_0", port))).toString()).toBe("hello slot0\n");
    // A server bound to ::1 only is reached too (the relay tries 127.0.0.1, then ::1).
    const v6 = await session(s, "slot_0", hello(port + 1, "v6", "::1"));
    await until(() => v6.out().includes("listening"), "slot_0's IPv6 server");
    expect((await readAll(await open("slot_0", port + 1))).toString()).toBe("hello v6\n");

    const closed = await refusal(open("slot_0", port + 2));
    expect(closed.status).toBe(502);
    expect(closed.port).toBe(port + 2);
    expect(closed.message).toContain(`port ${port + 2}`);
    // slot_1 has no process at all: its ports answer nothing, and slot_0's server is not there.
    expect((await refusal(open("slot_1", port))).status).toBe(502);
    // The host's own listener is another namespace: not reachable from any slot.
    const b = await session(s, "slot_1", "sleep 600");
    expect((await refusal(open("slot_1", hostPort))).status).toBe(502);
    expect((await refusal(open("slot_0", hostPort))).status).toBe(502);
    // slot_1 may serve the same port number: each tunnel gets its own slot's server.
    const c = await session(s, "slot_1", hello(port, "slot1"));
    await until(() => c.out().includes("listening"), "slot_1's server");
    expect((await readAll(await open("slot_1", port))).toString()).toBe("hello slot1\n");
    expect((await readAll(await open("slot_0", port))).toString()).toBe("hello slot0\n");

    for (const slot of ["slot_0", "slot_1"]) expect((await s.post("/reset", { slot_id: slot }, { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
    await Promise.all([a.done, v6.done, b.done, c.done]);
    // After the reset nothing of the previous trajectory listens.
    expect((await refusal(open("slot_0", port))).status).toBe(502);
  }, 120_000);

  it("carries large bodies both ways byte for byte, passes the client's end on, and holds a reader that does not read with backpressure (the slot's sender waits)", async () => {
    const port = 42_000 + Math.floor(Math.random() * 1000);
    const srv = await session(s, "slot_0", digest(port));
    await until(() => srv.out().includes("listening"), "digest server");
    // 24 MB up, then FIN: the server only answers once it has seen the end.
    const up = randomBytes(24 * 1024 * 1024);
    const sock = await open("slot_0", port);
    const answer = readAll(sock);
    sock.end(up);
    expect((await answer).toString()).toBe(`${up.length} ${createHash("sha256").update(up).digest("hex")}\n`);

    // 64 MB down to a client that reads nothing at first: the server in the slot gets only as
    // far as the sockets' buffers let it, then blocks in send() (the kernel's wait for socket
    // buffer space, read from /proc: an event, not a delay); once read, every byte arrives.
    const fport = port + 1;
    const fl = await session(s, "slot_0", flood(fport, 64));
    await until(() => fl.out().includes("listening"), "flood server");
    const slow = await open("slot_0", fport);
    slow.pause();
    const sentSoFar = () => Math.max(0, ...[...fl.out().matchAll(/sent (\d+)/g)].map((m) => Number(m[1])));
    const rssBefore = nodeRss(s.proc.pid);
    // Stalled: blocked in send() at two readings 500 ms apart with the same progress. (Only
    // how soon a broken backpressure shows depends on that interval: with it working the
    // server stays blocked, so waiting longer on a loaded box never fails wrongly.)
    let last = -1;
    await until(
      async () => {
        const now = sentSoFar();
        const stalled = now === last && blockedOnSocket(`${fport}`);
        last = now;
        if (!stalled) await new Promise((r) => setTimeout(r, 500));
        return stalled;
      },
      "the slot's server stalls on a full socket (backpressure)",
      90_000,
    );
    expect(last).toBeLessThan(32 * 1024 * 1024);
    expect(fl.out()).not.toContain("done");
    // Nothing piled up in the sandbox server meanwhile (64 MB would have, without backpressure).
    expect(nodeRss(s.proc.pid) - rssBefore).toBeLessThan(24 * 1024 * 1024);
    const got = readAll(slow);
    slow.resume();
    const all = await got;
    expect(all.length).toBe(64 * 1024 * 1024);
    const pattern = Buffer.from(Array.from({ length: 256 * 256 }, (_, i) => i % 256));
    expect(all.subarray(0, pattern.length).equals(pattern)).toBe(true);
    expect(all.subarray(all.length - pattern.length).equals(pattern)).toBe(true);
    expect((await s.post("/reset", { slot_id: "slot_0" }, { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
  }, 180_000);

  it("a network-on slot's sessions are reached with allow_network: true (their namespace), not through the loopback-only one", async () => {
    const port = 43_000 + Math.floor(Math.random() * 1000);
    const srv = await session(s, "slot_2", hello(port, "net"), true);
    await until(() => srv.out().includes("listening"), "network-on server");
    const health = (await s.get("/health")).json as { internet: string };
    // Where the server offers internet, network-on sessions have a namespace of their own; else they share the loopback one.
    expect((await readAll(await open("slot_2", port, true))).toString()).toBe("hello net\n");
    if (health.internet === "slirp4netns") expect((await refusal(open("slot_2", port, false))).status).toBe(502);
    else expect((await readAll(await open("slot_2", port, false))).toString()).toBe("hello net\n");
    expect((await s.post("/reset", { slot_id: "slot_2" }, { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
  }, 90_000);

  it("a server a `bash` call starts is not reachable (the call keeps a namespace of its own, and ends everything it started); a process session's is", async () => {
    const port = 44_000 + Math.floor(Math.random() * 1000);
    // The slot's shared namespace is up (a session runs) while a bash call serves the port.
    const idle = await session(s, "slot_1", "sleep 600");
    const serveInCall = `/usr/bin/python3 -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", ${port})); s.listen(4)
open("/workspace/bash-listening", "w").close()
while True:
    c, _ = s.accept(); c.sendall(b"hello bash\\n"); c.close()' &
while [ ! -e /workspace/bash-listening ]; do sleep 0.05; done
exec 3<>/dev/tcp/127.0.0.1/${port} && head -n 1 <&3
touch /workspace/bash-read
sleep 600`;
    const call = s.post("/execute", { slot_id: "slot_1", tool: "bash", args: { command: serveInCall }, timeout: 900 }, { authorization: `Bearer ${TOKEN}` });
    // Sessions run outside the slot's call queue: one waits for the call's server to be up.
    const seen = await session(s, "slot_1", "until [ -e /workspace/bash-listening ]; do sleep 0.05; done; echo up");
    await seen.done;
    expect(seen.out()).toBe("up\n");
    expect((await refusal(open("slot_1", port))).status).toBe(502);
    // Nor does a session's command reach it: the call's loopback is not the sessions'.
    const dial = await session(s, "slot_1", `if (exec 3<>/dev/tcp/127.0.0.1/${port}) 2>/dev/null; then echo reached; else echo refused; fi`);
    await dial.done;
    expect(dial.out()).toBe("refused\n");
    // The call has read its own server's greeting (its marker follows the line it printed) before the reset cuts it:
    // on a loaded box the reset otherwise came first and the call had printed nothing yet.
    const read = await session(s, "slot_1", "until [ -e /workspace/bash-read ]; do sleep 0.05; done; echo read");
    await read.done;
    expect(read.out()).toBe("read\n");
    // The reset ends the call (and what it started) and the session.
    expect((await s.post("/reset", { slot_id: "slot_1" }, { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
    const answered = await call;
    expect(answered.json.output).toContain("hello bash");
    await idle.done;
  }, 120_000);

  it("a tunnel idle for --port-idle-timeout-s is closed; a reset ends open tunnels; no token is a 401; a paused slot is a 409", async () => {
    const port = 45_000 + Math.floor(Math.random() * 1000);
    const srv = await session(s, "slot_0", pyServer(port, `c.recv(1)`));
    await until(() => srv.out().includes("listening"), "silent server");
    // Idle: the server says nothing, the client says nothing; the sandbox server closes it (2 s here).
    const idleSock = await open("slot_0", port);
    // Meanwhile its relay runs as the slot's uid on the host, never as the server's root.
    const relays = relayUids();
    expect(relays.length).toBeGreaterThan(0);
    if (isRoot) expect(relays).toEqual(relays.map(() => SLOT_UID_BASE));
    await new Promise<void>((r) => idleSock.once("close", () => r()));

    const held = await open("slot_0", port);
    const closed = new Promise<void>((r) => held.once("close", () => r()));
    expect((await s.post("/reset", { slot_id: "slot_0" }, { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
    await closed;
    await srv.done;

    const noToken = await refusal(openSlotPort({ ...lease("slot_0"), container: { id: "c", index: 0, url: s.url, slots: 3 } } as LeasedSlot, port, { allowNetwork: false }));
    expect(noToken.status).toBe(401);
    const bad = await refusal(openSlotPort(lease("slot_9"), port, { allowNetwork: false }));
    expect(bad.status).toBe(404);

    const srv2 = await session(s, "slot_0", hello(port, "frozen"));
    await until(() => srv2.out().includes("listening"), "server before pause");
    expect((await s.post("/processes/freeze", { slot_id: "slot_0" }, { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
    const frozen = await refusal(open("slot_0", port));
    expect(frozen.status).toBe(409);
    expect((await s.post("/processes/thaw", { slot_id: "slot_0" }, { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
    expect((await readAll(await open("slot_0", port))).toString()).toBe("hello frozen\n");
    expect((await s.post("/reset", { slot_id: "slot_0" }, { authorization: `Bearer ${TOKEN}` })).status).toBe(200);
  }, 90_000);
});
