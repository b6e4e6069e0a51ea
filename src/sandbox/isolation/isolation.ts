import { spawnSync } from "node:child_process";
import { existsSync, lstatSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { findExecutable } from "../../host/executables.js";
import { withoutCapabilities } from "../../host/mount-namespace.js";
import { filterArgs, type SlotFilter } from "./seccomp.js";
import { BOOT_ID_PATH } from "./boot-id.js";
import type { Slot } from "../core/slot.js";
import { IMAGE_TOOLS_MOUNT } from "../../protocol/images.js";

/**
 * Bubblewrap isolation: which host directories a slot's commands see, and whether this
 * host can create the namespaces at all (checked once at start-up).
 *
 * What a command sees: the system directories (/usr, /bin, /lib*, /sbin, /etc) read-only,
 * a fresh /proc for its own PID namespace, a minimal read-only /dev, and read-write only
 * its slot's workspace at /workspace and its /tmp, /var/tmp and /dev/shm (on the slot's
 * bounded disk, see slot-disk.ts). Nothing else of the host: no other slot, no server
 * files (data dir, node install outside /usr, /root, /home), no host /proc.
 */

/** Top-level system paths bound read-only when they exist (symlinks are recreated as symlinks). */
export const SYSTEM_PATHS = ["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"];

export const SANDBOX_HOSTNAME = "sandbox";
/** The name the slot's uid has inside the sandbox. */
export const SANDBOX_USER = "sandbox";
export const SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

let systemArgsCache: string[] | undefined;

/** bwrap arguments that build the read-only system view. */
export function systemBindArgs(): string[] {
  if (systemArgsCache) return systemArgsCache;
  const args: string[] = [];
  for (const p of SYSTEM_PATHS) {
    if (!existsSync(p)) continue;
    const st = lstatSync(p);
    if (st.isSymbolicLink()) args.push("--symlink", readlinkSync(p), p);
    else args.push("--ro-bind", p, p);
  }
  systemArgsCache = args;
  return args;
}

export interface NamespaceOptions {
  /** The slot's workspace, bound read-write at /workspace; null: an empty read-only /workspace (terminal attach). */
  workspaceDir: string | null;
  allowNetwork: boolean;
  /** /etc/passwd and /etc/group that name the slot's uid (see `identityFiles`). */
  identity?: { passwd: string; group: string } | undefined;
  /** How /tmp, /var/tmp and /dev/shm are made (`SlotDisks.writableArgs`); default: small tmpfs. */
  writableArgs?: string[] | undefined;
  /** The slot's boot id file (boot-id.ts), bound over /proc/sys/kernel/random/boot_id; default: the host's. */
  bootId?: string | undefined;
  /** The slot's root is an image (src/sandbox/images/): the sandbox's `/` instead of the host's system view. */
  image?: ImageRoot | undefined;
}

/** Where the static tools (spawner, bash, busybox, tmux) are bound in an image root (images/image-tools.ts); on the wire, as clients run them too. */
export { IMAGE_TOOLS_MOUNT };
/** The bash the tools run in an image root: a static one of ours, never the image's. */
export const IMAGE_BASH = `${IMAGE_TOOLS_MOUNT}/bash`;

/**
 * An image as a slot's root: one more input of the same sandbox. The merged root (the
 * image's layers under the slot's upper layer, mounted by the image room at the slot's
 * workspace dir) is the sandbox's `/`, writable everywhere; /proc, /dev (and /dev/shm on the
 * slot's disk) and the static tools are mounted over it as for any slot. The user namespace
 * is the slot's own (root server: inside uid 0 is the slot's host uid and 1-65535 a block of
 * host uids the slot alone owns, joined with --userns), or one of bubblewrap's mapping the
 * server's one uid to 0 (a server that is not root). Root inside keeps the capabilities a
 * container's root has by default (over the slot's own uids and namespaces only: the seccomp
 * filter still applies, and nothing of the host is mapped into its namespace).
 */
export interface ImageRoot {
  /** The merged root on the host. */
  dir: string;
  /** The image's environment (K=V). */
  env: readonly string[];
  /** The commands' working directory (the image's WorkingDir). */
  workingDir: string;
  /** The image's user inside: runners switch to it (0: root keeps its capabilities; any other runs with none). */
  uid: number;
  gid: number;
  /**
   * Which user namespace: the slot's own as an fd of the child about to be spawned (--userns);
   * "joined" when the child is already in it (nsenter into the slot's network namespace
   * holder, slot-netns.ts: bubblewrap then runs as its root and keeps only the capabilities
   * below); undefined: bubblewrap's own, mapping the server's one uid to 0 (not root).
   */
  userns?: { fd: number } | "joined" | undefined;
  /** Host dir of the static tools, bound read-only at IMAGE_TOOLS_MOUNT. */
  toolsDir: string;
}

/** Where a slot's image root comes from (the image room, src/sandbox/images/, implements it). */
export interface ImageRootSource {
  /**
   * The isolation input for a sandbox of the slot if its root is an image: `usernsChildFd` is
   * the fd the spawned bubblewrap is to find the slot's user namespace at, `parentFd` the
   * descriptor of the server to put there (undefined: bubblewrap makes its own, not root);
   * `owner` the host ids of the image's user (what the server chowns files it writes for
   * the slot to; undefined: the server's own).
   */
  rootFor(slot: Slot, usernsChildFd: number): { root: ImageRoot; parentFd: number | undefined; owner: { uid: number; gid: number } | undefined } | undefined;
  /** Root with per-slot uids: the image's users are distinct uids inside (a command may run as any of them). */
  readonly idmapped: boolean;
}

/** What a container's root may do by default (Docker's set), over the slot's own namespaces: chown, override file modes, switch users, bind low ports, kill its processes. */
export const IMAGE_ROOT_CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_AUDIT_WRITE", "CAP_SETFCAP", "CAP_MKNOD"];

/** The last bubblewrap arguments of a sandbox: its root read-only, except an image's (every path writable). */
export function rootTail(opts: Pick<NamespaceOptions, "image">): string[] {
  return opts.image ? [] : READ_ONLY_ROOT;
}

/** The bash a sandbox's tool scripts run: the static one bound in an image root, else the host's. */
export function sandboxBash(opts: Pick<NamespaceOptions, "image">): string {
  return opts.image ? IMAGE_BASH : "/bin/bash";
}

function imageArgs(opts: NamespaceOptions, image: ImageRoot): string[] {
  const env = new Map<string, string>();
  for (const e of image.env) {
    const i = e.indexOf("=");
    if (i > 0) env.set(e.slice(0, i), e.slice(i + 1));
  }
  if (!env.has("TERM")) env.set("TERM", "xterm");
  return [
    "--die-with-parent",
    "--new-session",
    ...(image.userns === "joined" ? [] : image.userns ? ["--userns", String(image.userns.fd)] : ["--unshare-user", "--uid", "0", "--gid", "0"]),
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    ...(opts.allowNetwork ? [] : ["--unshare-net"]),
    "--hostname", SANDBOX_HOSTNAME,
    "--bind", image.dir, "/",
    "--proc", "/proc",
    ...(opts.bootId ? ["--ro-bind", opts.bootId, BOOT_ID_PATH] : []),
    "--dev", "/dev",
    ...(opts.writableArgs ?? DEFAULT_SHM),
    "--remount-ro", "/dev",
    "--ro-bind", image.toolsDir, IMAGE_TOOLS_MOUNT,
    "--chdir", "/",
    "--clearenv",
    ...[...env].flatMap(([k, v]) => ["--setenv", k, v]),
    // Root of the slot's own namespace: a container's root (bubblewrap drops every capability
    // otherwise). The sandbox starts as uid 0 in any case (bubblewrap cannot switch users in a
    // namespace it joins): a runner switches to the image's User itself, which drops them.
    ...(image.userns === "joined" ? ["--cap-drop", "ALL"] : []),
    ...IMAGE_ROOT_CAPS.flatMap((c) => ["--cap-add", c]),
  ];
}

const DEFAULT_SHM = ["--size", String(1 << 20), "--tmpfs", "/dev/shm"];

/**
 * Arguments for a bubblewrap sandbox. `--unshare-user` gives the command its own user
 * namespace (it runs under its slot's uid, mapped to itself); pid, ipc, uts and cgroup are
 * always private; net is private unless the call allows network.
 */
export function bwrapArgs(opts: NamespaceOptions): string[] {
  if (opts.image) return imageArgs(opts, opts.image);
  return [
    "--die-with-parent",
    "--new-session",
    "--unshare-user",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    ...(opts.allowNetwork ? [] : ["--unshare-net"]),
    "--hostname", SANDBOX_HOSTNAME,
    ...systemBindArgs(),
    "--proc", "/proc",
    ...(opts.bootId ? ["--ro-bind", opts.bootId, BOOT_ID_PATH] : []),
    "--dev", "/dev",
    ...(opts.writableArgs ?? DEFAULT_WRITABLE),
    // bubblewrap's /dev is a tmpfs as large as half the RAM, writable by the slot: read-only
    // (device nodes stay usable; /dev/shm is the bounded mount above, /dev/pts its own).
    "--remount-ro", "/dev",
    ...(opts.identity ? ["--ro-bind", opts.identity.passwd, "/etc/passwd", "--ro-bind", opts.identity.group, "/etc/group"] : []),
    ...(opts.workspaceDir === null ? ["--dir", "/workspace"] : ["--bind", opts.workspaceDir, "/workspace"]),
    "--chdir", "/workspace",
    "--clearenv",
    "--setenv", "HOME", "/workspace",
    // SHELL and USER set: bash (and others) otherwise look the uid up through NSS at
    // every start, which costs ≈ 0.5 ms per command here (systemd NSS module).
    "--setenv", "SHELL", "/bin/bash",
    "--setenv", "USER", SANDBOX_USER,
    "--setenv", "LOGNAME", SANDBOX_USER,
    "--setenv", "PATH", SANDBOX_PATH,
    "--setenv", "TERM", "xterm",
    "--setenv", "LANG", "C.UTF-8",
  ];
}

/** Small tmpfs for /tmp, /var/tmp and /dev/shm where no slot disk is given (probe, terminal attach). */
const DEFAULT_WRITABLE = ["--size", String(1 << 20), "--tmpfs", "/tmp", "--size", String(1 << 20), "--tmpfs", "/var/tmp", "--size", String(1 << 20), "--tmpfs", "/dev/shm"];

/** Last bwrap arguments: the sandbox's root (a tmpfs holding the mount points) read-only. */
export const READ_ONLY_ROOT = ["--remount-ro", "/"];

export interface BwrapProbe {
  available: boolean;
  path: string | null;
  reason?: string;
  /**
   * The seccomp filter every sandbox gets (`--seccomp FD`, see seccomp.ts); null only when
   * the operator turned it off (--no-seccomp) or nothing is sandboxed.
   */
  filter: SlotFilter | null;
}

/**
 * Checks once whether bwrap exists and can create the namespaces we use, as `uid`, with the
 * slots' seccomp filter installed (a kernel that cannot take it fails here: fail closed).
 */
export function probeBwrap(workspaceDir: string, uid: number | undefined, gid: number | undefined, filter: SlotFilter | null): BwrapProbe {
  const path = findExecutable("bwrap");
  if (!path) return { available: false, path: null, reason: "bwrap (bubblewrap) is not installed", filter };
  // Without the capabilities a non-root server holds over its own user namespace (bubblewrap refuses them).
  // The filter comes in on stdin (fd 0), which bubblewrap reads to its end before the command runs.
  const cmd = withoutCapabilities(path, [...bwrapArgs({ workspaceDir, allowNetwork: false }), ...filterArgs(filter, 0), ...READ_ONLY_ROOT, "--", "/bin/sh", "-c", "true"]);
  const res = spawnSync(cmd.file, cmd.args, {
    encoding: "utf8",
    timeout: 10_000,
    ...(filter ? { input: filter.program } : {}),
    ...(uid !== undefined ? { uid, gid: gid ?? uid } : {}),
  });
  if (res.status === 0) return { available: true, path, filter };
  let reason = (res.stderr || res.error?.message || `exit ${res.status}`).trim();
  if (uid !== undefined && /permission denied/i.test(reason)) {
    reason += ` (slot uid ${uid} must be able to traverse every parent directory of the data dir: chmod o+x them or pick another --data-dir)`;
  }
  if (filter && /seccomp/i.test(reason)) return { available: false, path, reason: `bubblewrap cannot install the slots' seccomp filter here: ${reason}`, filter };
  return { available: false, path, reason: `bubblewrap cannot create namespaces here: ${reason}`, filter };
}

/**
 * Writes (once) an /etc/passwd and /etc/group for a slot: the host's files plus a
 * `sandbox` user and group for the slot's uid/gid with home /workspace, so `whoami`,
 * `id -un`, git's author lookup and friends work and no lookup falls through to NSS
 * modules that try (and fail) to reach daemons. A session with its workspace at
 * /home/NAME (E2B's /home/user) names the uid NAME with that home instead, as E2B code expects.
 */
export function identityFiles(stateDir: string, uid: number, gid: number, user: { name: string; home: string } = { name: SANDBOX_USER, home: "/workspace" }): { passwd: string; group: string } {
  const suffix = user.name === SANDBOX_USER ? "" : `-${user.name}`;
  const passwd = join(stateDir, `passwd-${uid}${suffix}`);
  const group = join(stateDir, `group-${gid}${suffix}`);
  if (!existsSync(passwd) || !existsSync(group)) {
    const read = (f: string): string => {
      try {
        const t = readFileSync(f, "utf8");
        return t.endsWith("\n") || t === "" ? t : t + "\n";
      } catch {
        return "";
      }
    };
    const hostPasswd = read("/etc/passwd").split("\n").filter((l) => l && l.split(":")[2] !== String(uid) && !l.startsWith(`${user.name}:`));
    const hostGroup = read("/etc/group").split("\n").filter((l) => l && l.split(":")[2] !== String(gid) && !l.startsWith(`${user.name}:`));
    writeFileSync(passwd, [...hostPasswd, `${user.name}:x:${uid}:${gid}:slotpool sandbox:${user.home}:/bin/bash`, ""].join("\n"), { mode: 0o644 });
    writeFileSync(group, [...hostGroup, `${user.name}:x:${gid}:`, ""].join("\n"), { mode: 0o644 });
  }
  return { passwd, group };
}
