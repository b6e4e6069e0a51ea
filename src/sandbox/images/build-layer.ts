import { spawn, execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { lstat, readdir, rename, rm, unlink, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { createGzip } from "node:zlib";

const run = promisify(execFile);

/**
 * One build step's changes as an OCI layer: the step's overlayfs upper dir (what its commands
 * changed in the image's root) turned into a gzipped tar the way OCI images carry changes,
 * then written as a blob. overlayfs marks a deleted file with a character device 0/0 and a
 * replaced directory with an opaque xattr; OCI says `.wh.NAME` and `.wh..wh..opq`: both are
 * rewritten in the upper dir (which the build discards afterwards) before GNU tar reads it.
 * Owners are the image's own ids: the upper dir holds the slot's host ids, mapped back by
 * `inside` through tar's --owner-map/--group-map.
 *
 * The digests come from the bytes as they stream: `diffId` of the tar (the image config's
 * rootfs.diff_ids), `digest` and `size` of the gzipped blob (the manifest's).
 */

export interface BuiltLayer {
  diffId: string;
  digest: string;
  size: number;
  /** The blob file written (in `blobDir`, named by its digest). */
  path: string;
}

/** Paths a slot's sandbox makes in its root as mount points, not the step's changes: left out when empty. */
const MOUNT_POINTS = new Set(["run/slotpool", "run/slotpool-files", "proc", "dev", "sys", "tmp", "workspace", "etc/resolv.conf"]);

export async function layerFromUpper(upper: string, blobDir: string, inside: (hostId: number, kind: "uid" | "gid") => number): Promise<BuiltLayer | undefined> {
  const uids = new Set<number>();
  const gids = new Set<number>();
  let entries = 0;
  const walk = async (dir: string, rel: string): Promise<void> => {
    for (const name of await readdir(dir)) {
      const path = join(dir, name);
      const relPath = rel ? `${rel}/${name}` : name;
      const st = await lstat(path);
      if (st.isCharacterDevice() && st.rdev === 0) {
        // overlayfs's whiteout → OCI's.
        await unlink(path);
        await writeFile(join(dir, `.wh.${name}`), "", { mode: 0o600 });
        entries++;
        continue;
      }
      if (st.isDirectory()) {
        await walk(path, relPath);
        if (MOUNT_POINTS.has(relPath) && (await readdir(path)).length === 0) {
          await rm(path, { recursive: true, force: true });
          continue;
        }
      } else if (MOUNT_POINTS.has(relPath) && st.isFile() && st.size === 0) {
        await unlink(path);
        continue;
      }
      uids.add(st.uid);
      gids.add(st.gid);
      entries++;
    }
  };
  await walk(upper, "");
  // Directories the step replaced (overlayfs's opaque xattr: trusted.* as root, user.* in a user namespace).
  for (const attr of ["trusted.overlay.opaque", "user.overlay.opaque"]) {
    for (const dir of await opaqueDirs(upper, attr)) {
      await writeFile(join(dir, ".wh..wh..opq"), "", { mode: 0o600 });
      entries++;
    }
  }
  if (entries === 0) return undefined;
  const st = await lstat(upper);
  uids.add(st.uid);
  gids.add(st.gid);
  const tmp = join(blobDir, `.layer-${randomBytes(6).toString("hex")}`);
  const ownerMap = `${tmp}.owners`;
  const groupMap = `${tmp}.groups`;
  await writeFile(ownerMap, [...uids].map((u) => `+${u} +${inside(u, "uid")}\n`).join(""));
  await writeFile(groupMap, [...gids].map((g) => `+${g} +${inside(g, "gid")}\n`).join(""));
  try {
    const { diffId, digest, size } = await tarGzip(upper, tmp, ownerMap, groupMap);
    const path = join(blobDir, digest.slice("sha256:".length));
    await rename(tmp, path);
    return { diffId, digest, size, path };
  } finally {
    await rm(tmp, { force: true });
    await rm(ownerMap, { force: true });
    await rm(groupMap, { force: true });
  }
}

/** Directories under `root` carrying the overlay's opaque xattr `attr` (getfattr, Debian's attr). */
async function opaqueDirs(root: string, attr: string): Promise<string[]> {
  let named = "";
  try {
    ({ stdout: named } = await run("getfattr", ["-R", "-P", "--absolute-names", "-n", attr, "--", root], { maxBuffer: 64 << 20 }));
  } catch (err) {
    // getfattr exits 1 when some file lacks the attribute: its stdout still names the rest.
    named = (err as { stdout?: string }).stdout ?? "";
  }
  return named
    .split("\n")
    .filter((l) => l.startsWith("# file: "))
    .map((l) => l.slice("# file: ".length));
}

function tarGzip(dir: string, out: string, ownerMap: string, groupMap: string): Promise<{ diffId: string; digest: string; size: number }> {
  return new Promise((resolve, reject) => {
    const tar = spawn("tar", ["--create", "--format=posix", "--pax-option=delete=atime,delete=ctime", "--sort=name", "--numeric-owner", `--owner-map=${ownerMap}`, `--group-map=${groupMap}`, "-C", dir, "."], { stdio: ["ignore", "pipe", "pipe"] });
    const tarHash = createHash("sha256");
    const gzHash = createHash("sha256");
    let size = 0;
    let stderr = "";
    tar.stderr!.on("data", (d: Buffer) => (stderr = (stderr + d.toString("utf8")).slice(-2000)));
    const gzip = createGzip();
    const file = createWriteStream(out, { mode: 0o644 });
    tar.stdout!.on("data", (d: Buffer) => tarHash.update(d));
    gzip.on("data", (d: Buffer) => {
      gzHash.update(d);
      size += d.length;
    });
    tar.stdout!.pipe(gzip).pipe(file);
    let code: number | null | undefined;
    let written = false;
    const settle = (): void => {
      if (code === undefined || !written) return;
      if (code !== 0) return reject(new Error(`tar of the step's changes failed (exit ${code}): ${stderr.trim().split("\n").slice(-2).join(" ")}`));
      resolve({ diffId: `sha256:${tarHash.digest("hex")}`, digest: `sha256:${gzHash.digest("hex")}`, size });
    };
    tar.once("error", reject);
    file.once("error", reject);
    tar.once("close", (c) => {
      code = c;
      settle();
    });
    file.once("finish", () => {
      written = true;
      settle();
    });
  });
}
