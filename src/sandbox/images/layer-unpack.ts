import { execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { findExecutable } from "../../host/executables.js";
import { withoutCapabilities } from "../../host/mount-namespace.js";
import { systemBindArgs } from "../isolation/isolation.js";
import type { ImageMounter } from "./image-mounter.js";
import { compressionOf, type LayerRef } from "./oci-layout.js";

const run = promisify(execFile);

/**
 * Unpacks one image layer into a directory of its own, once per container, in the form
 * overlayfs takes as a lower layer.
 *
 * umoci unpacks a whole image into one root filesystem (applying whiteouts by deleting), not
 * a layer into a directory of its own with its whiteouts kept, so GNU tar does the unpacking
 * and the mount helper the small conversion: OCI's `.wh.NAME` markers become overlayfs's
 * character devices 0/0, `.wh..wh..opq` the directory's opaque xattr (`whiteouts`, never
 * following a symlink). tar keeps hard links, symlinks, modes and setuid bits, and as root
 * numeric owners (a server that is not root owns every file: see docs/images.md).
 *
 * tar reads a file a registry sent: it runs in a bubblewrap sandbox where the only writable
 * place is the new layer's directory (the host's system read-only, no network, its own pid
 * namespace); as root with just the capabilities extracting owners and modes takes (no
 * CAP_SYS_ADMIN: nothing can be mounted or remounted there).
 */

export interface UnpackOptions {
  bwrap: string;
  mounter: ImageMounter;
  /** Root: owners as the layer has them, overlayfs's trusted.* xattrs. Not root: everything the server's, user.* xattrs (userxattr). */
  root: boolean;
  /** Where the layer is unpacked first (same filesystem as the layers: renamed into place when complete). */
  tmpDir: string;
  timeoutMs: number;
}

/** What extracting owners, modes and setuid bits needs as root (no CAP_SYS_ADMIN, no CAP_SETFCAP: xattrs are not kept). */
const UNPACK_CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_MKNOD"];

export class LayerUnpackError extends Error {
  override name = "LayerUnpackError";
  constructor(
    message: string,
    /** The disk is full (ENOSPC): the store's, not the layer's fault. */
    readonly full: boolean,
  ) {
    super(message);
  }
}

/** Unpacks `blob` (a layer of media type `layer.mediaType`) into `dest` (absent before; renamed into place at the end). Resolves with the bytes it takes on disk. */
export async function unpackLayer(blob: string, layer: LayerRef, dest: string, o: UnpackOptions): Promise<number> {
  const tmp = join(o.tmpDir, `layer-${randomBytes(6).toString("hex")}`);
  await mkdir(tmp, { mode: 0o755 });
  try {
    await extract(blob, compressionOf(layer.mediaType), tmp, o);
    await o.mounter.call(["whiteouts", tmp, o.root ? "trusted" : "user"]);
    const bytes = await diskBytes(tmp);
    await rename(tmp, dest);
    return bytes;
  } catch (err) {
    await rm(tmp, { recursive: true, force: true }).catch(() => undefined);
    if (err instanceof LayerUnpackError) throw err;
    const msg = err instanceof Error ? err.message : String(err);
    throw new LayerUnpackError(`layer ${layer.digest}: ${msg}`, /no space left/i.test(msg));
  }
}

function extract(blob: string, compression: "gzip" | "zstd" | "none", out: string, o: UnpackOptions): Promise<void> {
  const tar = [
    "tar", "-x", "-f", "/in", "-C", "/out",
    ...(compression === "gzip" ? ["-z"] : compression === "zstd" ? ["--zstd"] : []),
    "--numeric-owner", "--same-permissions", "--delay-directory-restore", "--no-overwrite-dir",
    o.root ? "--same-owner" : "--no-same-owner",
    "--warning=no-timestamp", "--warning=no-unknown-keyword",
  ];
  const args = [
    "--die-with-parent", "--new-session",
    // Not root: uid 0 of a user namespace of its own (its files are the server's uid on disk).
    ...(o.root ? [] : ["--unshare-user", "--uid", "0", "--gid", "0"]),
    // As root the network namespace is unshare(1)'s (below): bubblewrap's --unshare-net sets its
    // loopback up, which takes CAP_NET_ADMIN, and a Docker container has none (RTM_NEWADDR fails).
    "--unshare-pid", ...(o.root ? [] : ["--unshare-net"]), "--unshare-ipc", "--unshare-uts",
    ...systemBindArgs(),
    "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp",
    "--ro-bind", blob, "/in",
    "--bind", out, "/out",
    ...(o.root ? UNPACK_CAPS.flatMap((c) => ["--cap-add", c]) : []),
    "--remount-ro", "/",
    "--", ...tar,
  ];
  const cmd = o.root ? withoutCapabilities(findExecutable("unshare") ?? "unshare", ["--net", "--", o.bwrap, ...args]) : withoutCapabilities(o.bwrap, args);
  return new Promise((resolve, reject) => {
    const child = spawn(cmd.file, cmd.args, { stdio: ["ignore", "ignore", "pipe"], env: { PATH: "/usr/bin:/bin", LANG: "C.UTF-8" }, cwd: "/" });
    let stderr = "";
    let pending = "";
    // Not root, device nodes cannot be made (mknod: EPERM): they are skipped (a slot's /dev is
    // its own mount anyway). Any other complaint fails the layer.
    let otherErrors = false;
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (d: string) => {
      stderr = (stderr + d).slice(-4000);
      const lines = (pending + d).split("\n");
      pending = lines.pop() ?? "";
      for (const l of lines) if (l && !DEVICE_SKIPPED.test(l)) otherErrors = true;
    });
    const timer = setTimeout(() => {
      stderr += `\n(timed out after ${Math.round(o.timeoutMs / 1000)} s)`;
      child.kill("SIGKILL");
    }, o.timeoutMs);
    child.once("error", (err) => (clearTimeout(timer), reject(new LayerUnpackError(`could not start tar: ${err.message}`, false))));
    child.once("close", (code, signal) => {
      clearTimeout(timer);
      if (pending && !DEVICE_SKIPPED.test(pending)) otherErrors = true;
      if (code === 0 || (code === 2 && !o.root && !otherErrors)) return resolve();
      const words = stderr.trim().split("\n").filter(Boolean).slice(-3).join(" ");
      reject(new LayerUnpackError(`tar failed (${signal ?? `exit ${code}`}): ${words || "no message"}`, /no space left/i.test(stderr)));
    });
  });
}

/** What tar says about a device node it may not make, and its closing line. */
const DEVICE_SKIPPED = /Cannot mknod: Operation not permitted$|Exiting with failure status due to previous errors$/;

/** Bytes `dir` takes on disk (du's count of allocated blocks, hard links once). */
export async function diskBytes(dir: string): Promise<number> {
  const { stdout } = await run("du", ["-s", "-x", "--block-size=1", dir], { maxBuffer: 1 << 16 });
  return Number(stdout.split(/\s/)[0]) || 0;
}
