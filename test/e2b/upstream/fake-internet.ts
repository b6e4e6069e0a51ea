import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { findExecutable } from "../../../src/host/executables.js";
import { makeTestTlsFor, opensslMissing, type TestTls } from "../../support/test-tls.js";
import type { FakeInternetConfig } from "./fake-internet-hosts.js";

/**
 * "The internet" for E2B's own tests that curl public hosts from a sandbox (`https://1.1.1.1`,
 * `https://8.8.8.8`, `https://connectivitycheck.gstatic.com/generate_204`), with nothing leaving
 * the machine and nothing of the host's network changed:
 *
 * - a network namespace of the test's own (`wrap`) where the e2b-server, its sandbox servers and
 *   the SDK's test runner run, loopback up (the runner reaches the server there), its only other
 *   link a veth pair to
 * - a second namespace that owns those addresses: Cloudflare's and Google's answers
 *   (fake-internet-hosts.ts) over HTTPS with a certificate of a CA made for the run, and a DNS
 *   resolver at 8.8.8.8 for the names. The default route of the test's namespace leads there.
 *
 * A slot with network on reaches the internet through slirp4netns, which opens its connections
 * in the namespace its sandbox server runs in, and forwards DNS to the nameserver of the
 * resolv.conf that server sees: so the sandboxes land on this fake internet. Each wrapped
 * process also gets a mount namespace of its own where /etc/resolv.conf names 8.8.8.8 and
 * /etc/ssl/certs/ca-certificates.crt (what curl reads, and the 'base' sandbox's root is the
 * server's own system) holds the run's CA alone: the host's files are untouched.
 * Needs root (named network namespaces, veth). `remove()` deletes both namespaces (and the
 * veth with them) and the temp dir; it also runs at exit.
 */
export interface FakeInternet {
  /** `command args` in the test's network namespace and a mount namespace of its own (above). */
  wrap(command: string, args: string[]): { command: string; args: string[] };
  /** The CA the fake hosts' certificate is signed by. */
  caFile: string;
  /** The two network namespaces' names (`ip netns`): the test's, the internet's. */
  namespaces: [string, string];
  remove(): void;
}

/** The hosts, as E2B's tests reach them. */
export const FAKE_HOSTS = {
  cloudflare: "1.1.1.1",
  google: "8.8.8.8",
  /** What the fake DNS says connectivitycheck.gstatic.com is (one of Google's addresses). */
  connectivityCheck: "142.250.74.99",
} as const;

/** The veth pair's link net (TEST-NET-1: never on a real network). */
const LINK = { test: "192.0.2.1", internet: "192.0.2.2" } as const;
const BUNDLE = "/etc/ssl/certs/ca-certificates.crt";

/** Why the fake internet cannot be made here, or undefined. */
export function fakeInternetMissing(): string | undefined {
  if (process.getuid?.() !== 0) return "needs root: network namespaces of the test's own";
  for (const tool of ["ip", "nsenter", "unshare", "mount"]) if (!findExecutable(tool)) return `${tool} is not installed`;
  if (opensslMissing) return "openssl is not installed (the fake hosts' certificates)";
  if (!existsSync(BUNDLE)) return `no CA bundle at ${BUNDLE} to bind the run's CA over (Debian: ca-certificates)`;
  return undefined;
}

/** Namespaces of a run whose process is gone (killed before its clean-up ran): deleted. */
function removeStale(ip: (...args: string[]) => Buffer): void {
  for (const m of ip("netns", "list").toString().matchAll(/^slotpool-(?:e2b|inet)-(\d+)\b\S*/gm)) {
    try {
      process.kill(Number(m[1]), 0);
    } catch {
      try {
        ip("netns", "del", m[0]);
      } catch {
        /* gone meanwhile */
      }
    }
  }
}

export async function makeFakeInternet(): Promise<FakeInternet> {
  const testNs = `slotpool-e2b-${process.pid}`;
  const inetNs = `slotpool-inet-${process.pid}`;
  const dir = mkdtempSync(join(tmpdir(), "slotpool-fake-internet-"));
  let tls: TestTls | undefined;
  let hosts: ChildProcess | undefined;
  const ip = (...args: string[]) => execFileSync("ip", args, { stdio: "pipe" });
  const remove = (): void => {
    hosts?.kill("SIGKILL");
    for (const ns of [testNs, inetNs]) {
      try {
        ip("netns", "del", ns);
      } catch {
        /* not made, or gone already */
      }
    }
    tls?.remove();
    rmSync(dir, { recursive: true, force: true });
  };
  process.once("exit", remove);
  removeStale(ip);
  try {
    tls = makeTestTlsFor({
      caName: "slotpool fake internet test CA",
      cn: "fake internet",
      dns: ["connectivitycheck.gstatic.com", "one.one.one.one", "dns.google"],
      ips: [FAKE_HOSTS.cloudflare, FAKE_HOSTS.google],
    });
    ip("netns", "add", testNs);
    ip("netns", "add", inetNs);
    ip("-n", testNs, "link", "add", "eth0", "type", "veth", "peer", "name", "eth0", "netns", inetNs);
    ip("-n", testNs, "addr", "add", `${LINK.test}/24`, "dev", "eth0");
    ip("-n", inetNs, "addr", "add", `${LINK.internet}/24`, "dev", "eth0");
    for (const ns of [testNs, inetNs]) for (const link of ["lo", "eth0"]) ip("-n", ns, "link", "set", link, "up");
    for (const a of Object.values(FAKE_HOSTS)) ip("-n", inetNs, "addr", "add", `${a}/32`, "dev", "lo");
    // Everything not on the test's own loopback goes to the fake internet: nothing else is reachable.
    ip("-n", testNs, "route", "add", "default", "via", LINK.internet);
    writeFileSync(join(dir, "resolv.conf"), `nameserver ${FAKE_HOSTS.google}\n`);
    const config: FakeInternetConfig = {
      certFile: tls.certFile,
      keyFile: tls.keyFile,
      dns: FAKE_HOSTS.google,
      names: { "connectivitycheck.gstatic.com": FAKE_HOSTS.connectivityCheck, "one.one.one.one": FAKE_HOSTS.cloudflare, "dns.google": FAKE_HOSTS.google },
      hosts: [
        { address: FAKE_HOSTS.cloudflare, answers: { "/": [301, { location: "https://one.one.one.one/" }] } },
        { address: FAKE_HOSTS.google, answers: { "/": [302, { location: "https://dns.google/" }] } },
        { address: FAKE_HOSTS.connectivityCheck, answers: { "/generate_204": [204, {}] } },
      ],
    };
    const script = join(dirname(fileURLToPath(import.meta.url)), "fake-internet-hosts.ts");
    // nsenter, not `ip netns exec` (which remounts /sys): a plain process of the namespace.
    hosts = spawn("nsenter", [`--net=/run/netns/${inetNs}`, "--", process.execPath, "--import", "tsx", script, JSON.stringify(config)], { cwd: dirname(script), stdio: ["pipe", "pipe", "pipe"] });
    let err = "";
    hosts.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    await new Promise<void>((resolve, reject) => {
      hosts!.stdout!.once("data", () => resolve());
      hosts!.once("exit", (code) => reject(new Error(`the fake internet's hosts exited (${code}): ${err.trim()}`)));
    });
    const resolvConf = join(dir, "resolv.conf");
    const bundle = tls.caFile;
    return {
      caFile: tls.caFile,
      namespaces: [testNs, inetNs],
      wrap: (command, args) => ({
        command: "nsenter",
        args: [
          `--net=/run/netns/${testNs}`, "--", "unshare", "--mount", "--propagation", "private", "--",
          "sh", "-c", `mount --bind "$1" /etc/resolv.conf && mount --bind "$2" ${BUNDLE} && shift 2 && exec "$@"`,
          "sh", resolvConf, bundle, command, ...args,
        ],
      }),
      remove() {
        process.removeListener("exit", remove);
        remove();
      },
    };
  } catch (err) {
    process.removeListener("exit", remove);
    remove();
    throw err;
  }
}
