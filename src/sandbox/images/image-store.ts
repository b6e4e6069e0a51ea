import { randomBytes } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync } from "node:fs";
import { mkdir, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { Logger } from "pino";
import type { ImageFetch, ImageInfo, ImageRuntime } from "../../protocol/images.js";
import { parseImageReference } from "../../protocol/images.js";
import type { TreeRemoval } from "../workspace/tree-removal.js";
import { ImageUnavailableError } from "./image-errors.js";
import type { ImageMounter } from "./image-mounter.js";
import { extraLayer as makeExtraLayer, ImageUserError, imageRuntime } from "./image-runtime.js";
import { LayerUnpackError, unpackLayer } from "./layer-unpack.js";
import { blobPath, readImage, type ImageConfig, type LayerRef } from "./oci-layout.js";
import { SkopeoError, skopeoCopy, type SkopeoOptions } from "./skopeo.js";

/**
 * The image store of one sandbox server (one per container): images fetched with skopeo,
 * their layers unpacked once, shared read-only by every slot whose root is that image.
 *
 * On disk, under the store's dir (the server's own, 0700):
 *   blobs/sha256/<hex>     every blob (manifests, configs, compressed layers), shared between
 *                          images: skopeo skips a blob already here;
 *   images/<digest hex>/   one image: skopeo's OCI layout (index.json) and `slotpool-image.json`,
 *                          written last (its presence says the image is complete);
 *   layers/<diff id hex>/  one unpacked layer, shared between images (renamed into place
 *                          when complete);
 *   tmp/                   skopeo's temporary files and layers being unpacked.
 * A restarted server keeps what is complete (no second pull after a restart) and deletes the
 * rest, and every blob or layer no complete image names (nothing leaks).
 *
 * Concurrent requests for one reference share one fetch; two images sharing a layer unpack it
 * once. The store's size (blobs and layers, each counted once) is kept under a budget by
 * evicting the least recently used images no slot uses (and the blobs and layers no other
 * image shares); an image that does not fit even then is refused (`store_full`).
 *
 * A reference is resolved once per container: a tag already in the store is not asked for
 * again (a trajectory's image does not change under it mid-run). `digest` says which image
 * the tag named when it was fetched.
 */

export interface StoredLayer {
  ref: LayerRef;
  /** The unpacked layer (a lower layer of every slot's root on this image). */
  dir: string;
  bytes: number;
}

export interface StoredImage {
  /** The reference as first asked for, and every other one that named the same image. */
  reference: string;
  references: Set<string>;
  digest: string;
  /** Top layer first (overlayfs's lowerdir order); the extra layer (image-runtime.ts), if the image needed one, on top. */
  lowers: string[];
  layers: StoredLayer[];
  config: ImageConfig;
  runtime: ImageRuntime;
  /** Its own dir (`images/<digest hex>`). */
  dir: string;
  /** Blobs it names (manifest, config, layers), with their sizes. */
  blobs: Array<{ digest: string; size: number }>;
  sizeBytes: number;
  lastUsed: number;
  /** Slots whose root is this image now. */
  refs: number;
}

export interface ImageStoreOptions {
  dir: string;
  budgetBytes: number;
  skopeo: Omit<SkopeoOptions, "tmpDir">;
  bwrap: string;
  mounter: ImageMounter;
  /** The server is root: owners kept, overlayfs's trusted.* xattrs. */
  root: boolean;
  logger: Logger;
  removal: TreeRemoval;
  unpackTimeoutMs: number;
  /** Called when an image is evicted, before its files go (slots drop their handles of its layers). */
  onEvict?: (image: StoredImage) => void;
}

interface Persisted {
  reference: string;
  references: string[];
  digest: string;
  layers: Array<{ ref: LayerRef; bytes: number }>;
  config: ImageConfig;
  runtime: ImageRuntime;
  extraLayer: boolean;
  blobs: Array<{ digest: string; size: number }>;
}

const META = "slotpool-image.json";

export class ImageStore {
  private readonly blobDir: string;
  private readonly imagesDir: string;
  private readonly layersDir: string;
  private readonly tmpDir: string;
  private readonly byDigest = new Map<string, StoredImage>();
  private readonly byReference = new Map<string, StoredImage>();
  private readonly inFlight = new Map<string, Promise<{ image: StoredImage; fetched?: ImageFetch }>>();
  private readonly layerUnpacks = new Map<string, Promise<StoredLayer>>();
  /** Layers and blobs a fetch in progress relies on: never evicted under it. */
  private readonly pinned = new Map<string, number>();
  /** skopeo copies run (tests count them). */
  pullsRun = 0;
  layersUnpacked = 0;

  constructor(private readonly o: ImageStoreOptions) {
    mkdirSync(o.dir, { recursive: true, mode: 0o700 });
    chmodSync(o.dir, 0o700);
    this.blobDir = join(o.dir, "blobs");
    this.imagesDir = join(o.dir, "images");
    this.layersDir = join(o.dir, "layers");
    this.tmpDir = join(o.dir, "tmp");
    o.removal.discard(this.tmpDir);
    for (const d of [this.blobDir, join(this.blobDir, "sha256"), this.imagesDir, this.layersDir, this.tmpDir]) mkdirSync(d, { recursive: true, mode: 0o700 });
    this.recover();
  }

  /** The shared blob dir (an image's layout names its blobs there: skopeo's --src-shared-blob-dir). */
  get blobsDir(): string {
    return this.blobDir;
  }

  get budgetBytes(): number {
    return this.o.budgetBytes;
  }

  /** Bytes the store's images take (each blob and layer once). */
  usedBytes(): number {
    const blobs = new Map<string, number>();
    const layers = new Map<string, number>();
    for (const img of this.byDigest.values()) {
      for (const b of img.blobs) blobs.set(b.digest, b.size);
      for (const l of img.layers) layers.set(l.dir, l.bytes);
    }
    return [...blobs.values(), ...layers.values()].reduce((a, b) => a + b, 0);
  }

  list(): ImageInfo[] {
    return [...this.byDigest.values()].sort((a, b) => a.reference.localeCompare(b.reference)).map(info);
  }

  /** The image, fetching it unless the store has it; concurrent requests for one reference share one fetch. */
  get(reference: string): Promise<{ image: StoredImage; fetched?: ImageFetch }> {
    const have = this.byReference.get(reference);
    if (have) {
      have.lastUsed = Date.now();
      return Promise.resolve({ image: have });
    }
    const running = this.inFlight.get(reference);
    if (running) return running;
    const p = this.fetch(reference).finally(() => this.inFlight.delete(reference));
    this.inFlight.set(reference, p);
    return p;
  }

  /** One more slot's root is `image` (not evicted until released). */
  acquire(image: StoredImage): void {
    image.refs++;
    image.lastUsed = Date.now();
  }

  release(image: StoredImage): void {
    image.refs = Math.max(0, image.refs - 1);
    image.lastUsed = Date.now();
  }

  private async fetch(reference: string): Promise<{ image: StoredImage; fetched?: ImageFetch }> {
    const parsed = parseImageReference(reference);
    const layout = join(this.tmpDir, `pull-${randomBytes(6).toString("hex")}`);
    const before = new Set(safeReaddir(join(this.blobDir, "sha256")));
    const started = performance.now();
    this.pullsRun++;
    try {
      await skopeoCopy(parsed, layout, this.blobDir, { ...this.o.skopeo, tmpDir: this.tmpDir });
    } catch (err) {
      await rm(layout, { recursive: true, force: true }).catch(() => undefined);
      if (err instanceof SkopeoError) throw new ImageUnavailableError(err.reason, reference, `image ${reference}: ${err.message}`);
      throw err;
    }
    const pullMs = performance.now() - started;
    let read;
    try {
      read = await readImage(layout, this.blobDir);
    } catch (err) {
      await rm(layout, { recursive: true, force: true }).catch(() => undefined);
      throw new ImageUnavailableError("pull_failed", reference, `image ${reference}: ${err instanceof Error ? err.message : String(err)}`);
    }
    const pulledBytes = read.layers.filter((l) => !before.has(hexOf(l.digest))).reduce((s, l) => s + l.size, 0);
    const existing = this.byDigest.get(read.digest);
    if (existing) {
      // Another reference to an image the store has: nothing to unpack.
      await rm(layout, { recursive: true, force: true }).catch(() => undefined);
      existing.references.add(reference);
      this.byReference.set(reference, existing);
      existing.lastUsed = Date.now();
      await this.persist(existing).catch(() => undefined);
      return { image: existing, fetched: { pull_ms: round(pullMs), unpack_ms: 0, pulled_bytes: pulledBytes, layers: read.layers.length, layers_reused: read.layers.length } };
    }
    const blobs = [...read.metaBlobs, ...read.layers.map((l) => ({ digest: l.digest, size: l.size }))];
    const compressed = blobs.reduce((s, b) => s + b.size, 0);
    if (compressed > this.o.budgetBytes) {
      await rm(layout, { recursive: true, force: true }).catch(() => undefined);
      throw new ImageUnavailableError("store_full", reference, `image ${reference} is ${mb(compressed)} MB compressed alone, more than the whole image store budget (${mb(this.o.budgetBytes)} MB): raise --image-budget-mb`);
    }
    const pins = [...blobs.map((b) => b.digest), ...read.layers.map((l) => l.diffId)];
    for (const k of pins) this.pinned.set(k, (this.pinned.get(k) ?? 0) + 1);
    const unpackStarted = performance.now();
    let reused = 0;
    try {
      const layers: StoredLayer[] = [];
      for (const l of read.layers) {
        const dir = join(this.layersDir, hexOf(l.diffId));
        if (existsSync(dir) && !this.layerUnpacks.has(l.diffId)) {
          reused++;
          layers.push({ ref: l, dir, bytes: this.layerBytes(dir) });
          continue;
        }
        layers.push(await this.unpack(l, dir));
      }
      const unpackMs = performance.now() - unpackStarted;
      const raced = this.byDigest.get(read.digest);
      if (raced) {
        // Another reference to the same image was fetched meanwhile: one stored image, two names.
        await rm(layout, { recursive: true, force: true }).catch(() => undefined);
        raced.references.add(reference);
        this.byReference.set(reference, raced);
        await this.persist(raced).catch(() => undefined);
        return { image: raced, fetched: { pull_ms: round(pullMs), unpack_ms: round(unpackMs), pulled_bytes: pulledBytes, layers: layers.length, layers_reused: reused } };
      }
      const dir = join(this.imagesDir, hexOf(read.digest));
      await rm(dir, { recursive: true, force: true });
      await rename(layout, dir);
      const { runtime, extraLayer } = await this.inspect(reference, dir, layers, read.config);
      const lowers = [...(extraLayer ? [join(dir, "extra-layer")] : []), ...layers.map((l) => l.dir).reverse()];
      const image: StoredImage = {
        reference,
        references: new Set([reference]),
        digest: read.digest,
        lowers,
        layers,
        config: read.config,
        runtime,
        dir,
        blobs,
        sizeBytes: compressed + layers.reduce((s, l) => s + l.bytes, 0),
        lastUsed: Date.now(),
        refs: 0,
      };
      await this.persist(image);
      this.byDigest.set(image.digest, image);
      this.byReference.set(reference, image);
      this.evict(image);
      if (this.usedBytes() > this.o.budgetBytes) {
        // Slots use the rest: this one does not fit beside them.
        this.drop(image);
        throw new ImageUnavailableError("store_full", reference, `image ${reference} (${mb(image.sizeBytes)} MB unpacked) does not fit the image store budget (${mb(this.o.budgetBytes)} MB) beside the images slots use now: raise --image-budget-mb or use fewer images per container`);
      }
      this.o.logger.info({ image: reference, digest: read.digest, layers: layers.length, layers_reused: reused, bytes: image.sizeBytes, pull_ms: round(pullMs), unpack_ms: round(unpackMs) }, "image fetched");
      return { image, fetched: { pull_ms: round(pullMs), unpack_ms: round(unpackMs), pulled_bytes: pulledBytes, layers: layers.length, layers_reused: reused } };
    } catch (err) {
      await rm(layout, { recursive: true, force: true }).catch(() => undefined);
      if (err instanceof ImageUnavailableError) throw err;
      if (err instanceof LayerUnpackError) throw new ImageUnavailableError(err.full ? "store_full" : "unpack_failed", reference, `image ${reference}: ${err.message}`);
      if (err instanceof ImageUserError) throw new ImageUnavailableError("unpack_failed", reference, `image ${reference}: ${err.message}`);
      throw new ImageUnavailableError(/no space left/i.test(String(err)) ? "store_full" : "unpack_failed", reference, `image ${reference}: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      for (const k of pins) {
        const n = (this.pinned.get(k) ?? 1) - 1;
        if (n <= 0) this.pinned.delete(k);
        else this.pinned.set(k, n);
      }
    }
  }

  /** One layer unpacked once, whoever asks (two images fetched at once may share it). */
  private unpack(l: LayerRef, dir: string): Promise<StoredLayer> {
    let p = this.layerUnpacks.get(l.diffId);
    if (!p) {
      p = (async () => {
        const bytes = await unpackLayer(blobPath(this.blobDir, l.digest), l, dir, { bwrap: this.o.bwrap, mounter: this.o.mounter, root: this.o.root, tmpDir: this.tmpDir, timeoutMs: this.o.unpackTimeoutMs });
        this.layersUnpacked++;
        await writeFile(`${dir}.bytes`, String(bytes));
        return { ref: l, dir, bytes };
      })().finally(() => this.layerUnpacks.delete(l.diffId));
      this.layerUnpacks.set(l.diffId, p);
    }
    return p;
  }

  private layerBytes(dir: string): number {
    try {
      return Number(readFileSync(`${dir}.bytes`, "utf8")) || 0;
    } catch {
      return 0;
    }
  }

  /**
   * The image's runtime (Env, User, WorkingDir) read from its merged layers, mounted read-only
   * for a moment in the server's namespace; and the WorkingDir layer if the image lacks it.
   */
  private async inspect(reference: string, dir: string, layers: StoredLayer[], config: ImageConfig): Promise<{ runtime: ImageRuntime; extraLayer: boolean }> {
    const view = join(this.tmpDir, `view-${randomBytes(4).toString("hex")}`);
    const [merged, upper, work] = ["merged", "upper", "work"].map((d) => join(view, d)) as [string, string, string];
    for (const d of [view, merged, upper, work]) await mkdir(d, { mode: 0o700 });
    try {
      await this.o.mounter.call(["overlay", merged, upper, work, ...layers.map((l) => l.dir).reverse()]);
      try {
        const runtime = imageRuntime(merged, config, this.o.root);
        const layer = join(dir, "extra-layer");
        await mkdir(layer, { mode: 0o755 });
        const extraLayer = await makeExtraLayer(merged, runtime, layer, this.o.root);
        if (!extraLayer) await rm(layer, { recursive: true, force: true });
        return { runtime, extraLayer };
      } finally {
        await this.o.mounter.call(["umount", merged]);
      }
    } catch (err) {
      if (err instanceof ImageUserError) throw err;
      throw new Error(`reading ${reference}'s config and users: ${err instanceof Error ? err.message : String(err)}`);
    } finally {
      await rm(view, { recursive: true, force: true }).catch(() => undefined);
    }
  }

  private async persist(image: StoredImage): Promise<void> {
    const p: Persisted = {
      reference: image.reference,
      references: [...image.references],
      digest: image.digest,
      layers: image.layers.map((l) => ({ ref: l.ref, bytes: l.bytes })),
      config: image.config,
      runtime: image.runtime,
      extraLayer: image.lowers[0]?.endsWith("extra-layer") ?? false,
      blobs: image.blobs,
    };
    const tmp = join(image.dir, `${META}.${randomBytes(3).toString("hex")}`);
    await writeFile(tmp, JSON.stringify(p));
    await rename(tmp, join(image.dir, META));
  }

  /** Evicts least recently used images no slot uses until the store fits its budget. */
  private evict(keep: StoredImage): void {
    const candidates = [...this.byDigest.values()].filter((i) => i !== keep && i.refs === 0).sort((a, b) => a.lastUsed - b.lastUsed);
    for (const img of candidates) {
      if (this.usedBytes() <= this.o.budgetBytes) break;
      if (img.layers.some((l) => this.pinned.has(l.ref.diffId))) continue;
      this.o.logger.info({ image: img.reference, digest: img.digest, bytes: img.sizeBytes }, "image evicted (budget)");
      this.drop(img);
    }
  }

  /** Forgets an image and deletes its files, and every blob and layer no other image (or fetch in progress) needs. */
  private drop(img: StoredImage): void {
    this.o.onEvict?.(img);
    this.byDigest.delete(img.digest);
    for (const r of img.references) if (this.byReference.get(r) === img) this.byReference.delete(r);
    this.o.removal.discard(img.dir);
    const blobsInUse = new Set<string>();
    const layersInUse = new Set<string>();
    for (const other of this.byDigest.values()) {
      for (const b of other.blobs) blobsInUse.add(b.digest);
      for (const l of other.layers) layersInUse.add(l.dir);
    }
    for (const b of img.blobs) if (!blobsInUse.has(b.digest) && !this.pinned.has(b.digest)) this.o.removal.discard(blobPath(this.blobDir, b.digest));
    for (const l of img.layers) {
      if (layersInUse.has(l.dir) || this.pinned.has(l.ref.diffId)) continue;
      this.o.removal.discard(l.dir);
      this.o.removal.discard(`${l.dir}.bytes`);
    }
  }

  /** After a restart: complete images kept, everything else (half-fetched images, unnamed blobs and layers) deleted. */
  private recover(): void {
    const blobsKept = new Set<string>();
    const layersKept = new Set<string>();
    for (const name of safeReaddir(this.imagesDir)) {
      const dir = join(this.imagesDir, name);
      let p: Persisted;
      try {
        p = JSON.parse(readFileSync(join(dir, META), "utf8")) as Persisted;
      } catch {
        this.o.removal.discard(dir);
        continue;
      }
      const layers = p.layers.map((l) => ({ ref: l.ref, dir: join(this.layersDir, hexOf(l.ref.diffId)), bytes: l.bytes }));
      if (!layers.every((l) => existsSync(l.dir)) || !p.blobs.every((b) => existsSync(blobPath(this.blobDir, b.digest)))) {
        this.o.removal.discard(dir);
        continue;
      }
      const image: StoredImage = {
        reference: p.reference,
        references: new Set(p.references),
        digest: p.digest,
        lowers: [...(p.extraLayer ? [join(dir, "extra-layer")] : []), ...layers.map((l) => l.dir).reverse()],
        layers,
        config: p.config,
        runtime: p.runtime,
        dir,
        blobs: p.blobs,
        sizeBytes: p.blobs.reduce((s, b) => s + b.size, 0) + layers.reduce((s, l) => s + l.bytes, 0),
        lastUsed: statSafe(join(dir, META)),
        refs: 0,
      };
      this.byDigest.set(image.digest, image);
      for (const r of image.references) this.byReference.set(r, image);
      for (const b of image.blobs) blobsKept.add(hexOf(b.digest));
      for (const l of image.layers) layersKept.add(hexOf(l.ref.diffId));
    }
    for (const name of safeReaddir(join(this.blobDir, "sha256"))) if (!blobsKept.has(name)) this.o.removal.discard(join(this.blobDir, "sha256", name));
    for (const name of safeReaddir(this.layersDir)) if (!layersKept.has(name.replace(/\.bytes$/, ""))) this.o.removal.discard(join(this.layersDir, name));
    if (this.byDigest.size > 0) this.o.logger.info({ images: this.byDigest.size, bytes: this.usedBytes() }, "image store: kept the images of an earlier run");
  }
}

function info(i: StoredImage): ImageInfo {
  return { reference: i.reference, digest: i.digest, size_bytes: i.sizeBytes, layers: i.layers.length, in_use: i.refs, last_used: new Date(i.lastUsed).toISOString(), runtime: i.runtime };
}

function hexOf(digest: string): string {
  return digest.slice(digest.indexOf(":") + 1);
}

function safeReaddir(dir: string): string[] {
  try {
    return readdirSync(dir);
  } catch {
    return [];
  }
}

function statSafe(p: string): number {
  try {
    return statSync(p).mtimeMs;
  } catch {
    return Date.now();
  }
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}

function mb(bytes: number): string {
  return (bytes / 1024 / 1024).toFixed(1);
}


