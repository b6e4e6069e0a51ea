import { execFileSync, spawn } from "node:child_process";

/**
 * Hosts "outside the machine" for network tests, as test/security/network-hygiene.test.ts
 * makes them: a network namespace the test creates and removes, joined to the host by a veth
 * pair, holding `count` addresses of 198.18.N.0/29 (a benchmark range: not private, so a slot
 * with network on may reach it), with one HTTP server answering `outside <the address asked>`
 * on `port` of each. Nothing leaves the machine. Needs root (network namespaces, veth).
 */
export interface OutsideHosts {
  addresses: string[];
  port: number;
  remove(): void;
}

export async function makeOutsideHosts(count: number, port = 18081): Promise<OutsideHosts> {
  if (count < 1 || count > 5) throw new Error("1 to 5 outside addresses (a /29)");
  const n = (process.pid % 200) + 20;
  const ns = `slotpool-out-${process.pid}-${port}`;
  const veth = `so${process.pid}${port}`.slice(0, 15);
  const addresses = Array.from({ length: count }, (_, i) => `198.18.${n}.${i + 2}`);
  const ip = (...args: string[]) => execFileSync("ip", args, { stdio: "pipe" });
  ip("netns", "add", ns);
  const remove = (): void => {
    for (const args of [["link", "del", veth], ["netns", "del", ns]]) {
      try {
        ip(...args);
      } catch {
        /* gone already */
      }
    }
  };
  try {
    ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns);
    ip("addr", "add", `198.18.${n}.1/29`, "dev", veth);
    ip("link", "set", veth, "up");
    for (const a of addresses) ip("-n", ns, "addr", "add", `${a}/29`, "dev", "eth0");
    ip("-n", ns, "link", "set", "eth0", "up");
    ip("-n", ns, "link", "set", "lo", "up");
    // nsenter, not `ip netns exec` (which remounts /sys): the server is a plain process of the namespace.
    const script = `require("http").createServer((q, r) => r.end("outside " + q.socket.localAddress)).listen(${port}, "0.0.0.0", () => console.log("up"))`;
    const server = spawn("nsenter", [`--net=/var/run/netns/${ns}`, process.execPath, "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    await new Promise<void>((resolve, reject) => {
      server.stdout!.once("data", () => resolve());
      server.once("exit", (code) => reject(new Error(`the outside hosts' server exited (${code})`)));
    });
    return {
      addresses,
      port,
      remove() {
        server.kill("SIGKILL");
        remove();
      },
    };
  } catch (err) {
    remove();
    throw err;
  }
}
