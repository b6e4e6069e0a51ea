import { execFile, spawn, spawnSync, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync } from "node:fs";
import { rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import type { Logger } from "pino";
import { whyNoMounts } from "../host/mount-namespace.js";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "./native-build.js";
import type { Slot } from "./slot.js";
import type { Template } from "./templates.js";

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
 * bound (the template itself does not), and a reset deletes them before it answers.
 * Attaching costs one exec of a small C helper (`native/template-mount.c`), whatever
 * the template's size; detaching unmounts and renames the upper dir away (deleted in the
 * background).
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
  /** Upper/work on the slot's bounded disk: deleted at once (frees the bound), not in the background. */
  bounded: boolean;
}

export class WorkspaceViews {
  mode: ViewMode;
  private readonly helper: string | null;
  private readonly attached = new Map<number, Attached>();
  /** The helper in `serve` mode (one per server: a reset then costs no fork + exec). */
  private server: { child: ChildProcess; waiting: Array<(answer: string) => void> } | undefined;

  constructor(
    private readonly viewsDir: string,
    private readonly slots: readonly Slot[],
    private readonly logger: Logger,
    /** The slot's bounded disk's dir for views (`SlotDisks.viewsDir`), if its disk is bounded. */
    private readonly boundedDir: (slot: Slot) => string | undefined = () => undefined,
  ) {
    // Root, or not root in a user namespace of the server's own (src/host/mount-namespace.ts).
    const mayMount = whyNoMounts() === undefined;
    // SLOTPOOL_TEMPLATE_VIEWS=copy forces copy mode (what a server that may not mount gets; tests).
    const forceCopy = process.env["SLOTPOOL_TEMPLATE_VIEWS"] === "copy";
    this.helper = mayMount && !forceCopy ? helperBinary(dirname(viewsDir)) : null;
    this.mode = this.helper ? "overlay" : "copy";
    if (mayMount && !forceCopy && !this.helper) logger.warn({ reason: helperError }, "template views fall back to copying (no mount helper)");
    if (this.helper) this.unmountStale();
    rmSync(viewsDir, { recursive: true, force: true });
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
    if (!a?.upper) return undefined;
    const me = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
    const disk = a.template.owner ?? me;
    const mine = slot.owner ?? me;
    return disk.uid !== mine.uid || disk.gid !== mine.gid ? join(this.slotDir(slot), "lower") : a.template.treeDir;
  }

  /**
   * The reset's workspace step (the slot's processes are dead): ends the slot's current
   * view, empties the workspace and attaches `next` if given; `release` gets the template
   * the slot used before (the store's refcount). Between two views in overlay mode this is
   * one exec of the helper (it unmounts the old view before mounting the new one).
   */
  async switch(slot: Slot, next: Template | undefined, release: (t: Template) => void): Promise<void> {
    const prev = this.attached.get(slot.index);
    // Not from a view on the bounded disk: its old upper must go before the new view takes space there.
    if (next && prev?.upper && !prev.bounded && this.mode === "overlay") {
      try {
        await this.mountOverlay(slot, next);
      } finally {
        // The helper unmounted the old view first (also when the new mount then failed).
        this.trash(slot, prev);
        release(prev.template);
      }
      return;
    }
    const previous = await this.detach(slot);
    if (previous) release(previous);
    slot.wipeWorkspace();
    if (next) await this.attach(slot, next);
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
      await this.helperCall(["mount", t.treeDir, lower, upper, work, slot.workspaceDir, String(disk.uid), String(mine.uid), String(disk.gid), String(mine.gid)]);
    } catch (err) {
      rmSync(upper, { recursive: true, force: true });
      rmSync(work, { recursive: true, force: true });
      throw err;
    }
    this.attached.set(slot.index, { template: t, upper, work, bounded: bounded !== undefined });
  }

  /**
   * Ends the slot's view (its processes are dead: reset kills them first) and returns the
   * template it used (for the store's refcount). The slot's changes are renamed away and
   * deleted in the background, so a reset does not wait for them.
   */
  async detach(slot: Slot): Promise<Template | undefined> {
    const a = this.attached.get(slot.index);
    if (!a) return undefined;
    this.attached.delete(slot.index);
    if (a.upper) {
      await this.helperCall(["umount", slot.workspaceDir, join(this.slotDir(slot), "lower")]);
      this.trash(slot, a);
    }
    return a.template;
  }

  /**
   * Deletes an unmounted view's private dirs: at once on the bounded disk (the reset frees
   * the bound before it answers; a tmpfs deletes fast), else renamed away and deleted in
   * the background.
   */
  private trash(slot: Slot, a: Attached): void {
    if (this.attached.get(slot.index) === a) this.attached.delete(slot.index);
    if (a.bounded) {
      rmSync(a.upper, { recursive: true, force: true });
      rmSync(a.work, { recursive: true, force: true });
      return;
    }
    const trash = join(this.slotDir(slot), `trash-${randomBytes(4).toString("hex")}`);
    mkdirSync(trash, { mode: 0o700 });
    renameSync(a.upper, join(trash, "upper"));
    renameSync(a.work, join(trash, "work"));
    void rm(trash, { recursive: true, force: true }).catch(() => undefined);
  }

  /** One request to the helper: through the long-lived one, or one exec when a path has a tab or newline. */
  private async helperCall(args: string[]): Promise<void> {
    if (args.some((a) => /[\t\n]/.test(a))) {
      try {
        await run(this.helper!, args);
        return;
      } catch (err) {
        throw new Error((err as { stderr?: string }).stderr?.trim() || (err instanceof Error ? err.message : String(err)));
      }
    }
    let srv = this.server;
    if (!srv || srv.child.exitCode !== null || srv.child.signalCode !== null) {
      const child = spawn(this.helper!, ["serve"], { stdio: ["pipe", "pipe", "ignore"] });
      const started = { child, waiting: [] as Array<(answer: string) => void> };
      createInterface({ input: child.stdout! }).on("line", (line) => started.waiting.shift()?.(line));
      child.once("exit", () => {
        for (const w of started.waiting.splice(0)) w("err the mount helper exited");
        if (this.server === started) this.server = undefined;
      });
      child.stdin!.on("error", () => undefined);
      srv = this.server = started;
    }
    const answer = await new Promise<string>((resolve) => {
      srv.waiting.push(resolve);
      srv.child.stdin!.write(args.join("\t") + "\n");
    });
    if (answer !== "ok") throw new Error(answer.replace(/^err /, ""));
  }

  /** Unmounts every view (shutdown). */
  closeAll(): void {
    this.server?.child.kill();
    this.server = undefined;
    if (!this.helper) return;
    for (const slot of this.slots) {
      if (!this.attached.has(slot.index)) continue;
      spawnSync(this.helper, ["umount", slot.workspaceDir, join(this.slotDir(slot), "lower")]);
      this.attached.delete(slot.index);
    }
    rmSync(this.viewsDir, { recursive: true, force: true });
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

let helperPath: string | null | undefined;
let helperError: string | undefined;

/** Compiles (once, cached by source hash) the mount helper; null when it cannot. */
function helperBinary(cacheDir: string): string | null {
  if (helperPath !== undefined && (helperPath === null || existsSync(helperPath))) return helperPath;
  const src = nativeSource("template-mount.c");
  const prebuilt = prebuiltNative("slotpool-template-mount");
  if (!src) {
    helperPath = existsSync(prebuilt) ? prebuilt : null;
    if (!helperPath) helperError = "template-mount.c not found";
    return helperPath;
  }
  // Next to this module first (outlives any one server's data dir), else the state dir.
  const built = compileNative("slotpool-template-mount", src, [NATIVE_DIR, cacheDir], 0o700);
  if ("path" in built) return (helperPath = built.path);
  helperError = built.error;
  return (helperPath = null);
}
