import { createHash, randomBytes } from "node:crypto";
import { createWriteStream, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { createGzip } from "node:zlib";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

/**
 * OCI images for tests, built from local files without root, a daemon or subuids: each layer
 * is a tar written here (so owners, setuid bits, hard links and whiteouts are whatever the test
 * says, which umoci or buildah can only give as root or with subuids), the config and
 * manifest are JSON, and the whole is an OCI image layout (`oci-layout`, `index.json`,
 * `blobs/sha256/`) that skopeo copies into a registry. Layouts are cached under
 * `.build/test-images/<hash of the spec and its host files>/`, so suites build each image once.
 */

export type Entry =
  | { path: string; type: "dir"; mode?: number; uid?: number; gid?: number }
  | { path: string; type?: "file"; content?: string | Buffer; fromHost?: string; mode?: number; uid?: number; gid?: number }
  | { path: string; type: "symlink"; target: string; uid?: number; gid?: number }
  | { path: string; type: "hardlink"; target: string }
  /** An OCI whiteout: `path` is deleted from the layers below. */
  | { path: string; type: "whiteout" }
  /** An OCI opaque marker: directory `path` hides what the layers below have in it. */
  | { path: string; type: "opaque" };

export interface ImageSpec {
  /** Bottom layer first. */
  layers: Entry[][];
  config?: { Env?: string[]; WorkingDir?: string; User?: string; Cmd?: string[] };
  /** A layer tar made elsewhere (mmdebstrap's rootfs), added as the bottom layer. */
  baseTar?: string;
}

const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
export const TEST_IMAGES_DIR = join(REPO_ROOT, ".build", "test-images");

const BLOCK = 512;

function octal(n: number, width: number): string {
  return n.toString(8).padStart(width - 1, "0") + "\0";
}

/** One tar header (ustar; a pax header first when a name or link is too long for it). */
function header(name: string, type: string, size: number, mode: number, uid: number, gid: number, link = ""): Buffer {
  const parts: Buffer[] = [];
  if (Buffer.byteLength(name) > 100 || Buffer.byteLength(link) > 100) {
    const recs = [["path", name], ...(link ? [["linkpath", link]] : [])].map(([k, v]) => {
      const body = ` ${k}=${v}\n`;
      let len = Buffer.byteLength(body) + 1;
      while (String(len).length + Buffer.byteLength(body) !== len) len = String(len).length + Buffer.byteLength(body);
      return `${len}${body}`;
    });
    const data = Buffer.from(recs.join(""));
    parts.push(header("././@PaxHeader", "x", data.length, 0o644, 0, 0), pad(data));
    name = name.slice(0, 99);
    link = link.slice(0, 99);
  }
  const h = Buffer.alloc(BLOCK);
  h.write(name, 0, 100);
  h.write(octal(mode & 0o7777, 8), 100);
  h.write(octal(uid, 8), 108);
  h.write(octal(gid, 8), 116);
  h.write(octal(size, 12), 124);
  h.write(octal(0, 12), 136);
  h.fill(" ", 148, 156);
  h.write(type, 156);
  h.write(link, 157, 100);
  h.write("ustar\0", 257);
  h.write("00", 263);
  let sum = 0;
  for (const b of h) sum += b;
  h.write(octal(sum, 7), 148);
  parts.push(h);
  return Buffer.concat(parts);
}

function pad(data: Buffer): Buffer {
  const rest = data.length % BLOCK;
  return rest === 0 ? data : Buffer.concat([data, Buffer.alloc(BLOCK - rest)]);
}

/** A layer's tar. */
export function layerTar(entries: Entry[]): Buffer {
  const out: Buffer[] = [];
  for (const e of entries) {
    const path = e.path.replace(/^\/+/, "");
    const slash = path.lastIndexOf("/");
    const dir = slash >= 0 ? path.slice(0, slash + 1) : "";
    const base = path.slice(slash + 1);
    switch (e.type) {
      case "dir":
        out.push(header(path + "/", "5", 0, e.mode ?? 0o755, e.uid ?? 0, e.gid ?? 0));
        break;
      case "symlink":
        out.push(header(path, "2", 0, 0o777, e.uid ?? 0, e.gid ?? 0, e.target));
        break;
      case "hardlink":
        out.push(header(path, "1", 0, 0o644, 0, 0, e.target.replace(/^\/+/, "")));
        break;
      case "whiteout":
        out.push(header(`${dir}.wh.${base}`, "0", 0, 0o644, 0, 0));
        break;
      case "opaque":
        out.push(header(`${path}/.wh..wh..opq`, "0", 0, 0o644, 0, 0));
        break;
      default: {
        const data = e.fromHost ? readFileSync(e.fromHost) : Buffer.isBuffer(e.content) ? e.content : Buffer.from(e.content ?? "");
        out.push(header(path, "0", data.length, e.mode ?? 0o644, e.uid ?? 0, e.gid ?? 0), pad(data));
      }
    }
  }
  out.push(Buffer.alloc(BLOCK * 2));
  return Buffer.concat(out);
}

function sha256(b: Buffer | string): string {
  return createHash("sha256").update(b).digest("hex");
}

/** Writes `spec` as an OCI image layout at `dir` (tag "latest"). */
export function writeLayout(spec: ImageSpec, dir: string, extraLayers: Array<{ diffId: string; blob: { digest: string; size: number } }> = []): void {
  const blobs = join(dir, "blobs", "sha256");
  mkdirSync(blobs, { recursive: true });
  const put = (data: Buffer): { digest: string; size: number } => {
    const hex = sha256(data);
    writeFileSync(join(blobs, hex), data);
    return { digest: `sha256:${hex}`, size: data.length };
  };
  const tars = [...(spec.baseTar ? [readFileSync(spec.baseTar)] : []), ...spec.layers.map(layerTar)];
  const layers = [...tars.map((tar) => ({ diffId: `sha256:${sha256(tar)}`, blob: put(gzipSync(tar, { level: 6 })) })), ...extraLayers];
  const config = Buffer.from(
    JSON.stringify({
      architecture: "amd64",
      os: "linux",
      config: { Env: spec.config?.Env ?? ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], ...(spec.config?.WorkingDir ? { WorkingDir: spec.config.WorkingDir } : {}), ...(spec.config?.User ? { User: spec.config.User } : {}), ...(spec.config?.Cmd ? { Cmd: spec.config.Cmd } : {}) },
      rootfs: { type: "layers", diff_ids: layers.map((l) => l.diffId) },
      history: layers.map(() => ({ created_by: "slotpool test image" })),
    }),
  );
  const configBlob = put(config);
  const manifest = Buffer.from(
    JSON.stringify({
      schemaVersion: 2,
      mediaType: "application/vnd.oci.image.manifest.v1+json",
      config: { mediaType: "application/vnd.oci.image.config.v1+json", ...configBlob },
      layers: layers.map((l) => ({ mediaType: "application/vnd.oci.image.layer.v1.tar+gzip", ...l.blob })),
    }),
  );
  const manifestBlob = put(manifest);
  writeFileSync(join(dir, "oci-layout"), JSON.stringify({ imageLayoutVersion: "1.0.0" }));
  writeFileSync(
    join(dir, "index.json"),
    JSON.stringify({ schemaVersion: 2, manifests: [{ mediaType: "application/vnd.oci.image.manifest.v1+json", ...manifestBlob, annotations: { "org.opencontainers.image.ref.name": "latest" } }] }),
  );
}

/** The layout of `spec`, built once and cached by content under .build/test-images (concurrent builders: one wins the rename). */
export function cachedLayout(name: string, spec: ImageSpec): string {
  const h = createHash("sha256").update(JSON.stringify(spec, (k, v: unknown) => (Buffer.isBuffer(v) ? sha256(v) : v)));
  for (const layer of spec.layers) for (const e of layer) if ("fromHost" in e && e.fromHost) h.update(sha256(readFileSync(e.fromHost)));
  if (spec.baseTar) h.update(sha256(readFileSync(spec.baseTar)));
  const dir = join(TEST_IMAGES_DIR, `${name}-${h.digest("hex").slice(0, 16)}`);
  if (existsSync(join(dir, "index.json"))) return dir;
  mkdirSync(TEST_IMAGES_DIR, { recursive: true });
  const tmp = `${dir}.${process.pid}.${randomBytes(3).toString("hex")}`;
  writeLayout(spec, tmp);
  try {
    renameSync(tmp, dir);
  } catch {
    rmSync(tmp, { recursive: true, force: true });
  }
  return dir;
}

/**
 * An image with a layer of `mb` megabytes of incompressible files on top of `base` (the
 * benchmark's big image), streamed to disk (never the whole layer in memory), cached by its
 * parameters under .build/test-images.
 */
export async function cachedBigLayout(name: string, base: Entry[], mb: number, config: ImageSpec["config"]): Promise<string> {
  const dir = join(TEST_IMAGES_DIR, `${name}-${mb}mb-v1`);
  if (existsSync(join(dir, "index.json"))) return dir;
  const tmp = `${dir}.${process.pid}.${randomBytes(3).toString("hex")}`;
  const blobs = join(tmp, "blobs", "sha256");
  mkdirSync(blobs, { recursive: true });
  const gzPath = join(tmp, "layer.gz");
  const tarHash = createHash("sha256");
  const gzHash = createHash("sha256");
  const gzip = createGzip({ level: 1 });
  const out = createWriteStream(gzPath);
  let gzSize = 0;
  gzip.on("data", (c: Buffer) => {
    gzHash.update(c);
    gzSize += c.length;
  });
  gzip.pipe(out);
  const write = async (b: Buffer): Promise<void> => {
    tarHash.update(b);
    if (!gzip.write(b)) await new Promise((r) => gzip.once("drain", r));
  };
  const chunk = 8 * 1024 * 1024;
  let seed = 1;
  await write(header("blob/", "5", 0, 0o755, 0, 0));
  for (let i = 0; i * chunk < mb * 1024 * 1024; i++) {
    const data = Buffer.alloc(chunk);
    for (let j = 0; j < chunk; j += 4) data.writeUInt32LE((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0), j);
    await write(header(`blob/part-${i}`, "0", chunk, 0o644, 0, 0));
    await write(data);
  }
  await write(Buffer.alloc(BLOCK * 2));
  await new Promise<void>((resolve) => {
    out.once("finish", () => resolve());
    gzip.end();
  });
  const gzDigest = gzHash.digest("hex");
  renameSync(gzPath, join(blobs, gzDigest));
  writeLayout({ layers: [base], ...(config ? { config } : {}) }, tmp, [{ diffId: `sha256:${tarHash.digest("hex")}`, blob: { digest: `sha256:${gzDigest}`, size: gzSize } }]);
  mkdirSync(TEST_IMAGES_DIR, { recursive: true });
  try {
    renameSync(tmp, dir);
  } catch {
    rmSync(tmp, { recursive: true, force: true });
  }
  return dir;
}
