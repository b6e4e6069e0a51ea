import type { ChildProcess } from "node:child_process";
import { readlinkSync } from "node:fs";
import { NET_SHELL, spawnSlirp4netns, type InternetAccess } from "./network.js";

/**
 * Internet for a process session (network on): the same design as a slot's network-on
 * command namespace (spawner.ts, network.ts). `unshare` makes a user and a network
 * namespace, a shell waits for "go" on stdin, sets the slot's routes (no host, no private
 * ranges, no link-local) and becomes bubblewrap; slirp4netns, started here as the slot's
 * uid on that namespace, links it to the internet. The shell line (routes, DNS-only filter)
 * and slirp4netns's start are network.ts's, shared with the slots' command namespaces.
 */

/** The program and arguments that start `bwrapCmd` inside a fresh network namespace with the slot's routes. */
export function networkWrapped(net: InternetAccess, bwrapCmd: string[]): { file: string; args: string[] } {
  return { file: net.unshare, args: ["--user", "--map-root-user", "--net", "--", "/bin/sh", "-c", NET_SHELL, "slotpool-net", net.routes.join("\n"), net.dnsFilter, ...bwrapCmd] };
}

function nsLink(pid: string, ns: string): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/${ns}`);
  } catch {
    return undefined;
  }
}

/** Starts slirp4netns for `pid`'s network namespace (once unshare made it); resolves with it when it is up. */
export async function startSlirp(pid: number, net: InternetAccess, uid: number, gid: number, alive: () => boolean): Promise<ChildProcess> {
  // Until unshare has run, /proc/<pid>/ns/* are the host's: never hand those to slirp4netns.
  const own = { net: nsLink("self", "net"), user: nsLink("self", "user") };
  const deadline = performance.now() + 5_000;
  for (;;) {
    const n = nsLink(String(pid), "net");
    const u = nsLink(String(pid), "user");
    if (n && u && n !== own.net && u !== own.user) break;
    if (!alive() || performance.now() > deadline) throw new Error("the session's network namespace did not appear");
    await new Promise((r) => setTimeout(r, 1));
  }
  const { child: slirp, ready } = spawnSlirp4netns(net, pid, uid, gid);
  await ready;
  return slirp;
}
