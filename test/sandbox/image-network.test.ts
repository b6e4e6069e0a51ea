import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createServer, type Server } from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, readEvents } from "./helpers.js";
import { busyboxImage } from "../support/test-images.js";
import { call, imageFixture, imagesMissing, resetInto, type ImageFixture } from "../support/image-server.js";

/**
 * Network on in an image root: the internet, never the host, as for any slot (network.ts).
 * The "internet" is a host this test makes in a network namespace of its own (a veth pair,
 * 198.18.N.2, a benchmark range that is not private; root only); the host's own listeners
 * (on 0.0.0.0, so on every host address and 127.0.0.1) must stay unreachable either way. The
 * image's commands, terminal and process sessions share one network namespace per slot,
 * made inside the slot's own user namespace.
 */
const N = (process.pid % 200) + 20;
const NS = `slotpool-imgnet-${process.pid}`;
const VETH = `spi${process.pid}`.slice(0, 15);
const OUTSIDE = `198.18.${N}.2`;
const PORT = 18181;

function ip(...args: string[]): void {
  execFileSync("ip", args, { stdio: "pipe" });
}

describe.skipIf(imagesMissing !== undefined)(`network in an image root${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let f: ImageFixture;
  let outside: ChildProcess | undefined;
  let hostListener: Server;
  let hostPort = 0;

  beforeAll(async () => {
    if (isRoot) {
      ip("netns", "add", NS);
      ip("link", "add", VETH, "type", "veth", "peer", "name", "eth0", "netns", NS);
      ip("addr", "add", `198.18.${N}.1/30`, "dev", VETH);
      ip("link", "set", VETH, "up");
      ip("-n", NS, "addr", "add", `${OUTSIDE}/30`, "dev", "eth0");
      ip("-n", NS, "link", "set", "eth0", "up");
      ip("-n", NS, "link", "set", "lo", "up");
      outside = spawn("ip", ["netns", "exec", NS, process.execPath, "-e", `require("http").createServer((q, r) => r.end("outside-ok")).listen(${PORT}, "0.0.0.0", () => console.log("up"))`], { stdio: ["ignore", "pipe", "inherit"] });
      await new Promise<void>((resolve, reject) => {
        outside!.stdout!.once("data", () => resolve());
        outside!.once("exit", (code) => reject(new Error(`outside host exited (${code})`)));
      });
    }
    hostListener = createServer((_q, r) => r.end("host-secret"));
    await new Promise<void>((r) => hostListener.listen(0, "0.0.0.0", r));
    hostPort = (hostListener.address() as { port: number }).port;
    f = await imageFixture({ busybox: busyboxImage() }, { slots: 2 });
    await resetInto(f.server, 0, f.refs.busybox!);
  }, 240_000);

  afterAll(async () => {
    await f?.stop();
    await new Promise((r) => hostListener?.close(r));
    if (isRoot) {
      outside?.kill("SIGKILL");
      try {
        ip("link", "del", VETH);
      } catch {
        /* gone with the namespace */
      }
      try {
        ip("netns", "del", NS);
      } catch {
        /* never made */
      }
    }
  });

  // busybox's nc (its wget, statically linked against glibc, cannot resolve even an address without the image's NSS).
  const get = (host: string, port: number | string, path = "/") => `printf 'GET ${path} HTTP/1.0\\r\\n\\r\\n' | nc -w 5 ${host} ${port} 2>/dev/null | tail -1 | grep . || echo refused`;
  const fetchFrom = async (url: string, allowNetwork: boolean): Promise<string> => {
    const u = new URL(url);
    const r = await call(f.server, 0, "bash", { command: get(u.hostname, u.port, u.pathname), allow_network: allowNetwork });
    return r.output;
  };

  it.skipIf(!isRoot)("with allow_network a command reaches the outside (skipped without root: no network namespace for the outside host)", async () => {
    expect(await fetchFrom(`http://${OUTSIDE}:${PORT}/`, true)).toBe("outside-ok");
    expect(await fetchFrom(`http://${OUTSIDE}:${PORT}/`, false)).toBe("refused");
  });

  it("with or without network, the host is never reachable: not its 127.0.0.1, not slirp's host alias, not the sandbox server", async () => {
    const server = new URL(f.server.url);
    for (const on of [true, false]) {
      expect(await fetchFrom(`http://127.0.0.1:${hostPort}/`, on)).toBe("refused");
      expect(await fetchFrom(`http://10.0.2.2:${hostPort}/`, on)).toBe("refused");
      expect(await fetchFrom(`http://127.0.0.1:${server.port}/health`, on)).toBe("refused");
    }
  });

  it.skipIf(!isRoot)("a terminal and a process session with network on reach the outside too, as the image's user (skipped without root: no outside host)", async () => {
    const t = await call(f.server, 0, "bash_stateful", { command: get(OUTSIDE, PORT), allow_network: true });
    expect(t.output).toBe("outside-ok");
    const res = await fetch(`${f.server.url}/processes/start`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ slot_id: "slot_0", cmd: "/bin/sh", args: ["-c", `${get(OUTSIDE, PORT)}; id -u; ${get("127.0.0.1", hostPort)}`], envs: {}, stdin: false, allow_network: true }),
    });
    const events: Array<{ type: string; data?: string }> = [];
    await readEvents(res, events);
    expect(events.filter((e) => e.type === "stdout").map((e) => Buffer.from(e.data!, "base64").toString()).join("")).toBe("outside-ok\n0\nrefused\n");
  });
});
