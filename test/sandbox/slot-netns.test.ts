import { connect } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer, readEvents } from "./helpers.js";

/**
 * One network namespace per slot, shared by its process sessions (issue 30): a server one
 * command starts on 127.0.0.1 answers the slot's other commands, as in a VM (E2B code runs
 * `git daemon` in the background and clones from it); a sibling slot and the host cannot
 * reach it; a reset leaves nothing listening for the next trajectory.
 */

interface Ev {
  type: string;
  pid?: number;
  data?: string;
  exit_code?: number;
}

async function start(s: TestServer, slot: string, script: string, allowNetwork = false) {
  const res = await fetch(s.url + "/processes/start", {
    method: "POST",
    headers: { "content-type": "application/json" },
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
  return { events, done, out };
}

/** Runs a script to its end in a session of `slot`; its output. */
async function run(s: TestServer, slot: string, script: string, allowNetwork = false): Promise<string> {
  const p = await start(s, slot, script, allowNetwork);
  await p.done;
  return p.out();
}

async function until(cond: () => boolean, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

const PORT = 47_000 + Math.floor(Math.random() * 1000);
/** A server on the slot's 127.0.0.1:PORT answering `pong-<tag>` to each connection. */
const serve = (tag: string) =>
  `exec /usr/bin/python3 -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", ${PORT})); s.listen(8)
print("listening", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"pong-${tag}\\n"); c.close()'`;
/** Connects to the slot's 127.0.0.1:PORT from another command: its answer, or `refused`. */
const dial = `if { exec 3<>/dev/tcp/127.0.0.1/${PORT}; } 2>/dev/null; then head -n 1 <&3; else echo refused; fi`;
/** Sockets listening in the command's namespace (TCP state 0A in /proc/net/tcp and tcp6). */
const listeners = `cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A"' | wc -l`;

function hostDial(): Promise<string> {
  return new Promise((resolve) => {
    const c = connect(PORT, "127.0.0.1");
    let got = "";
    c.on("data", (d) => (got += d.toString()));
    c.on("error", () => resolve("refused"));
    c.on("close", () => resolve(got || "refused"));
    c.setTimeout(3000, () => c.destroy());
  });
}

describe("a slot's network namespace, shared by its commands", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 2 });
  }, 90_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("a server one command starts on 127.0.0.1 answers the slot's other commands; a sibling slot and the host cannot reach it; a reset leaves nothing listening", async () => {
    const server = await start(s, "slot_0", serve("slot0"));
    await until(() => server.out().includes("listening"));
    // Another command of the same slot reaches it, twice (two more sandboxes joining the namespace).
    expect(await run(s, "slot_0", dial)).toBe("pong-slot0\n");
    expect(await run(s, "slot_0", dial)).toBe("pong-slot0\n");
    // The sibling slot's loopback is its own; the host's is another one still.
    expect(await run(s, "slot_1", dial)).toBe("refused\n");
    expect(await hostDial()).not.toContain("pong-slot0");
    expect(await run(s, "slot_1", listeners)).toBe("0\n");
    // The sibling may use the same port for a server of its own: no clash, each answers its own slot.
    const other = await start(s, "slot_1", serve("slot1"));
    await until(() => other.out().includes("listening"));
    expect(await run(s, "slot_1", dial)).toBe("pong-slot1\n");
    expect(await run(s, "slot_0", dial)).toBe("pong-slot0\n");

    expect((await s.post("/reset", { slot_id: "slot_0" })).json.success).toBe(true);
    await server.done;
    // The next trajectory: a fresh namespace, nothing listening, the old port free.
    expect(await run(s, "slot_0", `${listeners}; ${dial}`)).toBe("0\nrefused\n");
    expect(await run(s, "slot_1", dial)).toBe("pong-slot1\n");
    expect((await s.post("/reset", { slot_id: "slot_1" })).json.success).toBe(true);
    await other.done;
  }, 90_000);

  it("with network on, too: the slot's commands share its internet namespace and its loopback", async () => {
    const health = await s.get("/health");
    const server = await start(s, "slot_0", serve("net"), true);
    await until(() => server.out().includes("listening"));
    const seen = await run(s, "slot_0", `${dial}; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '`, true);
    // Where the server offers internet (slirp4netns) the namespace has its tap0; else loopback only.
    expect(seen).toBe(`pong-net\n${health.json.internet === "slirp4netns" ? "lo tap0 " : "lo "}`);
    expect(await run(s, "slot_1", dial, true)).toBe("refused\n");
    expect((await s.post("/reset", { slot_id: "slot_0" })).json.success).toBe(true);
    await server.done;
    expect(await run(s, "slot_0", dial, true)).toBe("refused\n");
  }, 90_000);
});
