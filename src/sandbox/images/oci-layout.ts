import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";

/**
 * Reading what skopeo copied: an OCI image layout (`index.json`) whose blobs are in the
 * store's shared blob dir, down to the image's manifest, its layers and its config.
 */

export interface LayerRef {
  /** The blob's digest (compressed, as stored). */
  digest: string;
  /** The uncompressed tar's digest (the config's rootfs.diff_ids): names the unpacked layer. */
  diffId: string;
  mediaType: string;
  size: number;
}

export interface ImageConfig {
  env: string[];
  workingDir: string;
  user: string;
}

export interface ReadImage {
  /** The manifest's digest. */
  digest: string;
  /** Bottom layer first (the manifest's order). */
  layers: LayerRef[];
  config: ImageConfig;
  /** Manifest + config bytes (blobs besides the layers). */
  metaBlobs: Array<{ digest: string; size: number }>;
}

const MAX_JSON_BYTES = 8 * 1024 * 1024;

/** The blob file of `digest` ("sha256:<hex>") in `blobDir`. Throws on a digest that names no file safely. */
export function blobPath(blobDir: string, digest: string): string {
  const m = /^(sha256|sha512):([a-f0-9]{64,128})$/.exec(digest);
  if (!m) throw new Error(`unsupported digest ${JSON.stringify(digest.slice(0, 100))}`);
  return join(blobDir, m[1]!, m[2]!);
}

async function readJson(path: string): Promise<unknown> {
  const st = await stat(path);
  if (st.size > MAX_JSON_BYTES) throw new Error(`${path} is ${st.size} bytes, more than an image's JSON may be`);
  return JSON.parse(await readFile(path, "utf8")) as unknown;
}

const LAYER_TYPES = /^application\/vnd\.(oci\.image\.layer\.v1\.tar|docker\.image\.rootfs\.diff\.tar)(\+gzip|\.gzip|\+zstd)?$/;

/** The image skopeo wrote into `layoutDir` (tag `image`), blobs from `blobDir`. */
export async function readImage(layoutDir: string, blobDir: string): Promise<ReadImage> {
  const index = (await readJson(join(layoutDir, "index.json"))) as { manifests?: Array<{ digest?: string; annotations?: Record<string, string> }> };
  const entries = index.manifests ?? [];
  const entry = entries.find((m) => m.annotations?.["org.opencontainers.image.ref.name"] === "image") ?? entries[0];
  if (!entry?.digest) throw new Error("the copied image's index.json names no manifest");
  const manifestPath = blobPath(blobDir, entry.digest);
  const manifest = (await readJson(manifestPath)) as { config?: { digest?: string; size?: number }; layers?: Array<{ digest?: string; mediaType?: string; size?: number }> };
  if (!manifest.config?.digest || !Array.isArray(manifest.layers)) throw new Error(`manifest ${entry.digest} has no config or no layers (an index of images? skopeo picks one platform)`);
  const configPath = blobPath(blobDir, manifest.config.digest);
  const config = (await readJson(configPath)) as { config?: { Env?: unknown; WorkingDir?: unknown; User?: unknown }; rootfs?: { diff_ids?: unknown } };
  const diffIds = Array.isArray(config.rootfs?.diff_ids) ? (config.rootfs!.diff_ids as unknown[]).map(String) : [];
  if (diffIds.length !== manifest.layers.length) throw new Error(`the image's config lists ${diffIds.length} layers, its manifest ${manifest.layers.length}`);
  const layers = manifest.layers.map((l, i): LayerRef => {
    const mediaType = l.mediaType ?? "";
    if (!LAYER_TYPES.test(mediaType)) throw new Error(`layer ${i} has the media type ${JSON.stringify(mediaType)}, which is not a tar layer`);
    if (!l.digest) throw new Error(`layer ${i} has no digest`);
    blobPath(blobDir, l.digest);
    blobPath(blobDir, diffIds[i]!);
    return { digest: l.digest, diffId: diffIds[i]!, mediaType, size: typeof l.size === "number" ? l.size : 0 };
  });
  const c = config.config ?? {};
  const env = Array.isArray(c.Env) ? c.Env.filter((e): e is string => typeof e === "string" && e.includes("=") && !e.includes("\0")) : [];
  const manifestSize = (await stat(manifestPath)).size;
  const configSize = (await stat(configPath)).size;
  return {
    digest: entry.digest,
    layers,
    config: { env, workingDir: typeof c.WorkingDir === "string" && c.WorkingDir.startsWith("/") ? c.WorkingDir : "/", user: typeof c.User === "string" ? c.User : "" },
    metaBlobs: [
      { digest: entry.digest, size: manifestSize },
      { digest: manifest.config.digest, size: configSize },
    ],
  };
}

/** How a layer blob is compressed, for tar. */
export function compressionOf(mediaType: string): "gzip" | "zstd" | "none" {
  if (/gzip$/.test(mediaType)) return "gzip";
  if (/zstd$/.test(mediaType)) return "zstd";
  return "none";
}
