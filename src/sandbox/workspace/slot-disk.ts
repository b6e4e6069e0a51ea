import { execFile, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, rmdirSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { MountHelper } from "./mount-helper.js";
import type { Slot } from "../core/slot.js";

/**
 * A bound on everything a slot writes: its workspace, /tmp, /var/tmp and /dev/shm (the
 * rest of a slot's namespace is read-only: its root, /dev, the spawner's /run).
 *
 * Where the server may mount (the default: root, or not root inside a user namespace of
 * its own, see src/host/mount-namespace.ts): one tmpfs of `--disk-mb` per slot, mounted at
 * `<data dir>/.slotpool/disk_<i>` (owned by the slot's uid, mode 0700), holding
 * `workspace/` (bind-mounted onto the slot's workspace dir, so the file tools, artifacts
 * and every namespace of the slot see it), `tmp/`, `var-tmp/` and `shm/` (bound at /tmp,
 * /var/tmp and /dev/shm in each of the slot's namespaces), `terminals/` (the terminal's
 * session dirs, the server's, never bound: see `sessionDir`) and `views/` (the server's own, never bound
 * into a slot: the upper and work dirs of the slot's copy-on-write view of a template, see
 * workspace-overlay.ts). A write past the bound fails with ENOSPC in that slot only; reset
 * empties the dirs, which frees the space at once. tmpfs lives in memory (and swap): the
 * bound is also what a full slot costs in RAM, charged to the memory cgroup of the slot
 * that wrote it where slot cgroups exist. These mounts are the server's namespace's, so
 * they vanish with it, even on SIGKILL; from outside, the workspace dirs look empty.
 *
 * A fork (fork.ts) prepares a used child's next disk beside the current one
 * (`<data dir>/.slotpool/disk_<i>.<tag>`, `prepareNext`) and switches to it with `swap`
 * once its processes are dead, or drops it if the fork fails; later resets renew the disk
 * at that path.
 *
 * Reset (`renew`) does not walk what the slot wrote: once the slot's processes are dead,
 * the mount helper detaches the bind and the tmpfs (lazily: the kernel frees the old one
 * with its last user) and mounts a fresh one. Its cost does not grow with the slot's
 * files (150,000 files or a 4,000-deep tree reset as fast as an empty slot), and it runs
 * in the helper, never on the server's event loop.
 *
 * `--no-disk-workspace`, or mounts not allowed or refused (a server started in-process,
 * user namespaces off, root without CAP_SYS_ADMIN): /tmp, /var/tmp and /dev/shm are tmpfs
 * in each of the slot's namespaces (bubblewrap --size: 1/2, 1/4 and 1/4 of `--disk-mb`,
 * so together within it per namespace), gone with the namespace; the workspace is not
 * bounded (`reason` says why) and a reset empties it through tree-removal.ts.
 */
/**
 * Default `--disk-mb`: 512 MiB per slot, half the default `--memory-mb`: where slot memory
 * cgroups exist, a slot's tmpfs pages count as its memory, so a bound at or above the
 * memory bound would end in the OOM killer instead of a write error.
 */
export const DEFAULT_DISK_BYTES = 512 * 1024 * 1024;

export class SlotDisks {
  private readonly mounted = new Map<number, { disk: string; tmp: string; varTmp: string; shm: string; views: string }>();
  mode: "tmpfs" | "tmp-only";
  /** Why the workspace is not bounded (not root, turned off, mounting failed), for logs and /health. */
  reason: string | undefined;

  /**
   * `unboundedBecause`: why the workspace is not to be bounded here (not root, turned off),
   * if so. `helper`: the mount helper, if it could be built (else mount(8) and umount(8)).
   */
  constructor(
    private readonly stateDir: string,
    readonly bytes: number,
    unboundedBecause: string | undefined,
    private readonly helper: MountHelper | null = null,
  ) {
    this.mode = unboundedBecause === undefined ? "tmpfs" : "tmp-only";
    this.reason = unboundedBecause;
  }

  /** Mounts every slot's disk; if the host refuses (no CAP_SYS_ADMIN), bounds /tmp only. */
  attachAll(slots: Slot[]): void {
    // A killed server's fork-made disk dirs (disk_<i>.<tag>): their mounts died with it, the empty dirs stay.
    for (const d of safeReaddir(this.stateDir)) {
      if (/^disk_\d+\./.test(d)) rmdirQuietly(join(this.stateDir, d));
    }
    try {
      for (const slot of slots) this.attach(slot);
    } catch (err) {
      this.detachAll(slots);
      this.mode = "tmp-only";
      this.reason = `cannot mount a tmpfs per slot (${err instanceof Error ? err.message : String(err)})`;
    }
  }

  /** Mounts the slot's tmpfs and binds its workspace (server start; a crashed server's mounts are replaced). */
  attach(slot: Slot): void {
    if (this.mode !== "tmpfs") return;
    const args = this.diskArgs(slot);
    const r = this.helper
      ? spawnSync(this.helper.path, args, { encoding: "utf8", timeout: 10_000 })
      : spawnSync("/bin/sh", ["-c", MOUNT_DISK, "slotpool-disk", ...args.slice(1)], { encoding: "utf8", timeout: 10_000 });
    // First line only: mount(8) adds a "dmesg(1) may have more information" line.
    if (r.status !== 0) throw new Error(`mounting ${args[1]} failed: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim().split("\n")[0]}`);
    this.remember(slot);
  }

  /**
   * Reset: a fresh, empty disk for the slot (its processes are dead, its template view
   * detached). O(1) in what the slot wrote, off the event loop; rejects when the mount
   * helper fails (the caller takes the slot out of service).
   */
  async renew(slot: Slot, root?: { lowers: string[]; uid: number; gid: number }): Promise<{ upper: string; work: string } | undefined> {
    const args = this.diskArgs(slot);
    if (this.helper && root) {
      // The fresh disk and a slot's image root over it, one request (template-mount.c `root`).
      try {
        await this.helper.call(["root", ...args.slice(1), String(root.uid), String(root.gid), ...root.lowers]);
        this.remember(slot);
        const views = this.viewsDir(slot)!;
        return { upper: join(views, "root-upper"), work: join(views, "root-work") };
      } catch {
        // Only a fresh disk, then: the image room mounts the root itself and says what failed.
      }
    }
    if (this.helper) await this.helper.call(args);
    else {
      try {
        await execFileAsync("/bin/sh", ["-c", MOUNT_DISK, "slotpool-disk", ...args.slice(1)], { timeout: 10_000 });
      } catch (err) {
        throw new Error(`mounting ${args[1]} failed: ${((err as { stderr?: string }).stderr || String(err)).trim().split("\n")[0]}`);
      }
    }
    this.remember(slot);
    return undefined;
  }

  /** Whether a fork can prepare a slot's next disk beside its current one (`prepareNext`: the helper serves it). */
  get preparesBeside(): boolean {
    return this.helper !== null && this.mode === "tmpfs";
  }

  /**
   * Fork (fork.ts): a fresh, empty disk for the slot at a path of its own, beside its current
   * one: nothing of the slot changes until `swap` (its processes dead), or `drop` undoes it.
   */
  async prepareNext(slot: Slot): Promise<NextDisk> {
    const owner = slot.owner ?? { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
    const disk = join(this.stateDir, `disk_${slot.index}.${randomBytes(4).toString("hex")}`);
    await this.helper!.call(["newdisk", disk, String(this.bytes), String(owner.uid), String(owner.gid)]);
    return { disk, views: join(disk, "views") };
  }

  /**
   * Makes each `next` its slot's disk (the slots' processes are dead): every mount at its
   * workspace and its old disk detached, the old ones freed in the background, in one helper
   * request for all of them. Rejects if any failed (the caller takes them all out of service).
   */
  async swap(entries: ReadonlyArray<{ slot: Slot; next: NextDisk }>): Promise<void> {
    for (let i = 0; i < entries.length; i += 64) {
      const chunk = entries.slice(i, i + 64);
      const args = chunk.flatMap(({ slot, next }) => {
        const m = this.mounted.get(slot.index);
        if (!m) throw new Error(`${slot.id} has no disk of its own to replace`);
        return [m.disk, next.disk, slot.workspaceDir];
      });
      await this.helper!.call(["swap", ...args]);
      for (const { slot, next } of chunk) this.remember(slot, next.disk);
    }
  }

  /** Undoes `prepareNext` (the fork failed). */
  async drop(next: NextDisk): Promise<void> {
    await this.helper!.call(["dropdisk", next.disk]);
  }

  /** Whether the slot's workspace lies on its own tmpfs (a reset then renews the mount instead of deleting files). */
  bounded(slot: Slot): boolean {
    return this.mounted.has(slot.index);
  }

  private diskArgs(slot: Slot): string[] {
    const owner = slot.owner ?? { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
    // Where it is now (a fork's `swap` moves it to a path of its own), renewed in place.
    return ["disk", this.mounted.get(slot.index)?.disk ?? join(this.stateDir, `disk_${slot.index}`), slot.workspaceDir, String(this.bytes), String(owner.uid), String(owner.gid)];
  }

  private remember(slot: Slot, disk = this.mounted.get(slot.index)?.disk ?? join(this.stateDir, `disk_${slot.index}`)): void {
    this.mounted.set(slot.index, { disk, tmp: join(disk, "tmp"), varTmp: join(disk, "var-tmp"), shm: join(disk, "shm"), views: join(disk, "views") });
  }

  /** Where the upper and work dirs of the slot's template view go: on its bounded disk, if mounted. */
  viewsDir(slot: Slot): string | undefined {
    return this.mounted.get(slot.index)?.views;
  }

  /** The dir on the slot's disk that is bound onto its workspace (fork.ts renames it into a layer; the next `renew` replaces it). */
  workspaceSource(slot: Slot): string | undefined {
    const m = this.mounted.get(slot.index);
    return m ? join(m.disk, "workspace") : undefined;
  }

  /** The slot's scratch dirs on its disk (bound at /tmp, /var/tmp, /dev/shm), if mounted: a copy-mode fork empties them as a reset would. */
  scratchDirs(slot: Slot): string[] {
    const m = this.mounted.get(slot.index);
    return m ? [m.tmp, m.varTmp, m.shm] : [];
  }

  /**
   * Where the slot's terminal session dirs go, if its disk is mounted: `terminals/` at the
   * disk's root, counted against its bound, but out of the slot's reach (never bound into its
   * namespaces): the slot cannot swap a session dir for a symlink the server would then follow.
   */
  sessionDir(slot: Slot): string | undefined {
    const m = this.mounted.get(slot.index);
    return m ? join(m.disk, "terminals") : undefined;
  }

  /**
   * bubblewrap arguments for the slot's writable dirs besides the workspace: /tmp, /var/tmp
   * and /dev/shm, all on the slot's disk or (fallback) tmpfs whose sizes add up to the bound.
   * Every other place in the namespace is read-only (`bwrapArgs` remounts /dev read-only).
   */
  writableArgs(slot: Slot, imageRoot = false): string[] {
    const m = this.mounted.get(slot.index);
    // An image root has /tmp and /var/tmp of its own (in its upper layer, on this disk too): only /dev/shm is mounted.
    if (imageRoot) return m ? ["--bind", m.shm, "/dev/shm"] : ["--size", String(Math.max(64 * 1024, Math.floor(this.bytes / 4))), "--tmpfs", "/dev/shm"];
    if (m) return ["--bind", m.tmp, "/tmp", "--bind", m.varTmp, "/var/tmp", "--bind", m.shm, "/dev/shm"];
    return fallbackWritableArgs(this.bytes);
  }

  /** Unmounts every slot's disk (shutdown, once the slots' processes are gone). */
  detachAll(slots: Slot[]): void {
    for (const slot of slots) {
      const m = this.mounted.get(slot.index);
      if (!m) continue;
      unmount(slot.workspaceDir);
      unmount(m.disk);
      this.mounted.delete(slot.index);
    }
  }
}

/** Without a disk of its own: /tmp, /var/tmp and /dev/shm as tmpfs adding up to `bytes`. */
export function fallbackWritableArgs(bytes: number): string[] {
  const part = (n: number): string => String(Math.max(64 * 1024, Math.floor(bytes / n)));
  return ["--size", part(2), "--tmpfs", "/tmp", "--size", part(4), "--tmpfs", "/var/tmp", "--size", part(4), "--tmpfs", "/dev/shm"];
}

const execFileAsync = promisify(execFile);

/** A slot's next disk, prepared by a fork beside its current one. */
export interface NextDisk {
  disk: string;
  /** Its dir for the view's upper and work (the server's, never bound into the slot). */
  views: string;
}

/** The helper's `disk` request with mount(8) (no C compiler for the helper): $1 disk, $2 workspace, $3 bytes, $4 uid, $5 gid. */
const MOUNT_DISK = `set -e
while umount -l "$2" 2>/dev/null; do :; done
while umount -l "$1" 2>/dev/null; do :; done
mkdir -p -m 0700 "$1"
mount -t tmpfs -o "size=$3,mode=0700,uid=$4,gid=$5,nosuid,nodev" tmpfs "$1"
for d in workspace tmp var-tmp shm; do mkdir -m 0700 "$1/$d"; chown "$4:$5" "$1/$d"; done
mkdir -m 0700 "$1/views"
mount --bind "$1/workspace" "$2"`;

function isMountPoint(path: string): boolean {
  try {
    return readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .some((l) => l.split(" ")[4] === path);
  } catch {
    return false;
  }
}

function unmount(path: string): void {
  while (isMountPoint(path)) {
    const r = spawnSync("umount", [path], { encoding: "utf8", timeout: 10_000 });
    if (r.status !== 0) {
      // Busy (a process of a crashed server still holds it): detach it lazily.
      spawnSync("umount", ["-l", path], { timeout: 10_000 });
      if (isMountPoint(path)) throw new Error(`cannot unmount ${path}: ${(r.stderr || "").trim()}`);
    }
  }
}

function safeReaddir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

/** Removes an empty dir; one still mounted or holding files stays (EBUSY, ENOTEMPTY). */
function rmdirQuietly(dir: string): void {
  try {
    rmdirSync(dir);
  } catch {
    /* in use: left */
  }
}
