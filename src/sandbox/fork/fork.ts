// Longer than 500 lines on purpose: the parent's step, each child's preparation, switch and undo share one table of views and layers, and their order is the argument that a failed fork changes nothing; read in one file, in order.
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chownSync, mkdirSync, renameSync, rmdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { whyNoMounts } from "../../host/mount-namespace.js";
import { HttpError } from "../../http/errors.js";
import type { ForkResponse } from "../../protocol/sandbox.js";
import { ForkBusyError, ForkMounter, type Ids } from "./fork-mount.js";
import { failpoint, ForkPrepareError, me, optional, type ForkHost, type ForkMode, type ForkView, type Layer, type Prepared, type PreparedView, type Snapshot } from "./fork-parts.js";
import { dropStage, stageCopy, swapIn } from "./copy-stage.js";
import { deferred, DiskSwaps, settle, type Settled } from "./disk-swaps.js";
import { NestedWritersError, stopNestedWriters } from "./nested-writers.js";
import { ForkTreeChangedError } from "./sandboxed-copy.js";
import type { NextDisk } from "../workspace/slot-disk.js";
import type { Slot } from "../core/slot.js";

const run = promisify(execFile);

/**
 * POST /fork: every child slot becomes a copy-on-write copy of the parent's workspace as it
 * is at that instant, in O(1) of what the workspace holds (docs/fork.md).
 *
 * "overlay" mode (the slot's disk is a tmpfs of its own and the server may mount):
 * - the parent's upper dir (what it wrote: the plain workspace dir on its disk, or the
 *   upper of its template or fork view) is renamed into a *layer* on the parent's disk,
 *   which gets a read-only handle of its own (alive after the parent's reset): a detached
 *   mount in no mount table where the kernel allows (ForkMounter), since every new slot
 *   namespace copies the server's mount table;
 * - the parent gets a fresh upper over [layer, its older layers, its template], mounted over
 *   its workspace in the server's namespace (in place of its previous fork view, if any) and
 *   in each of its live namespaces (terminal and
 *   command namespaces), where the old mount is first made read-only (the kernel refuses
 *   while a process holds a file of it open for writing: retried a few times, then 409 and
 *   nothing changed). From then on nothing writes to the layer: a process whose working
 *   directory is on the old mount reads the state at the fork and gets EROFS writing there;
 *   the terminal's shell and each namespace's next command enter /workspace again;
 * - every child is prepared beside its old workspace first (its handles of the layers: as
 *   root id-mapped ones, files of the slot that wrote a layer appearing as the child's own; a
 *   used child's fresh disk at a path of its own; a fresh upper on it over [the parent's
 *   layers], mounted detached); a failure there undoes what every child prepared, so no
 *   child changes. Then each used child's processes are killed (the one step that cannot be
 *   undone, after every step that can fail), the used children's disks are swapped in one
 *   helper request and each prepared view is moved onto its workspace. A parent with a
 *   template view: the child's view has the template as its lowest layer (as root an
 *   id-mapped handle for the child's uid), prepared the same way; once switched, the child
 *   counts as a view of that template (templates.adopt) with no template mount of its own;
 * - a layer is deleted when no view uses it any more; until then it counts against the disk
 *   bound of the slot that wrote it, also after that slot's reset.
 * "copy" mode (no per-slot disk, or no mounts): the parent's workspace is copied (O(files),
 *   and not atomic against the parent's background processes; inside the parent's sandbox,
 *   as its uid, so a parent swapping dirs for symlinks mid-copy reaches nothing of the host:
 *   sandboxed-copy.ts), staged beside each child's
 *   workspace and swapped in once every child's copy is complete (copy-stage.ts); a deep
 *   fork past MAX_LAYERS in overlay mode copies after the child's reset instead.
 */
export type { ForkHost, ForkMode } from "./fork-parts.js";

/** Layers beneath one view at most; deeper forks copy (overlayfs allows 500, the cost grows with depth). */
const MAX_LAYERS = 64;
/** Tries to seal the parent's old mount while a process holds a file of it open for writing. */
const SEAL_TRIES = 5;

export class SlotForks {
  readonly mode: ForkMode;
  readonly reason: string | undefined;
  private readonly mounter: ForkMounter | undefined;
  private readonly views = new Map<number, ForkView>();
  private readonly layerDir: string;
  /** Copy mode's staged copies where a child has no disk of its own (same filesystem as the workspaces). */
  private readonly copyDir: string;

  constructor(private readonly host: ForkHost) {
    this.layerDir = join(host.stateDir, "fork-layers");
    // A killed server's mounts died with its namespace: what is left are empty dirs.
    rmSync(this.layerDir, { recursive: true, force: true });
    mkdirSync(this.layerDir, { recursive: true, mode: 0o700 });
    // A killed server's unfinished copies: deleted in the background.
    this.copyDir = join(host.stateDir, "fork-copies");
    host.discard(this.copyDir);
    mkdirSync(this.copyDir, { recursive: true, mode: 0o700 });
    const why =
      host.disks.mode !== "tmpfs" ? `no disk of its own per slot (${host.disks.reason ?? "tmpfs mode off"})`
      : host.templates.views.mode !== "overlay" ? "template views are copies (no overlayfs)"
      : whyNoMounts();
    const built = why === undefined ? ForkMounter.build(host.stateDir, this.layerDir) : undefined;
    if (built && "error" in built) this.reason = built.error;
    else this.reason = why;
    this.mounter = built && !("error" in built) ? built : undefined;
    this.mode = this.mounter ? "overlay" : "copy";
    if (this.mounter && !this.mounter.detached) {
      host.logger.info({ why: this.mounter.attachedBecause }, "fork layers are mounts in the server's namespace (overlayfs here takes no detached mount as a layer): every slot namespace started copies them");
    }
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
    // Two phases for the children: each prepares what may fail without touching the child
    // (the layers as it will read them, its new dirs); only when every child is prepared does
    // any child drop its contents. A failed preparation leaves every child as it was.
    const prepared = children.map(() => deferred<Prepared | undefined>());
    const preps = Promise.all(prepared.map((d) => d.promise));
    const allPrepared = preps.then((ps) => ps.every(Boolean));
    // The used children's disks are swapped in one helper request, once all are stopped.
    const swaps = preps.then((ps) => new DiskSwaps(this.host.disks, ps.filter((p) => p?.view && p.disk).length));
    // Queued on every child now: nothing reaches a child between the check and the fork.
    const childSteps = children.map((c, i) =>
      c.enqueue(() =>
        c.withResetting(async () => {
          // A used child's new disk does not depend on the parent: made while the parent's
          // step runs (dropped if the fork goes no further or does not use it).
          const disk = this.mounter && this.host.disks.preparesBeside && !this.isFresh(c) ? settle(this.host.disks.prepareNext(c)) : undefined;
          const snap = await parentDone;
          if (!snap) {
            await this.dropEarly(c, disk);
            return prepared[i]!.resolve(undefined);
          }
          let prep: Prepared;
          try {
            prep = await this.prepare(c, snap, disk);
          } catch (err) {
            prepared[i]!.resolve(undefined);
            throw new ForkPrepareError(c, err);
          }
          prepared[i]!.resolve(prep);
          // Another child failed: this one stays as it was (what was prepared beside is undone;
          // its handles live with their layers).
          if (await allPrepared) await this.childStep(parent, c, snap, prep, await swaps);
          else await this.undo(c, prep);
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
    // Warm-ups spawn (milliseconds of blocked event loop each): after the answer, not before.
    for (const c of children) this.host.warm(c);
    const failed = results.findIndex((r) => r.status === "rejected");
    if (failed >= 0) {
      const err = (results[failed] as PromiseRejectedResult).reason;
      if (err instanceof ForkPrepareError) {
        if (err.cause instanceof ForkTreeChangedError) throw new ForkTreeChangedError(err.cause.detail, parent.id);
        throw new Error(`fork of ${parent.id} failed before any child changed: ${err.message}. The parent and every child are as they were`);
      }
      throw new Error(`fork of ${parent.id} into ${children[failed]!.id} failed after every child was prepared (that child's processes were stopped; it is out of service until a reset): ${err instanceof Error ? err.message : String(err)}`);
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
    const tag = randomBytes(4).toString("hex");
    const layer: Layer = { dir: "", src: join(disk, `layer-${tag}`), owner, refs: 1, clones: new Map() };
    const templateLower = optional(h.templates.views.lowerOf(parent));
    const next: ForkView = {
      layers: [layer, ...(prev?.layers ?? [])],
      lowers: [],
      upper: join(disk, `upper-${tag}`),
      work: join(disk, `work-${tag}`),
      stacked: 1,
    };
    const pid = h.terminalPid(parent);
    const commandPids = await h.commandNamespacePids(parent);
    renameSync(upper, layer.src);
    try {
      layer.dir = await m.handle(layer.src);
      next.lowers = [layer.dir, ...(prev?.lowers ?? [])];
      mkdirSync(next.upper, { mode: 0o700 });
      mkdirSync(next.work, { mode: 0o700 });
      chownSync(next.upper, owner.uid, owner.gid);
      if (prev) {
        // A later fork replaces the previous fork's view (the server's mount stack stays one
        // deep). The new view is held detached until the terminal is sealed: a refusal then
        // leaves the old view where it was.
        const view = await m.overlayDetached(parent.index, next.upper, next.work, [...next.lowers, ...templateLower]);
        try {
          if (pid !== undefined) await this.seal(pid, parent, view);
        } catch (err) {
          await m.closeMount(parent.index, view);
          throw err;
        }
        if (await m.attach(parent.index, view, parent.workspaceDir)) next.stacked = prev.stacked + 1;
      } else {
        await m.overlay(parent.index, parent.workspaceDir, next.upper, next.work, [...next.lowers, ...templateLower]);
        try {
          if (pid !== undefined) await this.seal(pid, parent, parent.workspaceDir);
        } catch (err) {
          await m.umount(parent.index, parent.workspaceDir);
          throw err;
        }
      }
    } catch (err) {
      rmSync(next.upper, { recursive: true, force: true });
      rmSync(next.work, { recursive: true, force: true });
      if (layer.dir) await m.dropHandle(layer.dir).catch(() => undefined);
      renameSync(layer.src, upper);
      throw err;
    }
    // The command namespaces get the new mount the same way (nothing holds files there between
    // calls); one that cannot is stopped: nothing outlives a call in it, the next call starts it anew.
    try {
      await Promise.all(commandPids.map((p, i) => this.mounter!.seal(parent.index + i + 1, p, parent.workspaceDir)));
      h.reanchorCommands(parent);
    } catch (err) {
      h.logger.warn({ err, slot: parent.id }, "fork: restarting the parent's command namespaces on the new mount");
      await h.stopCommandNamespaces(parent);
    }
    // The seal covers the namespaces the server made; what the slot made below them is stopped.
    try {
      const t0 = performance.now();
      const stopped = await stopNestedWriters([...(pid !== undefined ? [pid] : []), ...commandPids]);
      h.logger.debug({ slot: parent.id, ms: Math.round((performance.now() - t0) * 1000) / 1000 }, "fork: nested-namespace sweep");
      if (stopped > 0) h.logger.info({ slot: parent.id, stopped }, "fork: stopped the parent's processes in mount namespaces of their own (they could write into the layer)");
    } catch (err) {
      // Past the switch there is no way back: a slot that keeps escaping loses all its processes.
      if (!(err instanceof NestedWritersError)) throw err;
      h.logger.warn({ slot: parent.id, err: err.message }, "fork: stopping every process of the parent");
      await h.stopSlot(parent);
    }
    if (prev) this.dropDir(prev.work);
    this.views.set(parent.index, next);
    h.reanchorTerminal(parent);
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
  private async seal(pid: number, parent: Slot, source: string): Promise<void> {
    for (let i = 1; ; i++) {
      try {
        await this.mounter!.seal(parent.index, pid, source);
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

  /**
   * What may fail for a child, done before any child changes: its handles of the layers (as
   * root, id-mapped clones for its uid) and, where the disk helper can (no template in the
   * snapshot), its whole new workspace beside the old one: a used child's fresh disk at a
   * path of its own, the view's upper and work on it, the view mounted detached. `undo`
   * drops what was prepared; `childStep` switches to it.
   */
  private async prepare(child: Slot, snap: Snapshot, early: Promise<Settled<NextDisk>> | undefined): Promise<Prepared> {
    const h = this.host;
    const prep: Prepared = { lowers: [], fresh: snap.mode === "overlay" && this.isFresh(child) };
    try {
      const made = await early;
      if (made && "error" in made) throw made.error;
      prep.disk = made?.value;
      failpoint(child, "");
      if (!this.mounter) {
        // Copy mode: the parent's tree staged beside the child's workspace, swapped in by childStep.
        prep.copy = await stageCopy((dir) => h.copyWorkspace(snap.parent, dir), h.disks.viewsDir(child) ?? this.copyDir, child.owner, () => failpoint(child, "copy"));
        return prep;
      }
      if (snap.mode !== "overlay" || (!prep.fresh && !prep.disk)) {
        // The reset-then-attach path (copy mode, a disk that cannot be made beside): nothing prepared beside.
        await this.undo(child, prep);
        if (snap.mode === "overlay") prep.lowers = await Promise.all(snap.layers.map((l) => this.lowerFor(l, child.owner ?? me())));
        return prep;
      }
      const owner = child.owner ?? me();
      prep.lowers = await Promise.all(snap.layers.map((l) => this.lowerFor(l, owner)));
      failpoint(child, "disk");
      if (snap.template !== undefined) {
        // The parent's template: the child's view reads it as its lowest layer (as the child's
        // uid: an id-mapped handle as root), so the child needs no template view of its own
        // mounted at its workspace; it counts as one (templates.adopt) once switched.
        const t = h.templates.take(snap.template);
        prep.template = { t, lower: t.treeDir, handle: false };
        const from = t.owner ?? me();
        if (from.uid !== owner.uid || from.gid !== owner.gid) {
          prep.template.lower = await this.mounter!.idmapHandle(t.treeDir, from, owner);
          prep.template.handle = true;
        }
        failpoint(child, "template");
      }
      const dir = prep.disk?.views ?? h.disks.viewsDir(child)!;
      const tag = randomBytes(4).toString("hex");
      const upper = join(dir, `upper-${tag}`);
      const work = join(dir, `work-${tag}`);
      prep.view = { mount: "", upper, work };
      mkdirSync(upper, { mode: 0o700 });
      mkdirSync(work, { mode: 0o700 });
      chownSync(upper, owner.uid, owner.gid);
      prep.view.mount = await this.mounter!.overlayDetached(child.index, upper, work, [...prep.lowers, ...optional(prep.template?.lower)]);
      failpoint(child, "view");
    } catch (err) {
      await this.undo(child, prep);
      throw err;
    }
    return prep;
  }

  /**
   * Nothing ran in the child since its reset (empty disk, no view) or since a fork switched it
   * (a fork view with an empty upper, a template only read through it): no terminal,
   * namespaces that ran nothing, /tmp empty. It needs no reset: its new view goes over (or
   * in place of) its workspace on its own disk, its idle namespaces get it sealed in.
   */
  private isFresh(child: Slot): boolean {
    if (!child.pristine) return false;
    const views = this.host.templates.views;
    return views.upperOf(child) === undefined && (this.views.has(child.index) || views.templateOf(child) === undefined);
  }

  private async dropEarly(child: Slot, early: Promise<Settled<NextDisk>> | undefined): Promise<void> {
    const made = await early;
    if (made && "value" in made) await this.undo(child, { lowers: [], fresh: false, disk: made.value });
  }

  /** Drops what `prepare` made beside the child's workspace (the fork failed): the child is as it was. */
  private async undo(child: Slot, prep: Prepared): Promise<void> {
    this.dropTemplate(child, prep);
    if (prep.copy) {
      const c = prep.copy;
      prep.copy = undefined;
      await dropStage(c).catch((err: unknown) => this.host.logger.warn({ err, slot: child.id }, "fork undo: removing a staged copy"));
    }
    const v = prep.view;
    prep.view = undefined;
    if (v?.mount) await this.mounter!.closeMount(child.index, v.mount).catch((err: unknown) => this.host.logger.warn({ err, slot: child.id }, "fork undo: closing a prepared view"));
    if (v && !prep.disk) {
      rmSync(v.upper, { recursive: true, force: true });
      rmSync(v.work, { recursive: true, force: true });
    }
    if (prep.disk) {
      const d = prep.disk;
      prep.disk = undefined;
      await this.host.disks.drop(d).catch((err: unknown) => this.host.logger.warn({ err, slot: child.id, disk: d.disk }, "fork undo: dropping a prepared disk"));
    }
  }

  /** Hands back the template reference and handle `prepare` took (the fork failed for this child). */
  private dropTemplate(child: Slot, prep: Prepared): void {
    const t = prep.template;
    prep.template = undefined;
    if (!t) return;
    if (t.handle) void this.mounter!.dropHandle(t.lower).catch((err: unknown) => this.host.logger.warn({ err, slot: child.id }, "fork undo: dropping a template handle"));
    this.host.templates.give(t.t);
  }

  private async childStep(parent: Slot, child: Slot, snap: Snapshot, prep: Prepared, swaps: DiskSwaps): Promise<void> {
    const h = this.host;
    child.pristine = false;
    if (prep.view) {
      await this.switchTo(child, snap, prep, prep.view, swaps);
      return;
    }
    if (prep.copy) {
      // Copy mode: every child's copy is complete; from here the child's old tree is dropped.
      const copy = prep.copy;
      prep.copy = undefined;
      try {
        await h.stopSlot(child);
        await h.templates.detach(child);
        const source = h.disks.workspaceSource(child);
        swapIn(copy, child.workspaceDir, source ? { source, scratch: h.disks.scratchDirs(child) } : undefined, h.discard);
      } catch (err) {
        await dropStage(copy).catch(() => undefined);
        child.outOfService = `a fork into it failed after its processes were stopped (${err instanceof Error ? err.message : String(err)})`;
        throw err;
      }
      h.seedTerminal(child, snap.terminal);
      return;
    }
    await h.stopSlot(child);
    await this.release(child);
    // Copy mode copies the parent's whole view, template files included.
    await h.resetWorkspace(child, snap.mode === "copy" ? undefined : snap.template);
    if (snap.mode === "copy") {
      // The child's processes are dead: nothing else writes its fresh workspace while the copy fills it.
      // Past the child's reset a changed tree is no longer "nothing changed" (ForkTreeChangedError's 409).
      await h.copyWorkspace(parent, child.workspaceDir).catch((err: unknown) => {
        throw err instanceof ForkTreeChangedError ? new Error(`the parent's workspace changed while it was being copied: ${err.detail}`, { cause: err }) : err;
      });
      if (child.owner) await run("chown", ["-R", "--no-dereference", `${child.owner.uid}:${child.owner.gid}`, child.workspaceDir]);
    } else {
      await this.attachChild(child, snap.layers, prep);
    }
    h.seedTerminal(child, snap.terminal);
  }

  /**
   * The switch to a child's prepared workspace, once every child is prepared. A used child's
   * processes are killed first (the one step that cannot be undone, so none that can fail
   * comes before it in any child); the rest only detaches and attaches mounts. A failure
   * here takes the child out of service until a reset (never its old files under a new
   * name).
   */
  private async switchTo(child: Slot, snap: Snapshot, prep: Prepared, view: PreparedView, swaps: DiskSwaps): Promise<void> {
    const h = this.host;
    const m = this.mounter!;
    let replaced: { prev: ForkView; stacked: boolean } | undefined;
    try {
      if (prep.disk) {
        try {
          await h.stopSlot(child);
          // The swap detaches every mount at the workspace at once: views are only forgotten here.
          await this.release(child, false);
          await h.templates.detach(child);
        } catch (err) {
          swaps.skip();
          throw err;
        }
        await swaps.swap(child, prep.disk);
        await m.attachTop(child.index, view.mount, child.workspaceDir);
      } else {
        // Fresh: idle command namespaces get the view the way the parent's do.
        const prev = this.views.get(child.index);
        h.logger.debug({ slot: child.id, refork: prev !== undefined }, prev ? "fork: the child received a fork and ran nothing since: its view is replaced, no reset" : "fork: the child is fresh from a reset: no reset");
        const pids = await h.commandNamespacePids(child);
        if (prev) {
          // In place of its previous fork view (beneath it, as a parent's next view): the
          // workspace stays one view deep, nothing is stopped, its disk stays.
          const stacked = await m.attach(child.index, view.mount, child.workspaceDir);
          this.views.delete(child.index);
          replaced = { prev, stacked };
        } else {
          await m.attachTop(child.index, view.mount, child.workspaceDir);
        }
        try {
          await Promise.all(pids.map((p, i) => m.seal(child.index + i, p, child.workspaceDir)));
          h.reanchorCommands(child);
        } catch (err) {
          h.logger.warn({ err, slot: child.id }, "fork: restarting the child's command namespaces on its new workspace");
          await h.stopCommandNamespaces(child);
        }
      }
    } catch (err) {
      this.dropTemplate(child, prep);
      if (replaced) this.views.set(child.index, { ...replaced.prev, stacked: replaced.prev.stacked + (replaced.stacked ? 1 : 0) });
      child.outOfService = `a fork into it failed after its processes were stopped (${err instanceof Error ? err.message : String(err)})`;
      throw err;
    }
    // The template the replaced view read (if any) is handed back before the new one is adopted.
    if (replaced) await h.templates.detach(child);
    if (prep.template) {
      const { t, lower, handle } = prep.template;
      prep.template = undefined;
      const drop = (): void => {
        if (handle) void this.mounter?.dropHandle(lower).catch((err: unknown) => h.logger.warn({ err, slot: child.id }, "could not drop a fork child's template handle"));
      };
      h.templates.adopt(child, t, lower, drop);
    }
    for (const l of snap.layers) l.refs++;
    const next: ForkView = { layers: snap.layers, lowers: prep.lowers, upper: view.upper, work: view.work, stacked: 1 };
    if (replaced) {
      const { prev, stacked } = replaced;
      if (stacked) {
        // Still mounted beneath the new view until the slot's reset: its layers stay with it.
        next.stacked = prev.stacked + 1;
        next.retired = [...(prev.retired ?? []), ...prev.layers];
      } else {
        for (const l of [...prev.layers, ...(prev.retired ?? [])]) this.unref(l);
        // Empty (nothing ran in the child since), on the child's disk.
        this.dropDir(prev.upper);
        this.dropDir(prev.work);
      }
    }
    this.views.set(child.index, next);
    h.seedTerminal(child, snap.terminal);
    // Nothing of the slot has run on its new workspace yet: a fork right after needs no reset.
    child.pristine = true;
  }

  private async attachChild(child: Slot, layers: Layer[], prep: Prepared): Promise<void> {
    const m = this.mounter!;
    const h = this.host;
    const owner = child.owner ?? me();
    const disk = h.disks.viewsDir(child)!;
    const tag = randomBytes(4).toString("hex");
    const view: ForkView = { layers: [], lowers: prep.lowers, upper: join(disk, `upper-${tag}`), work: join(disk, `work-${tag}`), stacked: 1 };
    try {
      mkdirSync(view.upper, { mode: 0o700 });
      mkdirSync(view.work, { mode: 0o700 });
      chownSync(view.upper, owner.uid, owner.gid);
      await m.overlay(child.index, child.workspaceDir, view.upper, view.work, [...view.lowers, ...optional(h.templates.views.lowerOf(child))]);
    } catch (err) {
      rmSync(view.upper, { recursive: true, force: true });
      rmSync(view.work, { recursive: true, force: true });
      throw err;
    }
    view.layers = layers;
    for (const l of layers) l.refs++;
    this.views.set(child.index, view);
  }

  /**
   * Removes an overlay's old work dir, or an upper nothing wrote to, at once (a few rmdir):
   * `discard` spawns a process per tree, milliseconds of blocked event loop each, which on
   * a fork into 8 children lands on its answer. Anything more than empty dirs is discarded.
   */
  private dropDir(dir: string): void {
    try {
      for (const sub of ["work", "index"]) {
        try {
          rmdirSync(join(dir, sub));
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
        }
      }
      rmdirSync(dir);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") this.host.discard(dir);
    }
  }

  /** The layer as `reader` sees it: its handle, or (as root, another slot's uid) its id-mapped handle, made once. */
  private lowerFor(l: Layer, reader: Ids): Promise<string> {
    if (l.owner.uid === reader.uid && l.owner.gid === reader.gid) return Promise.resolve(l.dir);
    const key = `${reader.uid}:${reader.gid}`;
    let handle = l.clones.get(key);
    if (!handle) {
      const made = this.mounter!.idmapHandle(l.dir, l.owner, reader);
      l.clones.set(key, made);
      made.catch(() => l.clones.get(key) === made && l.clones.delete(key));
      handle = made;
    }
    return handle;
  }

  /**
   * The reset's first workspace step (the slot's processes are dead): unmounts the slot's
   * fork view and drops its references to layers (a layer no view uses is deleted). The
   * template view or disk bind beneath is then the reset's as before.
   */
  async release(slot: Slot, unmount = true): Promise<void> {
    const v = this.views.get(slot.index);
    if (!v) return;
    this.views.delete(slot.index);
    const m = this.mounter!;
    if (unmount) for (let i = 0; i < v.stacked; i++) await m.umount(slot.index, slot.workspaceDir);
    for (const l of [...v.layers, ...(v.retired ?? [])]) this.unref(l);
    // Upper and work lie on the slot's disk, which the reset that follows replaces whole.
  }

  private unref(l: Layer): void {
    if (--l.refs > 0) return;
    const clones = [...l.clones.values()];
    l.clones.clear();
    // Its files: deleted in the background where its slot's disk still holds them (after a
    // reset of that slot they go with the old disk, freed when its last mount goes).
    this.host.discard(l.src);
    void (async () => {
      const handles = await Promise.all(clones.map((c) => c.catch(() => undefined)));
      for (const c of [...handles, l.dir]) if (c) await this.mounter!.dropHandle(c);
    })().catch((err: unknown) => this.host.logger.warn({ err, layer: l.dir }, "could not drop a fork layer's handles"));
  }

  /** Live layer handles the server holds (its own and id-mapped ones): tests check they are bounded. */
  liveHandles(): number {
    const seen = new Set<Layer>();
    for (const v of this.views.values()) for (const l of v.layers) seen.add(l);
    let n = 0;
    for (const l of seen) n += 1 + l.clones.size;
    return n;
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
