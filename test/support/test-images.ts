import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdirSync, renameSync, rmSync } from "node:fs";
import { join } from "node:path";
import { findExecutable } from "../../src/host/executables.js";
import { cachedBigLayout, cachedLayout, TEST_IMAGES_DIR, type Entry, type ImageSpec } from "./oci-image.js";

/**
 * The images the image tests use, each built from local files (the host's static busybox and
 * bash, text written here) and cached by content (oci-image.ts):
 * - `busyboxImage`: a scratch image with static busybox and bash, users root, app (1000) and
 *   nobody; a private home (0700, app's), a setuid copy of busybox, a hard link pair, a
 *   relative and an absolute symlink, Env, a WorkingDir the layers lack;
 * - `whiteoutImage`: its second layer deletes a file of the first (whiteout), replaces a
 *   directory's contents (opaque) and a file;
 * - `noBashImage`: busybox only (no bash, no libc), User app;
 * - `debianPythonImage`: Debian minbase with python3 from mmdebstrap (built once, slow; null
 *   where mmdebstrap cannot fetch, with the reason);
 * - `debianCodeInterpreterBaseImage`: the same with venv, pip, curl and sudo (the code
 *   interpreter template's base).
 */

const BUSYBOX = ["/bin/busybox", "/usr/bin/busybox"].find((p) => existsSync(p));
const BASH_STATIC = ["/bin/bash-static", "/usr/bin/bash-static"].find((p) => existsSync(p));

/** Why the busybox images cannot be built here, if they cannot. */
export const busyboxMissing: string | undefined = !BUSYBOX ? "static busybox is not installed (busybox-static)" : !BASH_STATIC ? "bash-static is not installed" : undefined;

const APPLETS = ["sh", "ls", "cat", "id", "stat", "mkdir", "rm", "touch", "chmod", "chown", "ln", "echo", "env", "pwd", "sleep", "ps", "grep", "wc", "head", "whoami", "su", "readlink", "df", "du", "dd", "test", "true", "false", "printf", "tr", "cut", "sed", "awk", "find", "mv", "cp", "kill", "wget", "nc", "hostname", "uname", "sort", "seq", "xargs", "tail", "yes"];

function busyboxBase(withBash: boolean): Entry[] {
  return [
    { path: "bin", type: "dir" },
    { path: "bin/busybox", fromHost: BUSYBOX!, mode: 0o755 },
    ...APPLETS.map((a): Entry => ({ path: `bin/${a}`, type: "symlink", target: "busybox" })),
    ...(withBash ? [{ path: "bin/bash", fromHost: BASH_STATIC!, mode: 0o755 } as Entry] : []),
    { path: "etc", type: "dir" },
    { path: "etc/passwd", content: "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000:app:/home/app:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n" },
    { path: "etc/group", content: "root:x:0:\napp:x:1000:\nnogroup:x:65534:\n" },
    { path: "root", type: "dir", mode: 0o700 },
    { path: "tmp", type: "dir", mode: 0o1777 },
    { path: "home", type: "dir" },
    { path: "home/app", type: "dir", mode: 0o700, uid: 1000, gid: 1000 },
    { path: "home/app/secret.txt", content: "app's secret\n", mode: 0o600, uid: 1000, gid: 1000 },
  ];
}

export function busyboxImage(): string {
  const spec: ImageSpec = {
    layers: [
      busyboxBase(true),
      [
        { path: "usr", type: "dir" },
        { path: "usr/local", type: "dir" },
        { path: "usr/local/bin", type: "dir" },
        // A setuid-root copy of busybox: run by app, `id -u` through it shows whether the bit gave anything.
        { path: "usr/local/suid", type: "dir" },
        { path: "usr/local/suid/busybox", fromHost: BUSYBOX!, mode: 0o4755 },
        { path: "data", type: "dir" },
        { path: "data/a.txt", content: "linked\n", mode: 0o640, uid: 1000, gid: 1000 },
        { path: "data/b.txt", type: "hardlink", target: "data/a.txt" },
        { path: "data/rel-link", type: "symlink", target: "a.txt" },
        { path: "data/abs-link", type: "symlink", target: "/data/a.txt" },
        { path: "data/exec.sh", content: "#!/bin/sh\necho from-image-script\n", mode: 0o750, uid: 0, gid: 1000 },
      ],
    ],
    config: { Env: ["PATH=/usr/local/bin:/bin", "GREETING=hello from the image", "LANG=C"], WorkingDir: "/srv/work" },
  };
  return cachedLayout("busybox", spec);
}

export function whiteoutImage(): string {
  const spec: ImageSpec = {
    layers: [
      [
        ...busyboxBase(true),
        { path: "etc/gone.txt", content: "deleted by layer 2\n" },
        { path: "etc/kept.txt", content: "kept\n" },
        { path: "etc/replaced.txt", content: "old\n" },
        { path: "opt", type: "dir" },
        { path: "opt/old", type: "dir" },
        { path: "opt/old/a", content: "a\n" },
        { path: "opt/old/b", content: "b\n" },
        { path: "opt/dir-gone", type: "dir" },
        { path: "opt/dir-gone/inner", content: "x\n" },
      ],
      [
        { path: "etc", type: "dir" },
        { path: "etc/gone.txt", type: "whiteout" },
        { path: "etc/replaced.txt", content: "new\n" },
        { path: "opt", type: "dir" },
        { path: "opt/old", type: "dir" },
        { path: "opt/old", type: "opaque" },
        { path: "opt/old/fresh", content: "fresh\n" },
        { path: "opt/dir-gone", type: "whiteout" },
      ],
    ],
    config: { WorkingDir: "/opt" },
  };
  return cachedLayout("whiteouts", spec);
}

export function noBashImage(): string {
  const spec: ImageSpec = {
    layers: [busyboxBase(false)],
    config: { User: "app", WorkingDir: "/home/app", Env: ["PATH=/bin"] },
  };
  return cachedLayout("nobash", spec);
}

/** busybox and bash plus a layer of `mb` megabytes of incompressible files (the benchmark's images), streamed and cached. */
export function bigImage(mb: number): Promise<string> {
  return cachedBigLayout("big", busyboxBase(true), mb, { WorkingDir: "/" });
}

/**
 * Debian bookworm minbase with python3, from mmdebstrap (a while the first time; cached).
 * Returns the layout, or the reason it cannot be built here (no mmdebstrap, mirror
 * unreachable, not root and no subuids for mmdebstrap's unshare mode).
 */
export function debianPythonImage(): { layout: string } | { reason: string } {
  return debianImage("debian-python", ["python3"]);
}

/**
 * The stand-in for the code interpreter template's base (`python:3.13` on Docker Hub, plus what
 * its `apt_install` step adds that the Python kernel needs): Debian bookworm minbase with
 * python3 (3.11), its venv and pip, `python` (python-is-python3), curl (the ready checks) and
 * sudo (the template's start command), from mmdebstrap, cached as debianPythonImage.
 */
export function debianCodeInterpreterBaseImage(): { layout: string } | { reason: string } {
  return debianImage("debian-code-interpreter", ["python3", "python3-venv", "python3-pip", "python-is-python3", "curl", "sudo"]);
}

function debianImage(name: string, packages: string[]): { layout: string } | { reason: string } {
  const tarball = join(TEST_IMAGES_DIR, `${name}-rootfs.tar`);
  if (!existsSync(tarball)) {
    if (!findExecutable("mmdebstrap")) return { reason: "mmdebstrap is not installed" };
    mkdirSync(TEST_IMAGES_DIR, { recursive: true });
    const tmp = `${tarball}.${process.pid}.tmp`;
    const mirror = process.env["SLOTPOOL_DEBIAN_MIRROR"] ?? "http://deb.debian.org/debian";
    const mode = process.getuid?.() === 0 ? "root" : "unshare";
    const r = spawnSync("mmdebstrap", ["--quiet", `--mode=${mode}`, "--variant=minbase", `--include=${packages.join(",")}`, "--format=tar", "bookworm", tmp, mirror], { encoding: "utf8", timeout: 900_000 });
    if (r.status !== 0) {
      rmSync(tmp, { force: true });
      return { reason: `mmdebstrap could not build Debian minbase with ${packages.join(", ")} (${mirror}): ${(r.stderr || r.error?.message || "").trim().split("\n").slice(-2).join(" ")}` };
    }
    renameSync(tmp, tarball);
  }
  return { layout: cachedLayout(name, { baseTar: tarball, layers: [], config: { Env: ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONDONTWRITEBYTECODE=1"], WorkingDir: "/testbed" } }) };
}

/** sha256 of a layout's manifest (what a reset answers as `digest`). */
export function layoutDigest(layout: string): string {
  const index = JSON.parse(execFileSync("cat", [join(layout, "index.json")], { encoding: "utf8" })) as { manifests: Array<{ digest: string }> };
  return index.manifests[0]!.digest;
}
