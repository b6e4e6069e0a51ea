import { bwrapArgs, IMAGE_BASH, IMAGE_TOOLS_MOUNT, READ_ONLY_ROOT } from "./isolation.js";
import { filterArgs } from "./seccomp.js";
import type { InternetAccess } from "./network.js";
import type { SlotFilter } from "./seccomp.js";
import type { NetnsHolder } from "./slot-netns.js";
import type { ImageRoot } from "./isolation.js";

export interface SlotNamespaceOptions {
  bwrapPath: string;
  spawnerPath: string;
  /** The slots' seccomp filter (null: the server runs --no-seccomp). */
  filter: SlotFilter | null;
  workspaceDir: string;
  allowNetwork: boolean;
  identity?: { passwd: string; group: string } | undefined;
  /** With `allowNetwork`: the slot's own network namespace linked out by slirp4netns (network.ts); always passed then, or the holder would share the host's network. */
  internet?: InternetAccess | undefined;
  /** bubblewrap arguments for /tmp, /var/tmp and /dev/shm (the slot's bounded disk). */
  writableArgs?: string[] | undefined;
  /** The slot's boot id file (boot-id.ts), bound over the kernel's. */
  bootId?: string | undefined;
  /** Extra host dirs bound read-write: [host path, sandbox path]. */
  extraBinds?: Array<[string, string]> | undefined;
  uid?: number | undefined;
  gid?: number | undefined;
  /** Called with the bwrap pid once it is spawned (cgroup placement). */
  onSpawn?: ((pid: number) => void) | undefined;
  /** Pre-warm: a root server starts the namespace at nice 10 and `boost()` (before its first real command) puts it back to 0; not root: no change (could not undo). */
  background?: boolean | undefined;
  /**
   * The slot's root is an image: the sandbox's `/` (isolation.ts), its user namespace the
   * slot's own (`parentFd`, put at USERNS_FD), the static spawner and bash of the image tools,
   * commands in the image's WorkingDir as its User. Network on is not offered there yet.
   */
  image?: { root: ImageRoot; parentFd: number | undefined } | undefined;
  /** An image root with network on: the slot's network namespace (slot-netns.ts) the sandbox joins, with its user namespace. */
  netns?: NetnsHolder | undefined;
}

/** The fd bubblewrap reads the seccomp program from (3 carries its arguments). */
export const FILTER_FD = 4;
/** The fd a sandbox joining the slot's image user namespace finds it at (--userns). */
export const USERNS_FD = 5;

/** Where the spawner appears inside the sandbox (in an image root: the static one among the image tools). */
const SPAWNER_MOUNT = "/run/slotpool/spawner";

/**
 * The bubblewrap arguments of a slot namespace (spawner.ts) and the spawner's own command
 * line: the host's system view read-only with the spawner alone in /run, or the slot's image
 * root with the image tools (the static spawner, told the image's working directory, user
 * and bash).
 */
export function holderArgs(o: SlotNamespaceOptions, internet: InternetAccess | undefined, uid: number, gid: number): { args: string[]; spawnerArgs: string[] } {
  const image = o.image?.root;
  if (image) {
    // Joining the slot's network namespace holder puts it in the slot's user namespace already.
    const root = o.netns ? { ...image, userns: "joined" as const } : image;
    return {
      args: [
        ...bwrapArgs({ workspaceDir: o.workspaceDir, allowNetwork: o.netns !== undefined, writableArgs: o.writableArgs, bootId: o.bootId, image: root }),
        ...(o.netns && o.internet ? ["--ro-bind", o.internet.resolvConf, "/etc/resolv.conf"] : []),
        ...(o.extraBinds ?? []).flatMap(([src, dest]) => ["--bind", src, dest]),
        ...filterArgs(o.filter, FILTER_FD),
      ],
      spawnerArgs: [`${IMAGE_TOOLS_MOUNT}/spawner`, "--dir", image.workingDir, "--bash", IMAGE_BASH, "--keep-caps", ...(image.uid !== 0 || image.gid !== 0 ? ["--user", `${image.uid}:${image.gid}`] : [])],
    };
  }
  return {
    args: [
      ...bwrapArgs({ workspaceDir: o.workspaceDir, allowNetwork: o.allowNetwork, identity: o.identity, writableArgs: o.writableArgs, bootId: o.bootId }),
      // Inside the holder's own user namespace (where it is root): the sandbox runs as the
      // slot's uid again, in a nested user namespace without any capability over the network.
      ...(internet ? ["--uid", String(uid), "--gid", String(gid), "--ro-bind", internet.resolvConf, "/etc/resolv.conf"] : []),
      ...(o.extraBinds ?? []).flatMap(([src, dest]) => ["--bind", src, dest]),
      // /run holds only the spawner: read-only, like the root (no unbounded tmpfs for the slot).
      "--size", "65536", "--tmpfs", "/run",
      "--ro-bind", o.spawnerPath, SPAWNER_MOUNT,
      "--remount-ro", "/run",
      // The spawner, the pre-forked bash and every command run under the slots' filter.
      ...filterArgs(o.filter, FILTER_FD),
      ...READ_ONLY_ROOT,
    ],
    spawnerArgs: [SPAWNER_MOUNT],
  };
}
