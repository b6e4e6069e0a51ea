import { statfsSync } from "node:fs";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import { findExecutable } from "../../host/executables.js";
import { hasEffectiveCapability, whyNoMounts } from "../../host/mount-namespace.js";
import type { ImageFetch, ImageListResponse, ImagePullResponse, ResetImage } from "../../protocol/images.js";
import type { Slot } from "../core/slot.js";
import type { ImageRoot } from "../isolation/isolation.js";
import type { BwrapProbe } from "../isolation/isolation.js";
import type { SlotDisks } from "../workspace/slot-disk.js";
import type { TreeRemoval } from "../workspace/tree-removal.js";
import { ImageUnavailableError } from "./image-errors.js";
import { ImageMounter } from "./image-mounter.js";
import { ImageStore, type StoredImage } from "./image-store.js";
import { imageTools } from "./image-tools.js";
import { authFileFromEnvironment } from "./skopeo.js";
import { SlotRoots, type MountedRoot, type RootPlan, type TemplateLayer } from "./slot-roots.js";

/** Default `--image-budget-mb`: 20 GiB of images per container. */
export const DEFAULT_IMAGE_BUDGET_BYTES = 20 * 1024 * 1024 * 1024;
/** Default bound on fetching one image (skopeo's copy) and on unpacking one layer. */
export const DEFAULT_IMAGE_PULL_TIMEOUT_S = 1800;

const OVERLAYFS_MAGIC = 0x794c7630;

/**
 * Layers are unpacked with overlayfs's whiteouts (character devices 0/0): on an overlayfs
 * (a container's own root) each would be a whiteout of that overlay, and the file it marks
 * would vanish. Such a store dir is refused, naming the fix.
 */
function overlayfsProblem(dir: string, what = `the image store ${dir}`, fix = "--image-store DIR; Nomad: the job's image-store disk"): string | undefined {
  let probe = dir;
  for (;;) {
    try {
      if (statfsSync(probe).type === OVERLAYFS_MAGIC) return `${what} is on overlayfs (a container's own root): give it a volume or a host directory (${fix})`;
      return undefined;
    } catch {
      const up = dirname(probe);
      if (up === probe) return undefined;
      probe = up;
    }
  }
}

export interface ImageOptions {
  /** The store's dir (default `<data dir>/.slotpool/images`). */
  dir?: string | undefined;
  budgetBytes?: number | undefined;
  /** HOST:PORT of registries that may be plain HTTP (`--insecure-registry`). */
  insecureRegistries?: readonly string[] | undefined;
  pullTimeoutS?: number | undefined;
  /**
   * Registries fetched from another host (`--registry-mirror REGISTRY=MIRROR`): `docker.io`
   * → `127.0.0.1:5000` makes `python:3.13` come from that mirror (as Docker's registry-mirrors),
   * for nodes whose images come from an internal mirror, and for tests on loopback.
   */
  registryMirrors?: Readonly<Record<string, string>> | undefined;
}

/** What the image room needs of the service (SandboxService implements it). */
export interface ImageHost {
  readonly slots: readonly Slot[];
  readonly disks: SlotDisks;
  readonly stateDir: string;
  readonly removal: TreeRemoval;
  readonly logger: Logger;
  readonly bwrap: BwrapProbe;
}

/** linux/capability.h */
const CAP_SYS_PTRACE = 19;

/**
 * Task images as the sandbox service uses them: the store (fetch, list, evict), each slot's
 * root (`slot-roots.ts`) and what a sandbox needs to run in one (`rootFor`). Unavailable
 * (every image request answered `image_unavailable`/`unsupported`, with `reason`) where the
 * server cannot sandbox, cannot mount, or lacks skopeo, the static tools or a kernel whose
 * overlayfs takes detached layers.
 */
export class SlotImages {
  readonly store: ImageStore | undefined;
  readonly reason: string | undefined;
  private readonly roots: SlotRoots | undefined;
  private readonly mounter: ImageMounter | undefined;
  readonly toolsDir: string | undefined;
  /** Root with per-slot uids: the image's users are real users inside (else everything is root's). */
  readonly idmapped: boolean;

  constructor(host: ImageHost, options: ImageOptions) {
    const root = process.getuid?.() === 0;
    this.idmapped = root && host.slots.every((s) => s.owner !== undefined);
    const why = (): string | undefined => {
      if (!host.bwrap.available || !host.bwrap.path) return `slots are not sandboxed here (${host.bwrap.reason ?? "no bubblewrap"})`;
      const noMounts = whyNoMounts();
      if (noMounts) return noMounts;
      if (root && !this.idmapped) return "a root server gives image roots only to slots with uids of their own (not with --per-slot-uid off)";
      // Said here, not at the first reset: the helper opens /proc/PID/ns/user of the slot's
      // user-namespace holder, a process of another uid, which takes CAP_SYS_PTRACE.
      if (root && !hasEffectiveCapability(CAP_SYS_PTRACE)) {
        return "a root server without CAP_SYS_PTRACE (Docker drops it) cannot open /proc/PID/ns/user of a slot's user-namespace holder, a process of another uid (Permission denied): add it (docker run --cap-add SYS_PTRACE; Nomad's docker driver: capAdd sys_ptrace)";
      }
      if (!findExecutable("skopeo")) return "skopeo is not installed (Debian: apt-get install skopeo)";
      if (!findExecutable("tar")) return "GNU tar is not installed";
      return undefined;
    };
    let reason = why();
    let mounter: ImageMounter | undefined;
    let tools: string | undefined;
    let authFile: string | undefined;
    const storeDir = options.dir ?? join(host.stateDir, "images");
    if (!reason) reason = overlayfsProblem(storeDir);
    // The slots' writable layers (overlay upper dirs) live in the state dir, under the data dir: overlayfs refuses an upper dir on overlayfs.
    if (!reason) reason = overlayfsProblem(host.stateDir, `the data dir's state ${host.stateDir} (the slots' writable image layers)`, "docker run -v HOST_DIR:/var/lib/slotpool, or --data-dir on a volume");
    if (!reason) {
      const m = ImageMounter.build(host.stateDir);
      if ("error" in m) reason = m.error;
      else mounter = m;
    }
    if (!reason) {
      const t = imageTools(host.stateDir);
      if ("error" in t) reason = t.error;
      else tools = t.dir;
    }
    if (!reason) {
      try {
        authFile = authFileFromEnvironment(host.stateDir);
      } catch (err) {
        reason = err instanceof Error ? err.message : String(err);
      }
    }
    this.reason = reason;
    this.toolsDir = tools;
    this.mounter = mounter;
    if (reason || !mounter) {
      if (reason) host.logger.info({ reason }, "task images are unavailable on this server");
      this.store = undefined;
      this.roots = undefined;
      return;
    }
    this.roots = new SlotRoots(host, mounter, this.idmapped);
    const timeoutMs = (options.pullTimeoutS ?? DEFAULT_IMAGE_PULL_TIMEOUT_S) * 1000;
    this.store = new ImageStore({
      dir: storeDir,
      budgetBytes: options.budgetBytes ?? DEFAULT_IMAGE_BUDGET_BYTES,
      skopeo: { skopeo: findExecutable("skopeo")!, insecureRegistries: options.insecureRegistries ?? [], authFile, timeoutMs, mirrors: options.registryMirrors ?? {} },
      bwrap: host.bwrap.path!,
      mounter,
      root,
      logger: host.logger,
      removal: host.removal,
      unpackTimeoutMs: timeoutMs,
      onEvict: (img) => this.roots?.forget(img),
    });
  }

  private unsupported(reference: string): ImageUnavailableError {
    return new ImageUnavailableError("unsupported", reference, `image ${reference}: this server cannot give slots an image root: ${this.reason ?? "unknown reason"}`);
  }

  list(): ImageListResponse {
    if (!this.store) return { images: [], budget_bytes: 0, used_bytes: 0, available: false, unavailable_reason: this.reason ?? "unknown" };
    return { images: this.store.list(), budget_bytes: this.store.budgetBytes, used_bytes: this.store.usedBytes(), available: true };
  }

  /** POST /images: fetch ahead of the resets that use it. */
  async pull(reference: string): Promise<ImagePullResponse> {
    if (!this.store) throw this.unsupported(reference);
    const { image, fetched } = await this.store.get(reference);
    return { image: this.store.list().find((i) => i.digest === image.digest)!, ...(fetched ? { fetched } : {}) };
  }

  /** The image for a reset to come, fetched if needed, with a reference taken on it (released by `give` or the slot's next reset). */
  async take(reference: string): Promise<{ image: StoredImage; fetched?: ImageFetch }> {
    if (!this.store) throw this.unsupported(reference);
    const got = await this.store.get(reference);
    this.store.acquire(got.image);
    return got;
  }

  /** One more reference on a stored image (a reset into a template on it). */
  acquire(image: StoredImage): void {
    this.store?.acquire(image);
  }

  /** Hands back a reference `take` took that no slot used (the reset failed before attaching). */
  give(image: StoredImage): void {
    this.store?.release(image);
  }

  /** The reset's last step: the slot's root becomes `image` (referenced by `take`; handed back if attaching fails); `seed`: a frozen fork parent whose changes it starts with. */
  async attach(slot: Slot, image: StoredImage, seed?: Slot, templateLayer?: TemplateLayer): Promise<void> {
    try {
      await this.roots!.attach(slot, image, seed, templateLayer);
    } catch (err) {
      this.give(image);
      throw err;
    }
  }

  /** What the slot's fresh disk needs to mount `image`'s root in the same request (slot-disk.ts). */
  plan(slot: Slot, image: StoredImage, templateLayer?: TemplateLayer): Promise<RootPlan> {
    if (!this.roots) return Promise.reject(new Error(this.reason ?? "images are unavailable here"));
    return this.roots.plan(slot, image, templateLayer);
  }

  /** The slot's root was mounted with its fresh disk: `image` (referenced by `take` or `acquire`) is its root now. */
  adopt(slot: Slot, image: StoredImage, mounted: MountedRoot): void {
    this.roots!.adopt(slot, image, mounted);
  }

  /** The reset's first workspace step (the slot's processes are dead): ends its image root, if any. */
  async detach(slot: Slot): Promise<void> {
    const prev = await this.roots?.detach(slot);
    if (prev) this.store?.release(prev);
  }

  imageOf(slot: Slot): StoredImage | undefined {
    return this.roots?.imageOf(slot);
  }

  /** What a reset into an image answers about it. */
  describe(image: StoredImage, fetched: ImageFetch | undefined): ResetImage {
    return { reference: image.reference, digest: image.digest, runtime: image.runtime, ...(fetched ? { fetched } : {}) };
  }

  /**
   * The isolation builder's input for a sandbox of the slot, if its root is an image.
   * `usernsChildFd`: the fd number the spawned bubblewrap is to find the slot's user namespace
   * at; `parentFd` is the descriptor of this process to put there (root only).
   */
  rootFor(slot: Slot, usernsChildFd: number): { root: ImageRoot; parentFd: number | undefined; owner: { uid: number; gid: number } | undefined } | undefined {
    const image = this.imageOf(slot);
    if (!image || !this.toolsDir || !this.roots) return undefined;
    const r = image.runtime;
    const parentFd = this.roots.currentUsernsFd(slot);
    return {
      root: { dir: slot.workspaceDir, env: r.env, workingDir: r.working_dir, uid: r.uid, gid: r.gid, toolsDir: this.toolsDir, ...(parentFd !== undefined ? { userns: { fd: usernsChildFd } } : {}) },
      parentFd,
      owner: this.roots.ownerOf(slot, r),
    };
  }

  /** A template build's root (templates/image-template-build.ts): `slot`'s view of the image at `target`, with the build's own upper. */
  mountBuildRoot(slot: Slot, image: StoredImage, target: string, upper: string, work: string): Promise<{ usernsFd: number | undefined; unmount: () => Promise<void> }> {
    if (!this.roots) throw new Error(`images are unavailable here: ${this.reason ?? "unknown reason"}`);
    return this.roots.mountAt(slot, image, target, upper, work);
  }

  /** The image id a host uid or gid of the slot's files is (slot-roots.ts `insideOf`). */
  insideOf(slot: Slot, hostId: number, kind: "uid" | "gid"): number {
    return this.roots?.insideOf(slot, hostId, kind) ?? 0;
  }

  /** The slot's upper layer (fork.ts). */
  upperOf(slot: Slot): string | undefined {
    return this.roots?.upperOf(slot);
  }

  async close(): Promise<void> {
    await this.roots?.close();
    this.mounter?.close();
  }
}
