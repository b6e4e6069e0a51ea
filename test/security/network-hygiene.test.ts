/**
 * Network on = the internet, never the host (issue 11, hole 2). The test stands up its own
 * "outside" host: a network namespace it creates (veth pair, addresses 198.18.N.2, a TEST-NET
 * benchmark range that is not private, and 10.199.N.2, a private one), with an HTTP server
 * inside; nothing leaves the machine. A slot with network on reaches it; it reaches neither a
 * listener on the host's 127.0.0.1, nor the sandbox server's port (by 127.0.0.1, slirp's
 * host alias 10.0.2.2 or any host address), nor link-local, nor the private address unless
 * the server was started with --net-allow-ranges. `allow_network: false` stays loopback-only.
 * Creating network namespaces needs root: without it only the host-side checks run.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { createServer, type Server } from "node:http";
import { networkInterfaces } from "node:os";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, startAttackServer, type AttackServer } from "./support.js";

const N = (process.pid % 200) + 20;
const NS = `slotpool-out-${process.pid}`;
const VETH = `spo${process.pid}`.slice(0, 15);
const OUTSIDE = `198.18.${N}.2`;
const OUTSIDE_PRIVATE = `10.199.${N}.2`;
const PORT = 18080;

let outside: ChildProcess | undefined;
let hostListener: Server;
let hostPort = 0;
let server: AttackServer;
let allowing: AttackServer;

function ip(...args: string[]): void {
  execFileSync("ip", args, { stdio: "pipe" });
}

async function makeOutsideHost(): Promise<void> {
  ip("netns", "add", NS);
  ip("link", "add", VETH, "type", "veth", "peer", "name", "eth0", "netns", NS);
  ip("addr", "add", `198.18.${N}.1/30`, "dev", VETH);
  ip("addr", "add", `10.199.${N}.1/30`, "dev", VETH);
  ip("link", "set", VETH, "up");
  ip("-n", NS, "addr", "add", `${OUTSIDE}/30`, "dev", "eth0");
  ip("-n", NS, "addr", "add", `${OUTSIDE_PRIVATE}/30`, "dev", "eth0");
  ip("-n", NS, "link", "set", "eth0", "up");
  ip("-n", NS, "link", "set", "lo", "up");
  outside = spawn("ip", ["netns", "exec", NS, process.execPath, "-e", `require("http").createServer((q, r) => r.end("outside-ok")).listen(${PORT}, "0.0.0.0", () => console.log("up"))`], { stdio: ["ignore", "pipe", "inherit"] });
  await new Promise<void>((resolve, reject) => {
    outside!.stdout!.once("data", () => resolve());
    outside!.once("exit", (code) => reject(new Error(`outside host server exited (${code})`)));
  });
}

function removeOutsideHost(): void {
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

beforeAll(async () => {
  if (isRoot) await makeOutsideHost();
  hostListener = createServer((_q, r) => r.end("host-secret"));
  await new Promise<void>((r) => hostListener.listen(0, "0.0.0.0", r));
  hostPort = (hostListener.address() as { port: number }).port;
  // After the outside host exists: the veth's host-side addresses count as the host's.
  [server, allowing] = await Promise.all([startAttackServer({ slots: 2 }), startAttackServer({ slots: 1, extraArgs: ["--net-allow-ranges", `10.199.${N}.0/30`] })]);
}, 120_000);

afterAll(async () => {
  await Promise.all([server?.stop(), allowing?.stop()]);
  await new Promise((r) => hostListener?.close(r));
  if (isRoot) removeOutsideHost();
});

/** `curl` from slot 0 with network on; prints the body or "refused <curl exit code>". */
async function fetchFromSlot(target: AttackServer, url: string, allowNetwork = true): Promise<string> {
  const r = await target.bash(0, `curl -sS -m 5 ${url} 2>/dev/null || echo "refused $?"`, { allowNetwork });
  expect(r.metadata.sandboxed).toBe(true);
  return r.output.trim();
}

function hostAddresses(): string[] {
  return Object.values(networkInterfaces())
    .flat()
    .filter((a) => a && a.family === "IPv4")
    .map((a) => a!.address);
}

describe("a slot with network on reaches the internet, never the host", () => {
  it.runIf(isRoot)("reaches a host outside the machine's own addresses (the test's network namespace), by bash and bash_stateful", async () => {
    expect(await fetchFromSlot(server, `http://${OUTSIDE}:${PORT}/`)).toBe("outside-ok");
    const r = await server.tool(1, "bash_stateful", { command: `curl -sS -m 5 http://${OUTSIDE}:${PORT}/`, allow_network: true, require_sandbox: true });
    expect(r.output.trim()).toBe("outside-ok");
  }, 60_000);

  it("cannot reach a listener on the host's loopback, nor the sandbox server's port, by any host address", async () => {
    const serverPort = new URL(server.url).port;
    for (const addr of ["127.0.0.1", "10.0.2.2", ...hostAddresses()]) {
      expect(await fetchFromSlot(server, `http://${addr}:${hostPort}/`), `host listener via ${addr}`).toMatch(/^refused/);
      expect(await fetchFromSlot(server, `http://${addr}:${serverPort}/health`), `sandbox server via ${addr}`).toMatch(/^refused/);
    }
    // The host itself reaches its listener: the refusals above are the slot's walls.
    expect(await (await fetch(`http://127.0.0.1:${hostPort}/`)).text()).toBe("host-secret");
  }, 120_000);

  it("has link-local and private ranges unreachable, and cannot change its routes", async () => {
    const r = await server.bash(0, "for a in 169.254.169.254 10.1.2.3 172.16.0.1 192.168.1.1 100.64.0.1 10.0.2.77; do ip route get $a 2>&1 | head -1; done; ip route del unreachable 10.0.0.0/8 2>&1; echo rc=$?", { allowNetwork: true });
    const lines = r.output.split("\n");
    for (const l of lines.slice(0, 6)) expect(l).toMatch(/unreachable|No route to host/i);
    expect(r.output).toMatch(/Operation not permitted/);
    expect(r.output).not.toMatch(/rc=0/);
  }, 60_000);

  it.runIf(isRoot)("reaches a private address only when the server lists its range (--net-allow-ranges)", async () => {
    expect(await fetchFromSlot(server, `http://${OUTSIDE_PRIVATE}:${PORT}/`)).toMatch(/^refused/);
    expect(await fetchFromSlot(allowing, `http://${OUTSIDE_PRIVATE}:${PORT}/`)).toBe("outside-ok");
    // The host's own address inside the allowed range stays unreachable.
    expect(await fetchFromSlot(allowing, `http://10.199.${N}.1:${hostPort}/`)).toMatch(/^refused/);
  }, 60_000);

  it("allow_network: false stays loopback-only (no route anywhere, the outside host included)", async () => {
    const r = await server.bash(0, "ip -o -4 addr | awk '{print $2}'", { allowNetwork: false });
    expect(r.output.trim()).toBe("lo");
    expect(r.metadata.network_isolated).toBe(true);
    if (isRoot) expect(await fetchFromSlot(server, `http://${OUTSIDE}:${PORT}/`, false)).toMatch(/^refused/);
  }, 60_000);
});
