import { execFile, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { Logger } from "pino";
import type { MountHelper } from "../workspace/mount-helper.js";
import type { Slot } from "../core/slot.js";
import type { Template } from "./templates.js";
import type { TreeRemoval } from "../workspace/tree-removal.js";

const run = promisify(execFile);

/**
 * A slot's workspace as a copy-on-write view of a template.
 *
 * "overlay" mode (the server may mount: root, or not root in a user namespace of its own):
 * overlayfs is mounted in the server's mount namespace at the slot's workspace directory —
 * lower = the template's tree, as root through a read-only, id-mapped bind (files the build
 * wrote as the build uid appear owned by the slot's uid, so the slot may chmod, delete and
 * edit them: each change lands in its upper dir; not root, build and slot share the
 * server's uid and the tree itself is the lower layer), upper/work = the slot's private
 * dirs under the server's state dir (never bound into a slot's namespaces: no slot reaches
 * them; as root also 0700 root).
 * Every tool that uses the workspace — the slot's namespaces (bound at their start, which
 * a reset always follows), file tools, artifacts, the stateful terminal — sees the merged
 * view. When the slot's disk is bounded (slot-disk.ts: a tmpfs per slot), its upper and work
 * dirs live on that tmpfs instead, so what a slot writes into a view counts against its
 * bound (the template itself does not), and they go with that tmpfs at reset.
 * Attaching costs one request to a small C helper (`native/template-mount.c`, mount-helper.ts),
 * whatever the template's size; detaching unmounts and (not on a bounded disk) renames
 * the upper dir away, deleted in the background by a child process (tree-removal.ts).
 *
 * "copy" mode (mounts not allowed or refused): the template is copied into the workspace
 * (`cp -a --reflink=auto`: a clone on btrfs/xfs, a full copy elsewhere) — correct, but the
 * cost grows with the template (see docs/templates.md).
 */
export type ViewMode = "overlay" | "copy";

interface Attached {
  template: Template;
  upper: string;
  work: string;
  /** Upper/work on the slot's bounded disk: they go with it at reset, nothing to delete. */
  bounded: boolean;
  /** Adopted by a fork child (`adopt`): the template's lower as the child reads it, under the child's fork view; no view of ours is mounted. */
  lower?: string;
  /** Drops the adopted lower's handle (if it is one) at detach. */
  drop?: () => void;
}

export class WorkspaceViews {
  mode: ViewMode;
  private readonly attached = new Map<number, Attached>();

  /** `helper`: the mount helper where the server may mount and views are not forced to copy; null: copy mode. */
  constructor(
    private readonly viewsDir: string,
    private readonly slots: readonly Slot[],
    private readonly logger: Logger,
    private readonly helper: MountHelper | null,
    private readonly removal: TreeRemoval,
    /** The slot's bounded disk's dir for views (`SlotDisks.viewsDir`), if its disk is bounded. */
    private readonly boundedDir: (slot: Slot) => string | undefined = () => undefined,
  ) {
    this.mode = this.helper ? "overlay" : "copy";
    if (this.helper) this.unmountStale();
    removal.discard(viewsDir);
    mkdirSync(viewsDir, { recursive: true, mode: 0o700 });
    chmodSync(viewsDir, 0o700);
  }

  /** The template the slot's workspace is a view of, if any. */
  templateOf(slot: Slot): Template | undefined {
    return this.attached.get(slot.index)?.template;
  }

  /** The upper dir of the slot's overlay view (what the slot wrote), if its workspace is one (fork.ts). */
  upperOf(slot: Slot): string | undefined {
    return this.attached.get(slot.index)?.upper || undefined;
  }

  /** The lower layer of the slot's overlay view: the template tree, or its id-mapped clone for this slot (fork.ts). */
  lowerOf(slot: Slot): string | undefined {
    const a = this.attached.get(slot.index);
    if (a?.lower !== undefined) return a.lower;
    if (!a?.upper) return undefined;
    const me = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
    const disk = a.template.owner ?? me;
    const mine = slot.owner ?? me;
    return disk.uid !== mine.uid || disk.gid !== mine.gid ? join(this.slotDir(slot), "lower") : a.template.treeDir;
  }

  /**
   * Makes the (empty, unused: the slot is being reset) workspace a view of `t`. Falls back
   * to copy mode for good when the kernel refuses the mount.
   */
  async attach(slot: Slot, t: Template): Promise<void> {
    if (this.mode === "overlay") {
      try {
        await this.mountOverlay(slot, t);
        return;
      } catch (err) {
        this.mode = "copy";
        this.logger.warn({ err, slot: slot.id }, "overlay mount refused: template views fall back to copying");
      }
    }
    await run("cp", ["-a", "--reflink=auto", `${t.treeDir}/.`, slot.workspaceDir], { maxBuffer: 1 << 20 });
    if (slot.owner) await run("chown", ["-R", `${slot.owner.uid}:${slot.owner.gid}`, slot.workspaceDir]);
    this.attached.set(slot.index, { template: t, upper: "", work: "", bounded: false });
  }

  /**
   * A fork child whose new workspace (a fork view, fork.ts) already reads the template
   * through `lower`: the slot counts as a view of `t` (its reference taken by the fork) with
   * no mount of ours; `drop` runs when the view ends.
   */
  adopt(slot: Slot, t: Template, lower: string, drop: () => void): void {
    this.attached.set(slot.index, { template: t, upper: "", work: "", bounded: true, lower, drop });
  }

  private async mountOverlay(slot: Slot, t: Template): Promise<void> {
    const dir = this.slotDir(slot);
    const bounded = this.boundedDir(slot);
    const tag = randomBytes(4).toString("hex");
    // overlayfs needs upper and work on one filesystem: both on the bounded disk, or both here.
    const upper = join(bounded ?? dir, `upper-${tag}`);
    const work = join(bounded ?? dir, `work-${tag}`);
    const lower = join(dir, "lower");
    mkdirSync(lower, { recursive: true, mode: 0o700 });
    // The upper dir's root is the merged root: same mode and owner as a plain workspace.
    mkdirSync(upper, { mode: 0o700 });
    mkdirSync(work, { mode: 0o700 });
    if (slot.owner) chownSync(upper, slot.owner.uid, slot.owner.gid);
    const me = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
    const disk = t.owner ?? me;
    const mine = slot.owner ?? me;
    try {
      await this.helper!.call(["mount", t.treeDir, lower, upper, work, slot.workspaceDir, String(disk.uid), String(mine.uid), String(disk.gid), String(mine.gid)]);
    } catch (err) {
      // Empty dirs (the helper failed before the slot could write): no tree to walk.
      this.removal.discard(upper);
      this.removal.discard(work);
      throw err;
    }
    this.attached.set(slot.index, { template: t, upper, work, bounded: bounded !== undefined });
  }

  /**
   * Ends the slot's view (its processes are dead: reset kills them first) and returns the
   * template it used (for the store's refcount). Changes on the bounded disk go with it
   * (the reset renews it next); others are renamed away and deleted in the background.
   */
  async detach(slot: Slot): Promise<Template | undefined> {
    const a = this.attached.get(slot.index);
    if (!a) return undefined;
    this.attached.delete(slot.index);
    a.drop?.();
    if (a.upper) {
      await this.helper!.call(["umount", slot.workspaceDir, join(this.slotDir(slot), "lower")]);
      if (!a.bounded) {
        this.removal.discard(a.upper);
        this.removal.discard(a.work);
      }
    }
    return a.template;
  }

  /** Unmounts every view (shutdown). */
  closeAll(): void {
    if (!this.helper) return;
    for (const slot of this.slots) {
      if (!this.attached.has(slot.index)) continue;
      spawnSync(this.helper.path, ["umount", slot.workspaceDir, join(this.slotDir(slot), "lower")]);
      this.attached.delete(slot.index);
    }
    this.removal.discard(this.viewsDir);
  }

  private slotDir(slot: Slot): string {
    const d = join(this.viewsDir, slot.id);
    mkdirSync(d, { recursive: true, mode: 0o700 });
    return d;
  }

  /** A server killed with views mounted leaves them: unmount those under our dirs. */
  private unmountStale(): void {
    const targets = new Set<string>([...this.slots.map((s) => s.workspaceDir)]);
    for (const m of mountPoints()) {
      if (targets.has(m) || m.startsWith(this.viewsDir + "/")) spawnSync("umount", ["-l", m]);
    }
  }
}

/** Mount points of this process's mount namespace (from /proc/self/mountinfo). */
export function mountPoints(): string[] {
  try {
    return readFileSync("/proc/self/mountinfo", "utf8")
      .split("\n")
      .filter(Boolean)
      .map((l) => l.split(" ")[4]!.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8))));
  } catch {
    return [];
  }
}
