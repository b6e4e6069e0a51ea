import { spawnSync } from "node:child_process";
import { chownSync, mkdirSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { Slot } from "./slot.js";

/**
 * A bound on everything a slot writes: its workspace and its /tmp and /var/tmp.
 *
 * Where the server may mount (the default: root, or not root inside a user namespace of
 * its own, see src/host/mount-namespace.ts): one tmpfs of `--disk-mb` per slot, mounted at
 * `<data dir>/.slotpool/disk_<i>` (owned by the slot's uid, mode 0700), holding
 * `workspace/` (bind-mounted onto the slot's workspace dir, so the file tools, artifacts
 * and every namespace of the slot see it), `tmp/` and `var-tmp/` (bound at /tmp and
 * /var/tmp in each of the slot's namespaces) and `views/` (the server's own, never bound
 * into a slot: the upper and work dirs of the slot's copy-on-write view of a template, see
 * workspace-overlay.ts). A write past the bound fails with ENOSPC in that slot only; reset
 * empties the dirs, which frees the space at once. tmpfs lives in memory (and swap): the
 * bound is also what a full slot costs in RAM, charged to the memory cgroup of the slot
 * that wrote it where slot cgroups exist. These mounts are the server's namespace's, so
 * they vanish with it, even on SIGKILL; from outside, the workspace dirs look empty.
 * `--no-disk-workspace`, or mounts not allowed or refused (a server started in-process,
 * user namespaces off, root without CAP_SYS_ADMIN): /tmp and /var/tmp are tmpfs of
 * `--disk-mb` each in the slot's namespaces (bubblewrap --size), gone with the namespace;
 * the workspace is not bounded (`reason` says why).
 */
/**
 * Default `--disk-mb`: 512 MiB per slot, half the default `--memory-mb`: where slot memory
 * cgroups exist, a slot's tmpfs pages count as its memory, so a bound at or above the
 * memory bound would end in the OOM killer instead of a write error.
 */
export const DEFAULT_DISK_BYTES = 512 * 1024 * 1024;

export class SlotDisks {
  private readonly mounted = new Map<number, { disk: string; workspace: string; tmp: string; varTmp: string; views: string }>();
  mode: "tmpfs" | "tmp-only";
  /** Why the workspace is not bounded (not root, turned off, mounting failed), for logs and /health. */
  reason: string | undefined;

  /** `unboundedBecause`: why the workspace is not to be bounded here (not root, turned off), if so. */
  constructor(
    private readonly stateDir: string,
    readonly bytes: number,
    unboundedBecause: string | undefined,
  ) {
    this.mode = unboundedBecause === undefined ? "tmpfs" : "tmp-only";
    this.reason = unboundedBecause;
  }

  /** Mounts every slot's disk; if the host refuses (no CAP_SYS_ADMIN), bounds /tmp only. */
  attachAll(slots: Slot[]): void {
    try {
      for (const slot of slots) this.attach(slot);
    } catch (err) {
      this.detachAll(slots);
      this.mode = "tmp-only";
      this.reason = `cannot mount a tmpfs per slot (${err instanceof Error ? err.message : String(err)})`;
    }
  }

  /** Mounts the slot's tmpfs and binds its workspace; call after `slot.prepare()`. */
  attach(slot: Slot): void {
    if (this.mode !== "tmpfs") return;
    const disk = join(this.stateDir, `disk_${slot.index}`);
    // A crashed server may have left both mounts: start from empty ones.
    unmount(slot.workspaceDir);
    unmount(disk);
    mkdirSync(disk, { recursive: true, mode: 0o700 });
    const owner = slot.owner ?? { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
    run("mount", ["-t", "tmpfs", "-o", `size=${this.bytes},mode=0700,uid=${owner.uid},gid=${owner.gid},nosuid,nodev`, "tmpfs", disk]);
    const dirs = { disk, workspace: join(disk, "workspace"), tmp: join(disk, "tmp"), varTmp: join(disk, "var-tmp"), views: join(disk, "views") };
    for (const d of [dirs.workspace, dirs.tmp, dirs.varTmp]) {
      mkdirSync(d, { mode: 0o700 });
      chownSync(d, owner.uid, owner.gid);
    }
    // The server's own (0700; as root, root's): never bound into the slot's namespaces.
    mkdirSync(dirs.views, { mode: 0o700 });
    run("mount", ["--bind", dirs.workspace, slot.workspaceDir]);
    this.mounted.set(slot.index, dirs);
  }

  /** Where the upper and work dirs of the slot's template view go: on its bounded disk, if mounted. */
  viewsDir(slot: Slot): string | undefined {
    return this.mounted.get(slot.index)?.views;
  }

  /** The dir on the slot's disk that is bound onto its workspace (fork.ts renames it into a layer). */
  workspaceSource(slot: Slot): string | undefined {
    return this.mounted.get(slot.index)?.workspace;
  }

  /**
   * Binds the slot's disk's workspace dir onto the workspace again, in place of whatever is
   * mounted there (a fork turned the dir the old bind shows into a layer: fork.ts).
   */
  rebindWorkspace(slot: Slot): void {
    const m = this.mounted.get(slot.index);
    if (!m) return;
    unmount(slot.workspaceDir);
    mkdirSync(m.workspace, { recursive: true, mode: 0o700 });
    const owner = slot.owner ?? { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
    chownSync(m.workspace, owner.uid, owner.gid);
    run("mount", ["--bind", m.workspace, slot.workspaceDir]);
  }

  /** bubblewrap arguments for the slot's /tmp and /var/tmp. */
  tmpArgs(slot: Slot): string[] {
    const m = this.mounted.get(slot.index);
    if (m) return ["--bind", m.tmp, "/tmp", "--bind", m.varTmp, "/var/tmp"];
    return ["--size", String(this.bytes), "--tmpfs", "/tmp", "--size", String(this.bytes), "--tmpfs", "/var/tmp"];
  }

  /** Empties the slot's /tmp and /var/tmp (reset, after every process of the slot is dead). */
  wipeTmp(slot: Slot): void {
    const m = this.mounted.get(slot.index);
    if (!m) return;
    for (const d of [m.tmp, m.varTmp]) for (const name of readdirSync(d)) rmSync(join(d, name), { recursive: true, force: true });
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

function run(cmd: string, args: string[]): void {
  const r = spawnSync(cmd, args, { encoding: "utf8", timeout: 10_000 });
  // First line only: mount(8) adds a "dmesg(1) may have more information" line.
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed: ${(r.stderr || r.error?.message || `exit ${r.status}`).trim().split("\n")[0]}`);
}

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
