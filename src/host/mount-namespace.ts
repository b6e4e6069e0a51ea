import { spawn, spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { constants } from "node:os";
import { findExecutable } from "./executables.js";

/**
 * A sandbox server mounts: a tmpfs per slot (the disk bound) and overlayfs views of
 * templates. It does so in namespaces of its own, where those mounts are the namespace's
 * and vanish with its last process, even when the server is killed with SIGKILL:
 *
 * - as root, a mount namespace of its own (`unshare --mount`, private propagation);
 * - not root, a user namespace of its own holding a mount namespace (`unshare --user
 *   --map-current-user --mount --keep-caps`): the server keeps its uid, so nothing else
 *   changes for it, and holds capabilities over that namespace only (never over the
 *   host), enough to mount a tmpfs and overlayfs there. Its children inherit them
 *   (ambient); every command a slot runs starts through `setpriv` dropping them
 *   (`withoutCapabilities`), bubblewrap included, which refuses to start with them.
 *
 * Shared by the local launcher (src/pool/sandbox-process.ts), which starts servers with the
 * prefix, and the CLI, which re-executes itself under it when started by hand or by an
 * image entrypoint.
 */

/** Set in the environment of a server that already runs in namespaces of its own. */
export const OWN_MOUNT_NAMESPACE_ENV = "SLOTPOOL_OWN_MOUNT_NS";

/** util-linux `unshare` (it execs its command: the pid stays the command's), or undefined. */
export function findUnshare(): string | undefined {
  return findExecutable("unshare") ?? undefined;
}

/** util-linux `setpriv` (it execs its command: the pid stays the command's), or undefined. */
export function findSetpriv(): string | undefined {
  return findExecutable("setpriv") ?? undefined;
}

/** The argv prefix that runs a command in namespaces of its own (see above), for root or not. */
export function ownNamespacePrefix(unshare: string): string[] {
  return isRoot()
    ? [unshare, "--mount", "--propagation", "private", "--"]
    : [unshare, "--user", "--map-current-user", "--mount", "--propagation", "private", "--keep-caps", "--"];
}

export type MountNamespacePlan = { run: "here"; reason?: string } | { run: "reexec"; prefix: string[] };

/**
 * Whether this process should re-execute itself in namespaces of its own: not when already
 * there (the marker), and not when `unshare` (or, not root, `setpriv`) is missing or the
 * kernel refuses (root without CAP_SYS_ADMIN, e.g. a default Docker container; unprivileged
 * user namespaces turned off): the server then cannot mount either, and says so.
 */
export function mountNamespacePlan(env: NodeJS.ProcessEnv = process.env): MountNamespacePlan {
  if (env[OWN_MOUNT_NAMESPACE_ENV] === "1") return { run: "here" };
  const unshare = findUnshare();
  if (!unshare) return { run: "here", reason: "util-linux unshare not found" };
  // Not root, bubblewrap is then started through setpriv (it drops the inherited capabilities).
  if (!isRoot() && !findSetpriv()) return { run: "here", reason: "util-linux setpriv not found" };
  const prefix = ownNamespacePrefix(unshare);
  probed ??= probeUnshare(prefix);
  if (probed !== true) return { run: "here", reason: `${isRoot() ? "unshare --mount" : "unshare --user --mount"} refused (${probed})` };
  return { run: "reexec", prefix };
}

/** The probe's answer, once per process (a launcher starts many servers): true, or why not. */
let probed: true | string | undefined;

/**
 * Not root, the probe does inside the namespace what the server will do there: mount a
 * tmpfs, and start bubblewrap (when installed) without the namespace's capabilities. A
 * kernel or policy may let `unshare --user` succeed yet refuse either (e.g. AppArmor's
 * restriction of unprivileged user namespaces); the server then stays where it was, where
 * bubblewrap still sandboxes its slots.
 */
const NON_ROOT_PROBE = `set -e
d=$(mktemp -d)
trap 'umount "$d" 2>/dev/null; rmdir "$d"' EXIT
mount -t tmpfs -o size=1m slotpool-probe "$d"
[ -z "$2" ] || "$1" --inh-caps=-all --ambient-caps=-all -- "$2" --unshare-user --unshare-pid --unshare-ipc --unshare-uts --unshare-net --ro-bind / / --proc /proc --dev /dev true`;

function probeUnshare(prefix: string[]): true | string {
  const check = isRoot() ? ["true"] : ["/bin/sh", "-c", NON_ROOT_PROBE, "slotpool-probe", findSetpriv() ?? "", findExecutable("bwrap") ?? ""];
  const probe = spawnSync(prefix[0]!, [...prefix.slice(1), ...check], { encoding: "utf8", timeout: 10_000 });
  return probe.status === 0 ? true : (probe.stderr || probe.error?.message || `exit ${probe.status}`).trim().split("\n")[0]!;
}

function isRoot(): boolean {
  return process.getuid?.() === 0;
}

/** Whether this process holds capability number `cap` (linux/capability.h: CAP_SYS_PTRACE is 19) in its effective set. */
export function hasEffectiveCapability(cap: number): boolean {
  return (capabilities().effective & (1n << BigInt(cap))) !== 0n;
}

/** Capability sets of this process, from /proc/self/status (0n where unreadable). */
function capabilities(): { effective: bigint; ambient: bigint } {
  try {
    const status = readFileSync("/proc/self/status", "utf8");
    const read = (key: string): bigint => BigInt("0x" + (new RegExp(`^${key}:\\s*([0-9a-f]+)`, "m").exec(status)?.[1] ?? "0"));
    return { effective: read("CapEff"), ambient: read("CapAmb") };
  } catch {
    return { effective: 0n, ambient: 0n };
  }
}

const CAP_SYS_ADMIN = 21n;
let caps: { effective: bigint; ambient: bigint } | undefined;

/**
 * Whether this server may mount (slot disks, template views): root (a refused mount still
 * falls back, said in /health), or not root inside its own user namespace with
 * CAP_SYS_ADMIN there. Undefined when it may; otherwise why not, for logs and /health.
 */
export function whyNoMounts(env: NodeJS.ProcessEnv = process.env): string | undefined {
  if (isRoot()) return undefined;
  caps ??= capabilities();
  if (env[OWN_MOUNT_NAMESPACE_ENV] === "1" && (caps.effective >> CAP_SYS_ADMIN) & 1n) return undefined;
  return "the server is not root and runs in no user namespace of its own (started in-process, or unshare --user refused)";
}

/**
 * How to start `file args` without the capabilities this process passes on (ambient: a
 * non-root server in its own user namespace): through setpriv dropping them, or as it is
 * when it passes on none. Every command a slot runs starts this way, and so does every
 * bubblewrap (and the `unshare` of a network-on namespace, which then starts it), since
 * bubblewrap refuses to start with capabilities while not setuid.
 */
export function withoutCapabilities(file: string, args: string[]): { file: string; args: string[] } {
  if (dropPrefix === undefined) {
    caps ??= capabilities();
    const setpriv = caps.ambient === 0n ? undefined : findSetpriv();
    dropPrefix = setpriv ? [setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--"] : [];
  }
  return dropPrefix.length > 0 ? { file: dropPrefix[0]!, args: [...dropPrefix.slice(1), file, ...args] } : { file, args };
}

/** The setpriv prefix `withoutCapabilities` puts in front ([] when none), found once per process. */
let dropPrefix: string[] | undefined;

/**
 * Runs this same command again (same Node, flags and arguments) under `prefix` (above),
 * with the marker set; forwards termination signals to it and resolves with its exit code
 * (128 + signal number when a signal ended it). The child gets SIGTERM if this process
 * dies, even by SIGKILL (parent-death signal through util-linux `setpriv`, when present).
 * Node has no execve, hence a parent that only waits.
 */
export function reexecInOwnMountNamespace(prefix: string[]): Promise<number> {
  const setpriv = findSetpriv();
  const argv = [
    ...(setpriv ? [setpriv, "--pdeathsig", "SIGTERM", "--"] : []),
    ...prefix,
    process.execPath,
    ...process.execArgv,
    ...process.argv.slice(1),
  ];
  const child = spawn(argv[0]!, argv.slice(1), { stdio: "inherit", detached: true, env: { ...process.env, [OWN_MOUNT_NAMESPACE_ENV]: "1" } });
  // Its own process group: a terminal's Ctrl-C reaches it once, through this forwarding.
  // (SIGUSR1 stays Node's debugger signal.)
  const forwarded: NodeJS.Signals[] = ["SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR2"];
  const forward = (signal: NodeJS.Signals): void => {
    child.kill(signal);
  };
  for (const s of forwarded) process.on(s, forward);
  return new Promise((resolve) => {
    const done = (code: number): void => {
      for (const s of forwarded) process.off(s, forward);
      resolve(code);
    };
    child.once("error", (err) => {
      process.stderr.write(`slotpool: cannot start ${argv[0]}: ${err.message}\n`);
      done(1);
    });
    child.once("exit", (code, signal) => done(code ?? 128 + (signal ? (constants.signals[signal] ?? 0) : 0)));
  });
}
