import { randomBytes } from "node:crypto";
import { chownSync, closeSync, mkdirSync, openSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { IMAGE_UID_SPAN, imageHostUid, imageUidMap } from "../../host/slot-uid-blocks.js";
import { claimImageUidBlock, type ImageUidClaim } from "../../host/image-uid-claim.js";
import type { Slot } from "../core/slot.js";
import type { SlotDisks } from "../workspace/slot-disk.js";
import type { TreeRemoval } from "../workspace/tree-removal.js";
import type { ImageMounter } from "./image-mounter.js";
import type { StoredImage } from "./image-store.js";

/**
 * Each slot's root when it is an image: overlayfs at the slot's workspace dir (in the
 * server's mount namespace, where every namespace the slot starts after its reset finds it),
 * lower = the image's layers, upper and work on the slot's own disk (slot-disk.ts: counted in
 * its disk bound, gone with the disk at reset). Attaching costs one request to the mount
 * helper, whatever the image's size.
 *
 * As root, each slot has a user namespace of its own (made once, kept while the server runs):
 * inside uid 0 is the slot's host uid and 1-65535 its block of image uids
 * (host/slot-uid-blocks.ts). The image's layers (owned on disk as the image has them) are
 * read through id-mapped handles of that namespace, one per slot and layer, made at the
 * slot's first use of the image and kept across its resets: on-disk uid N is, to the slot,
 * uid N of its namespace, and to the host one of the slot's own uids. A reset is then only a
 * new overlay. Not root, the server has one uid: the layers are its files, used as they are,
 * and the slot's namespace (bubblewrap's) maps that uid to 0: the whole image is root's.
 */

const run = promisify(execFile);

/** What a fresh disk needs to mount an image root in the same request (slot-disk.ts `renew`): its lowers (top first) and the root's host ids. */
export interface RootPlan {
  lowers: string[];
  uid: number;
  gid: number;
}

/** Where a root mounted with the disk has its upper and work dirs. */
export interface MountedRoot {
  upper: string;
  work: string;
}

/** An image template's layer (templates/): its tree, and the slot that built it (whose uids its files have). */
export interface TemplateLayer {
  dir: string;
  builtBy: Slot;
}

interface SlotRootState {
  /** The mount helper's generation the descriptors below belong to. */
  generation: number;
  userns?: { helperFd: string; nodeFd: number };
  /** Layer dir → its id-mapped handle (a descriptor of the helper). */
  handles: Map<string, string>;
  attached?: { image: StoredImage; upper: string; work: string; bounded: boolean };
}

export interface SlotRootsHost {
  readonly slots: readonly Slot[];
  readonly disks: SlotDisks;
  readonly stateDir: string;
  readonly removal: TreeRemoval;
  readonly logger: Logger;
}

export class SlotRoots {
  private readonly states = new Map<number, SlotRootState>();
  private claim: Promise<ImageUidClaim> | undefined;
  private readonly uppersDir: string;

  constructor(
    private readonly host: SlotRootsHost,
    private readonly mounter: ImageMounter,
    /** Root with per-slot uids: id-mapped layers and a user namespace per slot. */
    private readonly idmapped: boolean,
  ) {
    this.uppersDir = join(host.stateDir, "image-uppers");
    host.removal.discard(this.uppersDir);
    mkdirSync(this.uppersDir, { recursive: true, mode: 0o700 });
  }

  /** The image the slot's root is, if it is one. */
  imageOf(slot: Slot): StoredImage | undefined {
    return this.states.get(slot.index)?.attached?.image;
  }

  /** The upper layer of the slot's root (what the slot changed), if its root is an image (fork.ts). */
  upperOf(slot: Slot): string | undefined {
    return this.states.get(slot.index)?.attached?.upper;
  }

  /** The host ids of the image user `inside` in the slot (root server, once its block is claimed), else undefined (the server's own). */
  ownerOf(slot: Slot, inside: { uid: number; gid: number }): { uid: number; gid: number } | undefined {
    if (!this.idmapped || !slot.owner || this.base === undefined) return undefined;
    return { uid: imageHostUid(slot.owner.uid, this.base, slot.index, inside.uid), gid: imageHostUid(slot.owner.gid, this.base, slot.index, inside.gid) };
  }

  /**
   * The inverse of `ownerOf`: the image id a host uid (or gid) of the slot's files is (an
   * image build reads a step's upper layer as the host sees it). Not root, or outside the
   * slot's ids: 0 (the server's own uid is the slot's root).
   */
  insideOf(slot: Slot, hostId: number, kind: "uid" | "gid"): number {
    if (!this.idmapped || !slot.owner || this.base === undefined) return 0;
    if (hostId === (kind === "uid" ? slot.owner.uid : slot.owner.gid)) return 0;
    const first = this.base + slot.index * IMAGE_UID_SPAN;
    return hostId > first && hostId < first + IMAGE_UID_SPAN ? hostId - first : 0;
  }

  /** The claimed block's base, once known. */
  private base: number | undefined;

  /** This server's image uid block (claimed at the first image, host/image-uid-claim.ts). */
  blockBase(): Promise<number> {
    const owner = this.host.slots[0]?.owner;
    if (!this.idmapped || !owner) return Promise.resolve(0);
    this.claim ??= claimImageUidBlock(owner.uid, this.host.slots.length);
    return this.claim.then((c) => (this.base = c.base));
  }

  private state(slot: Slot): SlotRootState {
    let st = this.states.get(slot.index);
    if (!st || st.generation !== this.mounter.generation) {
      // The helper was restarted: its descriptors (namespaces, handles) are gone with it.
      if (st?.userns) closeQuietly(st.userns.nodeFd);
      st = { generation: this.mounter.generation, handles: new Map(), ...(st?.attached ? { attached: st.attached } : {}) };
      this.states.set(slot.index, st);
    }
    return st;
  }

  /**
   * The slot's user namespace as a descriptor of this process (bubblewrap's --userns takes it
   * as one of its own fds), made at the slot's first image; undefined when not root.
   */
  async usernsFd(slot: Slot): Promise<number | undefined> {
    if (!this.idmapped || !slot.owner) return undefined;
    const st = this.state(slot);
    if (!st.userns) {
      const base = await this.blockBase();
      const o = slot.owner;
      const fd = await this.mounter.call(["userns", String(o.uid), String(o.gid), imageUidMap(o.uid, base, slot.index), imageUidMap(o.gid, base, slot.index)]);
      const nodeFd = openSync(this.mounter.handlePath(fd), "r");
      st.userns = { helperFd: fd, nodeFd };
    }
    return st.userns.nodeFd;
  }

  /** The slot's user namespace descriptor if made (attach makes it), else undefined. */
  currentUsernsFd(slot: Slot): number | undefined {
    const st = this.states.get(slot.index);
    return st && st.generation === this.mounter.generation ? st.userns?.nodeFd : undefined;
  }

  /** The slot's lower layers for `image`: id-mapped handles (made once per slot and layer) as root, the layer dirs otherwise. */
  private async lowers(slot: Slot, image: StoredImage): Promise<string[]> {
    if (!this.idmapped || !slot.owner) return image.lowers;
    await this.usernsFd(slot);
    const st = this.state(slot);
    const ns = st.userns!.helperFd;
    const out: string[] = [];
    for (const dir of image.lowers) {
      let h = st.handles.get(dir);
      if (!h) {
        h = await this.mounter.call(["keep", dir, ns]);
        st.handles.set(dir, h);
      }
      out.push(this.mounter.ownPath(h));
    }
    return out;
  }

  /**
   * Makes the slot's root `image` (its workspace dir fresh and empty, its processes dead: the
   * reset's last step). Upper and work go on the slot's disk where it has one. `seed`: a fork's
   * parent on the same image, frozen: its upper layer (what it changed) is copied into this
   * slot's first, its owners the parent's uids mapped to this slot's (an id-mapped view of it).
   */
  async attach(slot: Slot, image: StoredImage, seed?: Slot, templateLayer?: TemplateLayer): Promise<void> {
    const lowers = [...(templateLayer ? [await this.templateLower(slot, templateLayer)] : []), ...(await this.lowers(slot, image))];
    const bounded = this.host.disks.viewsDir(slot);
    const base = bounded ?? this.uppersDir;
    const tag = `${slot.id}-${randomBytes(4).toString("hex")}`;
    const upper = join(base, `root-${tag}`);
    const work = join(base, `root-work-${tag}`);
    mkdirSync(upper, { mode: 0o755 });
    mkdirSync(work, { mode: 0o700 });
    // The upper's top directory is the root's: root's own, as in any image.
    if (this.idmapped && slot.owner) chownSync(upper, slot.owner.uid, slot.owner.gid);
    try {
      if (seed) await this.copyUpper(seed, slot, upper);
      await this.mounter.call(["overlay", slot.workspaceDir, upper, work, ...lowers]);
    } catch (err) {
      this.host.removal.discard(upper);
      this.host.removal.discard(work);
      throw err;
    }
    this.state(slot).attached = { image, upper, work, bounded: bounded !== undefined };
  }

  /**
   * The slot's lowers for `image` (and a template's layer on it), as paths another process of
   * the server (the disk helper) can mount from: the image helper's descriptors by pid.
   */
  async plan(slot: Slot, image: StoredImage, templateLayer?: TemplateLayer): Promise<RootPlan> {
    const own = [...(templateLayer ? [await this.templateLower(slot, templateLayer)] : []), ...(await this.lowers(slot, image))];
    const pid = this.mounter.pid;
    const me = { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };
    const ids = this.idmapped && slot.owner ? slot.owner : me;
    return { lowers: own.map((p) => p.replace(/^\/proc\/self\/fd\//, `/proc/${pid}/fd/`)), uid: ids.uid, gid: ids.gid };
  }

  /** The slot's root was mounted with its fresh disk (`plan`): recorded as attached. */
  adopt(slot: Slot, image: StoredImage, mounted: MountedRoot): void {
    this.state(slot).attached = { image, upper: mounted.upper, work: mounted.work, bounded: true };
  }

  /**
   * An image template's layer as the slot reads it: built by the template's build slot (its
   * uids on disk), seen through an id-mapped handle whose owners are this slot's (made once per
   * slot and template), or the tree itself where the uids are the same (not root, slot_0).
   */
  private async templateLower(slot: Slot, t: TemplateLayer): Promise<string> {
    if (!this.idmapped || !slot.owner || !t.builtBy.owner || t.builtBy.index === slot.index) return t.dir;
    const st = this.state(slot);
    const key = `template:${t.dir}`;
    let h = st.handles.get(key);
    if (!h) {
      const ns = await this.mapping(t.builtBy, slot);
      try {
        h = await this.mounter.call(["keep", t.dir, ns]);
      } finally {
        await this.mounter.call(["drop", ns]).catch(() => undefined);
      }
      st.handles.set(key, h);
    }
    return this.mounter.ownPath(h);
  }

  /** A user namespace (a helper descriptor) mapping `from`'s image uids (its host uid and block) to `to`'s. */
  private async mapping(from: Slot, to: Slot): Promise<string> {
    const base = await this.blockBase();
    const block = (s: Slot) => imageHostUid(0, base, s.index, 1);
    const f = from.owner!;
    const t = to.owner!;
    const uidMap = `${f.uid}:${t.uid}:1,${block(from)}:${block(to)}:${IMAGE_UID_SPAN - 1}`;
    const gidMap = `${f.gid}:${t.gid}:1,${block(from)}:${block(to)}:${IMAGE_UID_SPAN - 1}`;
    return this.mounter.call(["userns", String(t.uid), String(t.gid), uidMap, gidMap]);
  }

  /**
   * An image root for a template build at `target` (not a slot's workspace): `slot`'s view of
   * the image's layers, `upper` and `work` (fresh dirs made here) the build's. Returns the
   * slot's user namespace descriptor (root) and how to unmount it.
   */
  async mountAt(slot: Slot, image: StoredImage, target: string, upper: string, work: string): Promise<{ usernsFd: number | undefined; unmount: () => Promise<void> }> {
    const lowers = await this.lowers(slot, image);
    mkdirSync(upper, { mode: 0o755 });
    mkdirSync(work, { mode: 0o700 });
    if (this.idmapped && slot.owner) chownSync(upper, slot.owner.uid, slot.owner.gid);
    await this.mounter.call(["overlay", target, upper, work, ...lowers]);
    return { usernsFd: await this.usernsFd(slot), unmount: () => this.mounter.call(["umount", target]).then(() => undefined) };
  }

  /**
   * `from`'s upper layer into `upper` (cp -a: modes, links, whiteouts, xattrs such as an opaque
   * directory's). `from` is frozen, so nothing changes under the copy (no path it walks can be
   * swapped for a symlink); as root it reads an id-mapped view whose owners are this slot's.
   */
  private async copyUpper(from: Slot, to: Slot, upper: string): Promise<void> {
    const src = this.upperOf(from);
    if (!src) throw new Error(`${from.id}'s root is no image`);
    let view = src;
    let drops: string[] = [];
    if (this.idmapped && from.owner && to.owner) {
      const ns = await this.mapping(from, to);
      const h = await this.mounter.call(["keep", src, ns]);
      drops = [h, ns];
      view = this.mounter.handlePath(h);
    }
    try {
      await run("cp", ["-a", "--preserve=all", "--", `${view}/.`, upper], { maxBuffer: 1 << 20, timeout: 10 * 60_000 });
    } catch (err) {
      throw new Error(`copying ${from.id}'s changes: ${((err as { stderr?: string }).stderr ?? String(err)).trim().split("\n").slice(-2).join(" ")}`);
    } finally {
      for (const d of drops) await this.mounter.call(["drop", d]).catch(() => undefined);
    }
  }

  /** Ends the slot's image root (its processes are dead) and returns the image it was. */
  async detach(slot: Slot, closing = false): Promise<StoredImage | undefined> {
    const st = this.states.get(slot.index);
    const a = st?.attached;
    if (!st || !a) return undefined;
    st.attached = undefined;
    if (a.bounded && !closing) {
      // On the slot's own disk: the reset's next step (a fresh disk) detaches every mount at
      // the workspace, this one included, and frees upper and work with the old disk.
      return a.image;
    }
    await this.mounter.call(["umount", slot.workspaceDir]);
    if (!a.bounded) {
      this.host.removal.discard(a.upper);
      this.host.removal.discard(a.work);
    }
    return a.image;
  }

  /** An image leaves the store: every slot's handles of its layers go (no slot's root is that image). */
  forget(image: StoredImage): void {
    for (const st of this.states.values()) {
      if (st.generation !== this.mounter.generation) continue;
      for (const dir of image.lowers) {
        const h = st.handles.get(dir);
        if (h === undefined) continue;
        st.handles.delete(dir);
        void this.mounter.call(["drop", h]).catch((err: unknown) => this.host.logger.warn({ err }, "could not drop an image layer handle"));
      }
    }
  }

  /** Unmounts every image root (shutdown); the helper's descriptors die with it. */
  async close(): Promise<void> {
    for (const slot of this.host.slots) await this.detach(slot, true).catch(() => undefined);
    for (const st of this.states.values()) if (st.userns) closeQuietly(st.userns.nodeFd);
    this.states.clear();
    (await this.claim?.catch(() => undefined))?.release();
  }
}

function closeQuietly(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    /* closed */
  }
}
