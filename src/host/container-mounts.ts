import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { findExecutable } from "./executables.js";
import { OWN_MOUNT_NAMESPACE_ENV } from "./mount-namespace.js";

/**
 * What a root server inside a container changes in its OWN mount namespace (never the
 * container's, never the host's) so that it can sandbox there:
 *
 * - `/proc`: Docker (and runc generally) covers parts of /proc with other mounts (its
 *   "masked" and "read-only" paths: /proc/kcore, /proc/keys, /proc/sys, ...). The kernel lets
 *   a new user namespace (each bubblewrap) mount a fresh proc only if some proc mount in its
 *   mount namespace is fully visible, so bubblewrap fails with "Can't mount proc on
 *   /newroot/proc". Unmounting those covers in the server's namespace makes /proc fully
 *   visible there; slots still see only the fresh /proc of their own pid namespace.
 * - cgroups (v1): Docker mounts the container's cgroup directories read-only. Remounted
 *   read-write in the server's namespace, the server makes its per-slot memory, pids and cpu
 *   cgroups below the container's own cgroup (bounded by it); slots never see /sys.
 *
 * Both need CAP_SYS_ADMIN (the documented `--cap-add SYS_ADMIN`); see docs/security-model.md
 * for what that gives the server's namespace.
 */

/** Root, in a mount namespace of its own (the CLI re-executed itself under `unshare --mount`). */
export function mayChangeOwnMounts(env: NodeJS.ProcessEnv = process.env): boolean {
  return process.getuid?.() === 0 && env[OWN_MOUNT_NAMESPACE_ENV] === "1";
}

interface MountLine {
  mountPoint: string;
  options: string;
  fsType: string;
  /** The filesystem's own options (cgroup v1: its controllers, e.g. "rw,memory"). */
  superOptions: string;
}

function mounts(): MountLine[] {
  let text = "";
  try {
    text = readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return [];
  }
  const out: MountLine[] = [];
  for (const line of text.split("\n")) {
    const [left, right] = line.split(" - ");
    if (!left || !right) continue;
    const f = left.split(" ");
    const r = right.split(" ");
    out.push({ mountPoint: unescape(f[4] ?? ""), options: f[5] ?? "", fsType: r[0] ?? "", superOptions: r[2] ?? "" });
  }
  return out;
}

/** mountinfo escapes space, tab, newline and backslash as \ooo. */
function unescape(s: string): string {
  return s.replace(/\\([0-7]{3})/g, (_m, o: string) => String.fromCharCode(parseInt(o, 8)));
}

/** Mounts covering parts of /proc (deepest first), e.g. Docker's masked paths. */
export function procCovers(): string[] {
  return mounts()
    .map((m) => m.mountPoint)
    .filter((p) => p.startsWith("/proc/"))
    .sort((a, b) => b.length - a.length);
}

/**
 * Unmounts every mount covering part of /proc in this (own) mount namespace. Returns what it
 * unmounted, or throws naming the one it could not. Only where `mayChangeOwnMounts()`.
 */
export function unmaskProc(): string[] {
  if (!mayChangeOwnMounts()) throw new Error("refusing to change /proc outside a mount namespace of the server's own");
  const umount = findExecutable("umount");
  if (!umount) throw new Error("umount (util-linux mount) is not installed");
  const covers = procCovers();
  for (const p of covers) {
    const r = spawnSync(umount, ["-l", p], { encoding: "utf8", timeout: 5_000 });
    if (r.status !== 0) throw new Error(`umount -l ${p} failed: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim()}`);
  }
  return covers;
}

/**
 * The cgroup v1 controllers the server uses (sandbox/isolation/cgroups.ts makes a directory in
 * each; v2 is one mount): one list, so a controller added there is remounted here too (cpuacct,
 * missed here, made every slot cgroup fail in Docker).
 */
export const CGROUP_V1_CONTROLLERS = ["memory", "pids", "cpu", "freezer", "cpuacct"] as const;
const CONTROLLERS: readonly string[] = CGROUP_V1_CONTROLLERS;

/**
 * Remounts the read-only cgroup mounts the server uses (v2, or the v1 controllers above)
 * read-write in this (own) mount namespace. Returns what it remounted; throws naming the one
 * it could not.
 */
export function writableCgroups(): string[] {
  if (!mayChangeOwnMounts()) throw new Error("refusing to remount cgroups outside a mount namespace of the server's own");
  const mount = findExecutable("mount");
  if (!mount) throw new Error("mount (util-linux) is not installed");
  const done: string[] = [];
  for (const m of mounts()) {
    if (!m.mountPoint.startsWith("/sys/fs/cgroup")) continue;
    if (!(m.fsType === "cgroup2" || (m.fsType === "cgroup" && m.superOptions.split(",").some((o) => CONTROLLERS.includes(o))))) continue;
    if (!m.options.split(",").includes("ro")) continue;
    const r = spawnSync(mount, ["-o", "remount,bind,rw", m.mountPoint], { encoding: "utf8", timeout: 5_000 });
    if (r.status !== 0) throw new Error(`mount -o remount,bind,rw ${m.mountPoint} failed: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim()}`);
    done.push(m.mountPoint);
  }
  return done;
}
