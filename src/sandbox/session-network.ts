import { spawn, type ChildProcess } from "node:child_process";
import { readlinkSync } from "node:fs";
import type { InternetAccess } from "./network.js";

/**
 * Internet for a process session (network on): the same design as a slot's network-on
 * command namespace (spawner.ts, network.ts). `unshare` makes a user and a network
 * namespace, a shell waits for "go" on stdin, sets the slot's routes (no host, no private
 * ranges, no link-local) and becomes bubblewrap; slirp4netns, started here as the slot's
 * uid on that namespace, links it to the internet. Kept apart from the Holder's copy so the
 * two can evolve alone; the shell line is the same.
 */

/** The shell unshare runs: wait for "go", set the routes, become bubblewrap. */
export const SESSION_NET_SETUP = `read -r go && [ "$go" = go ] || exit 96; printf '%s\\n' "$1" | ip -batch - || exit 97; shift; exec "$@"`;

/** The program and arguments that start `bwrapCmd` inside a fresh network namespace with the slot's routes. */
export function networkWrapped(net: InternetAccess, bwrapCmd: string[]): { file: string; args: string[] } {
  return { file: net.unshare, args: ["--user", "--map-root-user", "--net", "--", "/bin/sh", "-c", SESSION_NET_SETUP, "slotpool-net", net.routes.join("\n"), ...bwrapCmd] };
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
  const slirp = spawn(
    net.slirp4netns,
    ["--configure", "--mtu=65520", "--disable-host-loopback", ...(net.disableDns ? ["--disable-dns"] : []), "--ready-fd=3", "--exit-fd=4", `--userns-path=/proc/${pid}/ns/user`, String(pid), "tap0"],
    { stdio: ["ignore", "ignore", "pipe", "pipe", "pipe"], env: {}, detached: true, ...(process.getuid?.() === 0 ? { uid, gid } : {}) },
  );
  let err = "";
  slirp.stderr!.setEncoding("utf8");
  slirp.stderr!.on("data", (d: string) => {
    err = (err + d).slice(-1000);
  });
  for (const stream of slirp.stdio) stream?.on("error", () => undefined);
  await new Promise<void>((resolve, reject) => {
    (slirp.stdio[3] as NodeJS.ReadableStream).once("data", () => resolve());
    slirp.once("error", (e) => reject(new Error(`could not start slirp4netns: ${e.message}`)));
    slirp.once("exit", (code) => reject(new Error(`slirp4netns exited (code ${code}): ${err.trim()}`)));
  });
  return slirp;
}
