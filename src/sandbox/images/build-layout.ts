import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdirSync } from "node:fs";
import { readFile, rename, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import type { BuiltLayer } from "./build-layer.js";

const run = promisify(execFile);

/**
 * The build layout of one sandbox server: an OCI image layout (`oci-layout`, `index.json`,
 * `blobs/sha256/`) holding every image a build made, one tag per image: `b-<hex>` a base image
 * copied from the image store, `s-<key>` the image after a build step whose cache key is
 * <key>, `f-<key>` a build's final image. A step's image is its parent's layers plus the
 * step's layer (none when it changed no file) and the parent's config with the step's user,
 * working directory and environment: so a tag names a whole image, `oci:<dir>:<tag>` is a
 * reference any server on the host can fetch, and a push is one `skopeo copy`.
 *
 * The cache key of a step is Docker's idea: the parent image's digest, the step's type and
 * arguments, and the hash of the files it copies. Images are kept as long as the server's
 * state dir is; the image store evicts its unpacked copies as for any image.
 */

const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const OCI_CONFIG = "application/vnd.oci.image.config.v1+json";
const OCI_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip";
const REF_NAME = "org.opencontainers.image.ref.name";

export interface ImageConfigJson {
  architecture?: string;
  os?: string;
  config?: { Env?: string[]; User?: string; WorkingDir?: string; Labels?: Record<string, string>; [k: string]: unknown };
  rootfs?: { type: string; diff_ids: string[] };
  history?: Array<{ created?: string; created_by?: string; empty_layer?: boolean }>;
  [k: string]: unknown;
}

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
}

interface Manifest {
  schemaVersion: number;
  mediaType?: string;
  config: Descriptor;
  layers: Descriptor[];
}

export interface LayoutImage {
  tag: string;
  digest: string;
  manifest: Manifest;
  config: ImageConfigJson;
}

export class BuildLayout {
  readonly blobDir: string;
  /** index.json is rewritten by one writer at a time. */
  private writing: Promise<unknown> = Promise.resolve();

  constructor(readonly dir: string) {
    this.blobDir = join(dir, "blobs", "sha256");
    mkdirSync(this.blobDir, { recursive: true, mode: 0o755 });
    if (!existsSync(join(dir, "oci-layout"))) void writeFile(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  }

  /** `oci:<dir>:<tag>`: the image as skopeo (and a reset) names it. */
  reference(tag: string): string {
    return `oci:${this.dir}:${tag}`;
  }

  private async index(): Promise<{ schemaVersion: number; manifests: Descriptor[] }> {
    try {
      return JSON.parse(await readFile(join(this.dir, "index.json"), "utf8")) as { schemaVersion: number; manifests: Descriptor[] };
    } catch {
      return { schemaVersion: 2, manifests: [] };
    }
  }

  /** The image tagged `tag`, when the layout has it whole (every blob present). */
  async image(tag: string): Promise<LayoutImage | undefined> {
    const entry = (await this.index()).manifests.find((m) => m.annotations?.[REF_NAME] === tag);
    if (!entry) return undefined;
    try {
      const manifest = JSON.parse(await readFile(this.blob(entry.digest), "utf8")) as Manifest;
      const config = JSON.parse(await readFile(this.blob(manifest.config.digest), "utf8")) as ImageConfigJson;
      for (const l of manifest.layers) await stat(this.blob(l.digest));
      return { tag, digest: entry.digest, manifest, config };
    } catch {
      return undefined;
    }
  }

  /** Copies a stored image (the image store's layout of it, blobs in its shared blob dir) in as `tag`. */
  async importFromStore(tag: string, storeImageDir: string, storeBlobDir: string, skopeo: string): Promise<LayoutImage> {
    const have = await this.image(tag);
    if (have) return have;
    await this.serial(() =>
      run(skopeo, ["--insecure-policy", "copy", "--quiet", "--src-shared-blob-dir", storeBlobDir, `oci:${storeImageDir}:image`, this.reference(tag)], { maxBuffer: 1 << 20, timeout: 30 * 60_000 }).catch((err: unknown) => {
        throw new Error(`copying the base image into the build layout: ${((err as { stderr?: string }).stderr ?? String(err)).trim().split("\n").slice(-2).join(" ")}`);
      }),
    );
    const img = await this.image(tag);
    if (!img) throw new Error(`the build layout has no image ${tag} after copying it in`);
    return img;
  }

  /**
   * A new image tagged `tag`: `parent` with `layer` on top (if any) and `config` (Env, User,
   * WorkingDir) as its runtime config; a history entry saying what made it.
   */
  async derive(parent: LayoutImage, tag: string, change: { layer?: BuiltLayer | undefined; env: string[]; user: string; workingDir: string; createdBy: string; labels?: Record<string, string> }): Promise<LayoutImage> {
    const config: ImageConfigJson = JSON.parse(JSON.stringify(parent.config)) as ImageConfigJson;
    const inner = { ...(config.config ?? {}) };
    inner.Env = change.env;
    inner.User = change.user;
    inner.WorkingDir = change.workingDir;
    if (change.labels) inner.Labels = { ...(inner.Labels ?? {}), ...change.labels };
    config.config = inner;
    config.rootfs = { type: "layers", diff_ids: [...(config.rootfs?.diff_ids ?? []), ...(change.layer ? [change.layer.diffId] : [])] };
    // History: one entry per layer plus empty ones; kept consistent only where the parent had it.
    if (Array.isArray(config.history)) config.history = [...config.history, { created: new Date(0).toISOString(), created_by: change.createdBy, ...(change.layer ? {} : { empty_layer: true }) }];
    const configBlob = await this.writeBlob(Buffer.from(JSON.stringify(config)));
    const manifest: Manifest = {
      schemaVersion: 2,
      mediaType: OCI_MANIFEST,
      config: { mediaType: OCI_CONFIG, digest: configBlob.digest, size: configBlob.size },
      layers: [...parent.manifest.layers, ...(change.layer ? [{ mediaType: OCI_LAYER_GZIP, digest: change.layer.digest, size: change.layer.size }] : [])],
    };
    const m = await this.writeBlob(Buffer.from(JSON.stringify(manifest)));
    await this.tag(tag, { mediaType: OCI_MANIFEST, digest: m.digest, size: m.size });
    return { tag, digest: m.digest, manifest, config };
  }

  private async tag(tag: string, d: Descriptor): Promise<void> {
    await this.serial(async () => {
      const index = await this.index();
      index.manifests = [...index.manifests.filter((m) => m.annotations?.[REF_NAME] !== tag), { ...d, annotations: { [REF_NAME]: tag } }];
      const tmp = join(this.dir, `index.json.${randomBytes(4).toString("hex")}`);
      await writeFile(tmp, JSON.stringify(index));
      await rename(tmp, join(this.dir, "index.json"));
    });
  }

  private async writeBlob(bytes: Buffer): Promise<{ digest: string; size: number }> {
    const hex = createHash("sha256").update(bytes).digest("hex");
    const path = join(this.blobDir, hex);
    if (!existsSync(path)) {
      const tmp = `${path}.${randomBytes(4).toString("hex")}`;
      await writeFile(tmp, bytes, { mode: 0o644 });
      await rename(tmp, path);
    }
    return { digest: `sha256:${hex}`, size: bytes.length };
  }

  private blob(digest: string): string {
    const m = /^sha256:([a-f0-9]{64})$/.exec(digest);
    if (!m) throw new Error(`unsupported digest ${digest.slice(0, 80)}`);
    return join(this.blobDir, m[1]!);
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const p = this.writing.then(fn);
    this.writing = p.catch(() => undefined);
    return p;
  }
}

/** A step's cache key: sha256 over the parent image's digest and what the step is (Docker's: parent + instruction + the copied files' hash). */
export function stepKey(parentDigest: string, step: { type: string; args: readonly string[]; files_hash?: string | undefined }): string {
  return createHash("sha256").update(JSON.stringify([parentDigest, step.type, step.args, step.files_hash ?? null])).digest("hex");
}
