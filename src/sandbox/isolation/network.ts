import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { networkInterfaces } from "node:os";
import { join } from "node:path";
import { findExecutable } from "../../host/executables.js";

/**
 * "Network on" for a slot: the internet, never the host. A slot with `allow_network: true`
 * gets a network namespace of its own, linked to the outside by slirp4netns (a user-mode
 * TCP/IP stack from Debian, run as the slot's uid with host loopback disabled): its
 * connections leave through the host's ordinary sockets, so they reach what the host can
 * reach, minus what the slot's routing table makes unreachable. That table is written by
 * the server before the slot's first process starts, and the slot cannot change it (its
 * processes have no capability over that namespace). Unreachable:
 *  - the host's loopback: 127.0.0.0/8 is the namespace's own loopback, and slirp4netns's
 *    gateway alias for the host (10.0.2.2) is disabled (--disable-host-loopback);
 *  - every address of the host's interfaces (a listener on 0.0.0.0 is not reachable either);
 *  - link-local 169.254.0.0/16 (cloud metadata), always;
 *  - private and shared ranges (10/8, 172.16/12, 192.168/16, 100.64/10, 0/8) unless listed in
 *    `allowRanges` (`--net-allow-ranges`);
 *  - the rest of slirp4netns's own 10.0.2.0/24 (other addresses there are passed through
 *    to the real network): only the gateway and the DNS forwarder (10.0.2.3) stay.
 * DNS: the slot's /etc/resolv.conf names 10.0.2.3, which slirp4netns forwards to the host's
 * first nameserver. slirp4netns forwards every port of that address, not only DNS, so
 * the namespace also gets an nftables filter (set by the server before the slot's first
 * process, like the routes): to 10.0.2.3 only port 53 (UDP and TCP) passes, anything else
 * is rejected. Without `nft` (Debian: nftables) the forwarder stays off (fail closed: no
 * name resolution, /health and the start-up log say why). A host whose nameserver is a
 * loopback address gets no DNS forwarder either (it would open the host's loopback).
 * Works as root (slirp4netns runs as the slot's uid) and as non-root alike: the namespace
 * is made by `unshare --user --map-root-user --net` (the holder's own user namespace), the
 * routes are set in it, then bubblewrap starts the slot's sandbox in a nested user
 * namespace under the slot's uid.
 */

export const SLIRP_GATEWAY = "10.0.2.2";
export const SLIRP_DNS = "10.0.2.3";
/** Never reachable, whatever `allowRanges` says. */
export const LINK_LOCAL = "169.254.0.0/16";
export const PRIVATE_RANGES = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "0.0.0.0/8"];

export interface InternetAccess {
  slirp4netns: string;
  unshare: string;
  /** `ip -batch` lines run inside the slot's namespace before its sandbox starts. */
  routes: string[];
  /** Host file bound at the slot's /etc/resolv.conf. */
  resolvConf: string;
  /** No DNS forwarder (loopback resolver, or no nftables to confine it to DNS): slirp4netns runs with --disable-dns. */
  disableDns: boolean;
  /** Why there is no DNS forwarder, if there is none. */
  dnsReason?: string | undefined;
  /** nftables rules (`nft -f -`) confining the forwarder to DNS, run in the slot's namespace with the routes. */
  dnsFilter: string;
}

export type InternetProbe = { available: true; access: InternetAccess } | { available: false; reason: string };

export class NetworkRangeError extends Error {
  override name = "NetworkRangeError";
  readonly code = "bad_network_range";
}

/** Parses "a.b.c.d/n" (IPv4 only); throws NetworkRangeError naming the problem. */
export function parseCidr(cidr: string): { base: number; bits: number; text: string } {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(cidr.trim());
  const octets = m ? m.slice(1, 5).map(Number) : [];
  const bits = m ? Number(m[5]) : NaN;
  if (!m || octets.some((o) => o > 255) || bits > 32) throw new NetworkRangeError(`'${cidr}' is not an IPv4 range like 198.18.0.0/15`);
  const addr = ((octets[0]! << 24) | (octets[1]! << 16) | (octets[2]! << 8) | octets[3]!) >>> 0;
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  const base = (addr & mask) >>> 0;
  return { base, bits, text: `${[24, 16, 8, 0].map((s) => (base >>> s) & 255).join(".")}/${bits}` };
}

function overlaps(a: string, b: string): boolean {
  const x = parseCidr(a);
  const y = parseCidr(b);
  const bits = Math.min(x.bits, y.bits);
  const mask = bits === 0 ? 0 : (0xffffffff << (32 - bits)) >>> 0;
  return ((x.base & mask) >>> 0) === ((y.base & mask) >>> 0);
}

/** Validates `--net-allow-ranges` entries: IPv4 ranges, none touching link-local. */
export function checkAllowRanges(ranges: string[]): string[] {
  return ranges.map((r) => {
    const { text } = parseCidr(r);
    if (overlaps(text, LINK_LOCAL)) throw new NetworkRangeError(`'${r}' overlaps link-local ${LINK_LOCAL} (cloud metadata), which slots never reach`);
    if (overlaps(text, "127.0.0.0/8")) throw new NetworkRangeError(`'${r}' overlaps loopback: a slot's 127.0.0.0/8 is its own, the host's is never reachable`);
    return text;
  });
}

/** IPv4 addresses of the host's interfaces (loopback excluded). */
export function hostAddresses(): string[] {
  const out: string[] = [];
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) if (a.family === "IPv4" && !a.internal) out.push(a.address);
  }
  return out;
}

/** The routing table of a slot with network on (`ip -batch` lines). */
export function slotRoutes(allowRanges: string[], hostAddrs: string[]): string[] {
  const lines = ["link set lo up"];
  for (const r of [...PRIVATE_RANGES, LINK_LOCAL]) lines.push(`route add unreachable ${r}`);
  // slirp4netns's network: only its gateway and DNS forwarder.
  lines.push("route add unreachable 10.0.2.0/25", "route add unreachable 10.0.2.128/25");
  lines.push(`route add ${SLIRP_GATEWAY}/32 dev tap0`, `route add ${SLIRP_DNS}/32 dev tap0`);
  for (const r of allowRanges) lines.push(`route add ${r} via ${SLIRP_GATEWAY} dev tap0`);
  // Last and most specific: the host itself, even inside an allowed range.
  for (const a of hostAddrs) lines.push(`route add unreachable ${a}/32`);
  return lines;
}

function firstNameserver(): string | undefined {
  try {
    return /^\s*nameserver\s+(\S+)/m.exec(readFileSync("/etc/resolv.conf", "utf8"))?.[1];
  } catch {
    return undefined;
  }
}

/** Whether slots can get the internet here (slirp4netns and unshare installed), and how. */
export function probeInternet(stateDir: string, allowRanges: string[]): InternetProbe {
  const slirp4netns = findExecutable("slirp4netns");
  const unshare = findExecutable("unshare");
  if (!slirp4netns) return { available: false, reason: "slirp4netns is not installed (Debian: apt-get install slirp4netns)" };
  if (!unshare) return { available: false, reason: "unshare (util-linux) is not installed" };
  // A slot's process sessions join its network namespace with nsenter (slot-netns.ts).
  if (!findExecutable("nsenter")) return { available: false, reason: "nsenter (util-linux) is not installed" };
  if (!findExecutable("ip")) return { available: false, reason: "ip (iproute2) is not installed" };
  // slirp4netns makes its tap device through /dev/net/tun (a container needs it passed in).
  if (!existsSync("/dev/net/tun")) return { available: false, reason: "/dev/net/tun is missing (a container must be given the device)" };
  const ns = firstNameserver();
  const nft = findExecutable("nft");
  const dnsReason =
    !ns ? "the host has no nameserver in /etc/resolv.conf"
    : ns.startsWith("127.") || ns === "::1" || ns.includes(":") ? `the host's nameserver ${ns} is on its loopback (or IPv6), which slots never reach`
    : !nft ? "nft (Debian: nftables) is not installed: slirp4netns's forwarder passes every port of the host's nameserver, not only DNS, and cannot be confined without it"
    : undefined;
  const disableDns = dnsReason !== undefined;
  const resolvConf = join(stateDir, "resolv.conf");
  writeFileSync(resolvConf, disableDns ? `# no DNS: ${dnsReason}\n` : `nameserver ${SLIRP_DNS}\n`, { mode: 0o644 });
  return { available: true, access: { slirp4netns, unshare, routes: slotRoutes(allowRanges, hostAddresses()), resolvConf, disableDns, dnsReason, dnsFilter: disableDns ? "" : dnsFilterRules() } };
}

/** The forwarder at 10.0.2.3 answers DNS only: port 53, UDP and TCP; any other port is rejected in the slot's namespace. */
export function dnsFilterRules(): string {
  return [
    "table ip slotpool {",
    "  chain output {",
    "    type filter hook output priority 0; policy accept;",
    `    ip daddr ${SLIRP_DNS} udp dport 53 accept`,
    `    ip daddr ${SLIRP_DNS} tcp dport 53 accept`,
    `    ip daddr ${SLIRP_DNS} reject`,
    "  }",
    "}",
  ].join("\n");
}

/** What the network-on set-up shell says on stderr once unshare has made its namespaces. */
export const NET_READY_LINE = "slotpool-net-namespace-up\n";
/**
 * The network-on set-up shell, after unshare: wait for slirp4netns ("go" on stdin), set the
 * slot's routes ($1) and DNS-only filter ($2), forget the server's directory, become
 * bubblewrap. One line for a slot's command namespace and for process sessions.
 */
export const NET_SHELL = `read -r go && [ "$go" = go ] || exit 96; printf '%s\\n' "$1" | ip -batch - || exit 97; [ -z "$2" ] || printf '%s\\n' "$2" | nft -f - || exit 98; shift 2; unset PWD OLDPWD; exec "$@"`;
/** NET_SHELL that first says on stderr that its namespace is up (spawner.ts reads that line). */
export const NET_SETUP = `printf 'slotpool-net-namespace-up\\n' >&2; ${NET_SHELL}`;

/** slirp4netns on `pid`'s network namespace, as the slot's uid when the server is root; `ready` resolves once it is up. */
export function spawnSlirp4netns(net: InternetAccess, pid: number, uid: number, gid: number): { child: ChildProcess; ready: Promise<void> } {
  const child = spawn(
    net.slirp4netns,
    ["--configure", "--mtu=65520", "--disable-host-loopback", ...(net.disableDns ? ["--disable-dns"] : []), "--ready-fd=3", "--exit-fd=4", `--userns-path=/proc/${pid}/ns/user`, String(pid), "tap0"],
    { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"], env: {}, detached: true, ...(process.getuid?.() === 0 ? { uid, gid } : {}) },
  );
  let err = "";
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (d: string) => {
    err = (err + d).slice(-1000);
  });
  for (const stream of child.stdio) stream?.on("error", () => undefined);
  const ready = new Promise<void>((resolve, reject) => {
    (child.stdio[3] as NodeJS.ReadableStream).once("data", () => resolve());
    child.once("error", (e) => reject(new Error(`could not start slirp4netns: ${e.message}`)));
    child.once("exit", (code) => reject(new Error(`slirp4netns exited (code ${code}): ${err.trim()}`)));
  });
  return { child, ready };
}
