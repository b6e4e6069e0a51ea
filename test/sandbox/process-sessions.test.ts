import { createServer, type Server } from "node:net";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer, readEvents } from "./helpers.js";

/** Process sessions (`/processes/*`): long-lived processes a slot runs outside its queue. */
interface Ev {
  type: string;
  pid?: number;
  data?: string;
  exit_code?: number;
  signal?: string | null;
}

/** Opens a streaming route; returns the events seen so far and a promise of the end. */
async function open(s: TestServer, path: string, body: unknown) {
  const res = await fetch(s.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  const events: Ev[] = [];
  if (res.status !== 200) return { status: res.status, events, text: await res.text(), done: Promise.resolve(), out: () => "" };
  const done = readEvents(res, events);
  const out = (type = "stdout") =>
    events
      .filter((e) => e.type === type)
      .map((e) => Buffer.from(e.data!, "base64").toString("utf8"))
      .join("");
  return { status: 200, events, text: "", done, out };
}

async function until(cond: () => boolean, timeoutMs = 10_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("process sessions", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 2 });
  }, 90_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("streams stdout and stderr, ends with the exit code, sees the workspace at the alias too", async () => {
    await s.bash(0, "echo hi > f.txt");
    const p = await open(s, "/processes/start", { slot_id: "slot_0", cmd: "/bin/bash", args: ["-c", "cat /home/user/f.txt; echo err >&2; pwd; exit 3"], workspace_alias: "/home/user", cwd: "/home/user", envs: { HOME: "/home/user" } });
    await p.done;
    expect(p.events[0]).toMatchObject({ type: "start" });
    expect(p.out()).toBe("hi\n/home/user\n");
    expect(p.out("stderr")).toBe("err\n");
    expect(p.events.at(-1)).toMatchObject({ type: "end", exit_code: 3, signal: null });
  });

  it("keeps a process running across calls: stdin, list, connect from a second client, SIGKILL", async () => {
    const p = await open(s, "/processes/start", { slot_id: "slot_1", cmd: "/bin/bash", args: ["-c", "while read l; do echo got:$l; done"], stdin: true, tag: "echoer" });
    await until(() => p.events.length > 0);
    const pid = p.events[0]!.pid!;
    // Other calls run meanwhile on the slot (the session is outside its queue).
    expect((await s.bash(1, "echo busy")).output).toBe("busy");
    const listed = await s.post("/processes/list", { slot_id: "slot_1" });
    expect(listed.json.processes).toEqual([expect.objectContaining({ pid, tag: "echoer", cmd: "/bin/bash" })]);
    expect((await s.post("/processes/list", { slot_id: "slot_0" })).json.processes).toEqual([]);
    const second = await open(s, "/processes/connect", { slot_id: "slot_1", pid });
    expect((await s.post("/processes/input", { slot_id: "slot_1", pid, data: Buffer.from("one\n").toString("base64") })).status).toBe(200);
    await until(() => p.out().includes("got:one") && second.out().includes("got:one"));
    // Another slot cannot reach it.
    expect((await s.post("/processes/input", { slot_id: "slot_0", pid, data: "" })).status).toBe(404);
    expect((await s.post("/processes/signal", { slot_id: "slot_1", pid, signal: "SIGKILL" })).status).toBe(200);
    await Promise.all([p.done, second.done]);
    expect(p.events.at(-1)).toMatchObject({ type: "end", exit_code: -1, signal: "SIGKILL" });
    expect(second.events.at(-1)).toMatchObject({ type: "end", signal: "SIGKILL" });
    expect((await s.post("/processes/list", { slot_id: "slot_1" })).json.processes).toEqual([]);
  });

  it("SIGTERM reaches the program; a reset kills what is left", async () => {
    const t = await open(s, "/processes/start", { slot_id: "slot_0", cmd: "/bin/bash", args: ["-c", "trap 'echo term; exit 7' TERM; echo trapped; while true; do sleep 0.05; done"] });
    // The trap is set once the program says so (not after "long enough").
    await until(() => t.out().includes("trapped"));
    await s.post("/processes/signal", { slot_id: "slot_0", pid: t.events[0]!.pid!, signal: "SIGTERM" });
    await t.done;
    expect(t.out()).toContain("term");
    const left = await open(s, "/processes/start", { slot_id: "slot_0", cmd: "/bin/sleep", args: ["600"] });
    await until(() => left.events.length > 0);
    expect((await s.post("/reset", { slot_id: "slot_0" })).json.success).toBe(true);
    await left.done;
    expect(left.events.at(-1)).toMatchObject({ type: "end", signal: "SIGKILL" });
  });

  it("network: allow_network gets the slot's own namespace (tap0, never the host's loopback), else loopback only; stdin still works", async () => {
    const health = await s.get("/health");
    const listener: Server = createServer((c) => {
      c.on("error", () => undefined);
      c.end("pong\n");
    });
    await new Promise<void>((r) => listener.listen(0, "127.0.0.1", () => r()));
    const port = (listener.address() as AddressInfo).port;
    try {
      const script = `exec 3<>/dev/tcp/127.0.0.1/${port} && head -c 4 <&3; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; read l; echo got:$l`;
      const run = async (allow: boolean) => {
        const p = await open(s, "/processes/start", { slot_id: "slot_1", cmd: "/bin/bash", args: ["-c", script], allow_network: allow, stdin: true });
        await until(() => p.events.length > 0);
        await s.post("/processes/input", { slot_id: "slot_1", pid: p.events[0]!.pid!, data: Buffer.from("line\n").toString("base64") });
        await p.done;
        return p.out();
      };
      const on = await run(true);
      expect(on).not.toContain("pong");
      expect(on).toContain("got:line");
      // Where the server offers internet (slirp4netns), the session has its own tap0; else loopback only.
      expect(on).toContain(health.json.internet === "slirp4netns" ? "lo tap0" : "lo ");
      const off = await run(false);
      expect(off).not.toContain("pong");
      expect(off).toContain("lo got:line");
    } finally {
      listener.close();
    }
  });

  it("network: a session's DNS forwarder answers DNS only, as a command's does (port 53 passes, other ports of the nameserver are refused)", async (ctx) => {
    const health = await s.get("/health");
    if (health.json.internet !== "slirp4netns" || health.json.dns !== "dns_only") ctx.skip("no slirp4netns or no DNS-only filter here (/health says so)");
    const script = 'for p in 53 80 8080; do timeout 5 bash -c "exec 3<>/dev/tcp/10.0.2.3/$p" 2>/dev/null; echo "tcp$p=$?"; done';
    const p = await open(s, "/processes/start", { slot_id: "slot_0", cmd: "/bin/bash", args: ["-c", script], allow_network: true });
    await p.done;
    const out = p.out();
    expect(out).toContain("tcp53=0"); // control: the forwarder is reachable
    expect(out).toContain("tcp80=1");
    expect(out).toContain("tcp8080=1");
  }, 60_000);

  it("refuses bad bodies with the field named", async () => {
    const r = await s.post("/processes/start", { slot_id: "slot_0", cmd: "" });
    expect(r.status).toBe(400);
    expect(r.json.field).toBe("cmd");
    const a = await s.post("/processes/start", { slot_id: "slot_0", cmd: "/bin/true", workspace_alias: "/etc" });
    expect(a.status).toBe(400);
    expect((await s.post("/processes/connect", { slot_id: "slot_0", pid: 99999 })).status).toBe(404);
    const nul = await s.post("/processes/start", { slot_id: "slot_0", cmd: "/bin/echo", args: ["a\u0000b"] });
    expect(nul.status).toBe(400);
    expect(nul.json.field).toBe("args.0");
  });
});
