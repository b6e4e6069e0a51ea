import { spawn, spawnSync } from "node:child_process";
import { constants } from "node:os";
import { findExecutable } from "./executables.js";

/**
 * A root sandbox server mounts on the host: a tmpfs per slot (the disk bound) and overlayfs
 * views of templates. In a mount namespace of its own (private propagation) those mounts
 * are the namespace's and vanish with its last process, even when the server is killed
 * with SIGKILL; otherwise they would outlive it on the host. Shared by the local launcher
 * (src/pool/sandbox-process.ts), which starts servers under `unshare`, and the CLI, which
 * re-executes itself under it when started by hand or by an image entrypoint.
 */

/** Set in the environment of a server that already runs in a mount namespace of its own. */
export const OWN_MOUNT_NAMESPACE_ENV = "SLOTPOOL_OWN_MOUNT_NS";

/** util-linux `unshare` (it execs its command: the pid stays the command's), or undefined. */
export function findUnshare(): string | undefined {
  return findExecutable("unshare") ?? undefined;
}

/** util-linux `setpriv` (it execs its command: the pid stays the command's), or undefined. */
export function findSetpriv(): string | undefined {
  return findExecutable("setpriv") ?? undefined;
}

/** The argv prefix that runs a command in a new private mount namespace. */
export function unshareMountPrefix(unshare: string): string[] {
  return [unshare, "--mount", "--propagation", "private", "--"];
}

export type MountNamespacePlan = { run: "here"; reason?: string } | { run: "reexec"; unshare: string };

/**
 * Whether this (root) process should re-execute itself in a mount namespace of its own:
 * not when not root (it mounts nothing on the host), not when already there (the marker),
 * and not when `unshare` is missing or refused (no CAP_SYS_ADMIN, e.g. a default Docker
 * container: the server then cannot mount either, and says so).
 */
export function mountNamespacePlan(env: NodeJS.ProcessEnv = process.env): MountNamespacePlan {
  if (process.getuid?.() !== 0) return { run: "here" };
  if (env[OWN_MOUNT_NAMESPACE_ENV] === "1") return { run: "here" };
  const unshare = findUnshare();
  if (!unshare) return { run: "here", reason: "util-linux unshare not found: mounts of this server would outlive a SIGKILL" };
  probed ??= probeUnshare(unshare);
  if (probed !== true) return { run: "here", reason: `unshare --mount refused (${probed})` };
  return { run: "reexec", unshare };
}

/** The probe's answer, once per process (a launcher starts many servers): true, or why not. */
let probed: true | string | undefined;

function probeUnshare(unshare: string): true | string {
  const probe = spawnSync(unshare, ["--mount", "--propagation", "private", "--", "true"], { encoding: "utf8", timeout: 10_000 });
  return probe.status === 0 ? true : (probe.stderr || probe.error?.message || `exit ${probe.status}`).trim();
}

/**
 * Runs this same command again (same Node, flags and arguments) under `unshare --mount`,
 * with the marker set; forwards termination signals to it and resolves with its exit code
 * (128 + signal number when a signal ended it). The child gets SIGTERM if this process
 * dies, even by SIGKILL (parent-death signal through util-linux `setpriv`, when present).
 * Node has no execve, hence a parent that only waits.
 */
export function reexecInOwnMountNamespace(unshare: string): Promise<number> {
  const setpriv = findSetpriv();
  const argv = [
    ...(setpriv ? [setpriv, "--pdeathsig", "SIGTERM", "--"] : []),
    ...unshareMountPrefix(unshare),
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
