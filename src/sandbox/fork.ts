import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chownSync, mkdirSync, renameSync, rmSync, rmdirSync } from "node:fs";
import { rm } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import type { Logger } from "pino";
import { whyNoMounts } from "../host/mount-namespace.js";
import { HttpError } from "../http/errors.js";
import type { ForkResponse } from "../protocol/sandbox.js";
import { ForkBusyError, ForkMounter, type Ids } from "./fork-mount.js";
import type { SlotDisks } from "./slot-disk.js";
import type { SlotTemplates } from "./slot-templates.js";
import type { Slot } from "./slot.js";
import type { TerminalState } from "./stateful.js";

const run = promisify(execFile);

/**
 * POST /fork: every child slot becomes a copy-on-write copy of the parent's workspace as it
 * is at that instant, in O(1) of what the workspace holds (docs/fork.md).
 *
 * "overlay" mode (the slot's disk is a tmpfs of its own and the server may mount):
 * - the parent's upper dir (what it wrote: the plain workspace dir on its disk, or the
 *   upper of its template or fork view) is renamed into a read-only *layer* L on the
 *   parent's disk;
 * - the parent gets a fresh upper over [L, its older layers, its template] mounted over its
 *   workspace, in the server's namespace and in its terminal's namespace, where the old
 *   mount is first made read-only (the kernel refuses while a process holds a file of it
 *   open for writing: the fork is retried a few times, then refused with 409 and nothing
 *   changed). From then on nothing writes to L: a process whose working directory is on the
 *   old mount reads the state at the fork and gets EROFS writing through it;
 * - the parent's command namespaces (nothing outlives a `bash` call there) are restarted
 *   on the new mount; its terminal's shell re-enters its directory before its next call;
 * - each child is reset (processes killed, contents dropped, the parent's template view
 *   attached) and gets a fresh upper on its own disk over [L, the parent's older layers,
 *   its template view]; as root each layer is an id-mapped read-only clone (files of the
 *   slot that wrote it appear as the child's own);
 * - a layer lives on the disk of the slot that wrote it and is deleted when no view uses it
 *   any more; until then it counts against that slot's disk bound, also after that slot's
 *   reset.
 * "copy" mode (no per-slot disk, or no mounts): the parent's workspace is copied (O(files),
 *   and not atomic against the parent's background processes).
 */
export type ForkMode = "overlay" | "copy";

/** Layers beneath one view at most; deeper forks copy (overlayfs allows 500, the cost grows with depth). */
const MAX_LAYERS = 64;
/** Tries to seal the parent's old mount while a process holds a file of it open for writing. */
const SEAL_TRIES = 5;

interface Layer {
  dir: string;
  owner: Ids;
  refs: number;
}

/** A slot whose workspace is a fork view (parent after a fork, or a child). */
interface ForkView {
  /** Top first. */
  layers: Layer[];
  /** The path each layer is mounted into this view from (the dir, or its id-mapped clone). */
  lowers: string[];
  /** Id-mapped clones made for this view (unmounted at release). */
  clones: string[];
  upper: string;
  work: string;
  /** Overlays stacked on the workspace by forks (unmounted at release). */
  stacked: number;
  /** The disk's bind shows a dir renamed into a layer: bind the disk's workspace dir again at release. */
  rebind: boolean;
}

/** What the fork needs from the service (implemented by SandboxService). */
export interface ForkHost {
  readonly slots: readonly Slot[];
  readonly disks: SlotDisks;
  readonly templates: SlotTemplates;
  readonly logger: Logger;
  readonly stateDir: string;
  /** Kills every process of the slot and ends its terminal (as reset does first). */
  stopSlot(slot: Slot): Promise<void>;
  /** Stops the slot's command namespaces only (the terminal stays). */
  stopCommandNamespaces(slot: Slot): Promise<void>;
  warm(slot: Slot): void;
  terminalPid(slot: Slot): number | undefined;
  terminalState(slot: Slot): TerminalState | undefined;
  seedTerminal(slot: Slot, state: TerminalState): void;
  reanchorTerminal(slot: Slot): void;
}

export class SlotForks {
  readonly mode: ForkMode;
  readonly reason: string | undefined;
  private readonly mounter: ForkMounter | undefined;
  private readonly views = new Map<number, ForkView>();
  private readonly cloneDir: string;

  constructor(private readonly host: ForkHost) {
    this.cloneDir = join(host.stateDir, "fork-clones");
    rmSync(this.cloneDir, { recursive: true, force: true });
    const why =
      host.disks.mode !== "tmpfs" ? `no disk of its own per slot (${host.disks.reason ?? "tmpfs mode off"})`
      : host.templates.views.mode !== "overlay" ? "template views are copies (no overlayfs)"
      : whyNoMounts();
    const built = why === undefined ? ForkMounter.build(host.stateDir) : undefined;
    if (built && "error" in built) this.reason = built.error;
    else this.reason = why;
    this.mounter = built && !("error" in built) ? built : undefined;
    this.mode = this.mounter ? "overlay" : "copy";
  }

  /**
   * Checks a fork request before anything happens (4xx naming the problem): children
   * exist (404 from `slotById`), are not the parent, appear once, and are idle.
   */
  static check(parent: Slot, children: readonly Slot[]): void {
    const seen = new Set<number>();
    children.forEach((c, i) => {
      if (c.index === parent.index) throw new HttpError(400, `into.${i} is ${c.id}, the parent itself: a slot cannot be forked into itself`, `into.${i}`);
      if (seen.has(c.index)) throw new HttpError(400, `into.${i}: ${c.id} is named twice`, `into.${i}`);
      seen.add(c.index);
      if (c.state !== "idle") {
        throw new HttpError(409, `into.${i}: ${c.id} is ${c.state} (${c.queued} call(s) queued or running): a fork drops a child's contents, so it must be idle; wait for its calls or reset it first`, `into.${i}`);
      }
    });
  }

  /**
   * Forks `parent` into `children` (checked with `check` just before, synchronously). The
   * children's queues are held from now on (calls to them wait for the fork); the parent's
   * step runs in the parent's turn (after its calls queued before).
   */
  async fork(parent: Slot, children: readonly Slot[]): Promise<ForkResponse> {
    let release!: (snap: Snapshot | undefined) => void;
    const parentDone = new Promise<Snapshot | undefined>((r) => (release = r));
    let started = 0;
    // Queued on every child now: nothing reaches a child between the check and the fork.
    const childSteps = children.map((c) =>
      c.enqueue(() =>
        c.withResetting(async () => {
          const snap = await parentDone;
          if (snap) await this.childStep(parent, c, snap);
        }),
      ),
    );
    let snapshot: Snapshot;
    try {
      snapshot = await parent.enqueue(async () => {
        started = performance.now();
        return this.parentStep(parent);
      });
    } catch (err) {
      release(undefined);
      await Promise.allSettled(childSteps);
      throw err;
    }
    release(snapshot);
    const results = await Promise.allSettled(childSteps);
    snapshot.done();
    const failed = results.findIndex((r) => r.status === "rejected");
    if (failed >= 0) {
      const err = (results[failed] as PromiseRejectedResult).reason;
      throw new Error(`fork of ${parent.id} into ${children[failed]!.id} failed after the parent's snapshot was taken (that child is left empty, as after a reset): ${err instanceof Error ? err.message : String(err)}`);
    }
    return { success: true, slot_id: parent.id, into: children.map((c) => c.id), mode: snapshot.mode, duration_ms: Math.round((performance.now() - started) * 100) / 100 };
  }

  private async parentStep(parent: Slot): Promise<Snapshot> {
    const h = this.host;
    const terminal = h.terminalState(parent) ?? { cwd: "/workspace", env: "" };
    const template = h.templates.views.templateOf(parent);
    const prev = this.views.get(parent.index);
    if (!this.mounter || (prev && prev.layers.length >= MAX_LAYERS)) {
      return { mode: "copy", parent, terminal, template: template?.name, layers: [], done: () => undefined };
    }
    const m = this.mounter;
    const disk = h.disks.viewsDir(parent)!;
    const owner = parent.owner ?? me();
    // What the parent wrote: its fork view's upper, its template view's upper, or the plain dir on its disk.
    const templateUpper = h.templates.views.upperOf(parent);
    const upper = prev?.upper ?? templateUpper ?? h.disks.workspaceSource(parent)!;
    const plain = !prev && !templateUpper;
    const tag = randomBytes(4).toString("hex");
    const layer: Layer = { dir: join(disk, `layer-${tag}`), owner, refs: 1 };
    const lowers = [layer.dir, ...(prev?.lowers ?? []), ...optional(h.templates.views.lowerOf(parent))];
    const next: ForkView = {
      layers: [layer, ...(prev?.layers ?? [])],
      lowers,
      clones: prev?.clones ?? [],
      upper: join(disk, `upper-${tag}`),
      work: join(disk, `work-${tag}`),
      stacked: (prev?.stacked ?? 0) + 1,
      rebind: (prev?.rebind ?? false) || plain,
    };
    const pid = h.terminalPid(parent);
    // The command namespaces were started on the old mount: restarted after (nothing in them outlives a call).
    await h.stopCommandNamespaces(parent);
    renameSync(upper, layer.dir);
    try {
      mkdirSync(next.upper, { mode: 0o700 });
      mkdirSync(next.work, { mode: 0o700 });
      chownSync(next.upper, owner.uid, owner.gid);
      await m.overlay(parent.workspaceDir, next.upper, next.work, lowers);
      try {
        if (pid !== undefined) await this.seal(pid, parent);
      } catch (err) {
        await m.umount(parent.workspaceDir);
        throw err;
      }
    } catch (err) {
      rmSync(next.upper, { recursive: true, force: true });
      rmSync(next.work, { recursive: true, force: true });
      renameSync(layer.dir, upper);
      h.warm(parent);
      throw err;
    }
    if (prev) void rm(prev.work, { recursive: true, force: true }).catch(() => undefined);
    this.views.set(parent.index, next);
    h.reanchorTerminal(parent);
    h.warm(parent);
    // Held until every child holds its own (a child's reset during the fork cannot delete them).
    for (const l of next.layers) l.refs++;
    return {
      mode: "overlay",
      parent,
      terminal,
      template: template?.name,
      layers: next.layers,
      done: () => {
        for (const l of next.layers) this.unref(l);
      },
    };
  }

  /** Seals the terminal's old mount (retried while a file of it is open for writing, a background job's log). */
  private async seal(pid: number, parent: Slot): Promise<void> {
    for (let i = 1; ; i++) {
      try {
        await this.mounter!.seal(pid, parent.workspaceDir);
        return;
      } catch (err) {
        if (!(err instanceof ForkBusyError)) throw err;
        if (i >= SEAL_TRIES) {
          throw new HttpError(
            409,
            `${parent.id} cannot be forked now: a process of its terminal holds a file in its workspace open for writing (e.g. a background job writing a log: its later writes would reach the children). Nothing changed; close the file or stop the job, then fork again`,
            "slot_id",
          );
        }
        await new Promise((r) => setTimeout(r, 10 * i));
      }
    }
  }

  private async childStep(parent: Slot, child: Slot, snap: Snapshot): Promise<void> {
    const h = this.host;
    await h.stopSlot(child);
    await this.release(child);
    // Copy mode copies the parent's whole view, template files included.
    const template = snap.template === undefined || snap.mode === "copy" ? undefined : h.templates.take(snap.template);
    await h.templates.resetWorkspace(child, template);
    h.disks.wipeTmp(child);
    if (snap.mode === "copy") {
      await run("cp", ["-a", "--reflink=auto", `${parent.workspaceDir}/.`, child.workspaceDir], { maxBuffer: 1 << 20 });
      if (child.owner) await run("chown", ["-R", `${child.owner.uid}:${child.owner.gid}`, child.workspaceDir]);
    } else {
      await this.attachChild(child, snap.layers);
    }
    h.seedTerminal(child, snap.terminal);
    h.warm(child);
  }

  private async attachChild(child: Slot, layers: Layer[]): Promise<void> {
    const m = this.mounter!;
    const h = this.host;
    const owner = child.owner ?? me();
    const disk = h.disks.viewsDir(child)!;
    const tag = randomBytes(4).toString("hex");
    const view: ForkView = { layers: [], lowers: [], clones: [], upper: join(disk, `upper-${tag}`), work: join(disk, `work-${tag}`), stacked: 1, rebind: false };
    try {
      for (const l of layers) {
        let path = l.dir;
        if (l.owner.uid !== owner.uid || l.owner.gid !== owner.gid) {
          path = join(this.cloneDir, child.id, `${tag}-${view.clones.length}`);
          mkdirSync(path, { recursive: true, mode: 0o700 });
          await m.idmap(l.dir, path, l.owner, owner);
          view.clones.push(path);
        }
        view.lowers.push(path);
      }
      mkdirSync(view.upper, { mode: 0o700 });
      mkdirSync(view.work, { mode: 0o700 });
      chownSync(view.upper, owner.uid, owner.gid);
      await m.overlay(child.workspaceDir, view.upper, view.work, [...view.lowers, ...optional(h.templates.views.lowerOf(child))]);
    } catch (err) {
      for (const c of view.clones) await this.dropClone(c);
      rmSync(view.upper, { recursive: true, force: true });
      rmSync(view.work, { recursive: true, force: true });
      throw err;
    }
    view.layers = layers;
    for (const l of layers) l.refs++;
    this.views.set(child.index, view);
  }

  /**
   * The reset's first workspace step (the slot's processes are dead): unmounts the slot's
   * fork view and drops its references to layers (a layer no view uses is deleted). The
   * template view or disk bind beneath is then the reset's as before.
   */
  async release(slot: Slot): Promise<void> {
    const v = this.views.get(slot.index);
    if (!v) return;
    this.views.delete(slot.index);
    const m = this.mounter!;
    for (let i = 0; i < v.stacked; i++) await m.umount(slot.workspaceDir);
    for (const c of v.clones) await this.dropClone(c);
    if (v.rebind) this.host.disks.rebindWorkspace(slot);
    for (const l of v.layers) this.unref(l);
    void rm(v.upper, { recursive: true, force: true }).catch(() => undefined);
    void rm(v.work, { recursive: true, force: true }).catch(() => undefined);
  }

  private unref(l: Layer): void {
    if (--l.refs > 0) return;
    // Off the event loop (libuv's pool): a layer may hold many files.
    void rm(l.dir, { recursive: true, force: true }).catch((err: unknown) => this.host.logger.warn({ err, layer: l.dir }, "could not delete a fork layer"));
  }

  private async dropClone(path: string): Promise<void> {
    await this.mounter!.umount(path);
    try {
      rmdirSync(path);
    } catch {
      /* still mounted (lazily detached) or gone */
    }
  }

  /** The number of layers beneath the slot's view (tests, docs). */
  depth(slot: Slot): number {
    return this.views.get(slot.index)?.layers.length ?? 0;
  }

  async close(): Promise<void> {
    for (const slot of this.host.slots) await this.release(slot).catch(() => undefined);
    this.mounter?.close();
  }
}

interface Snapshot {
  mode: ForkMode;
  parent: Slot;
  terminal: TerminalState;
  template: string | undefined;
  layers: Layer[];
  /** Drops the fork's own references once every child holds its own. */
  done: () => void;
}

function me(): Ids {
  return { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
}

function optional(s: string | undefined): string[] {
  return s === undefined ? [] : [s];
}
