import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { accessSync, chmodSync, constants as fsc, existsSync, mkdirSync, readFileSync, renameSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { findExecutable } from "../../host/executables.js";

/**
 * The sandbox's small C programs (`native/*.c`: the per-slot spawner, the template mount
 * helper) are compiled at first use, once per source hash, so a checkout needs only a C
 * compiler and no build step; the sandbox image compiles them in its build stage instead.
 */

/** This module's folder, where the C sources are (src/sandbox/native, or dist/src/sandbox/native when built). */
const HERE = dirname(fileURLToPath(import.meta.url));

/** `<file>` in this folder, or in src/sandbox/native/ when running from dist/. */
export function nativeSource(file: string): string | null {
  const candidates = [join(HERE, file), resolve(HERE, "..", "..", "..", "..", "src", "sandbox", "native", file)];
  return candidates.find((c) => existsSync(c)) ?? null;
}

/** A prebuilt binary next to this module (the image's build stage puts it there). */
export function prebuiltNative(name: string): string {
  return join(HERE, name);
}

/** The first folder a binary is cached in: next to this module (outlives any server's data dir). */
export const NATIVE_DIR = HERE;

/** `<name>-<hash of the source>`: content-addressed, so a changed source builds anew. */
export function nativeBinaryName(name: string, source: string): string {
  return `${name}-${createHash("sha256").update(readFileSync(source)).digest("hex").slice(0, 12)}`;
}

export function writableDir(dir: string): boolean {
  try {
    mkdirSync(dir, { recursive: true });
    accessSync(dir, fsc.W_OK);
    return true;
  } catch {
    return false;
  }
}

/**
 * The compiled `source` (linked with `libs`, e.g. -lseccomp) as `<name>-<hash>` in the first of `dirs` that has it or can build it
 * (written to a temp name, then renamed: concurrent servers never see half a binary).
 */
export function compileNative(name: string, source: string, dirs: readonly string[], mode: number, libs: readonly string[] = []): { path: string } | { error: string } {
  const binary = nativeBinaryName(name, source);
  for (const d of dirs) {
    const p = join(d, binary);
    if (existsSync(p)) return { path: p };
  }
  const cc = findExecutable("cc") ?? findExecutable("gcc") ?? findExecutable("clang");
  if (!cc) return { error: `no C compiler (cc) to build ${name}` };
  let error: string | undefined;
  for (const d of dirs) {
    if (!writableDir(d)) continue;
    const p = join(d, binary);
    const tmp = `${p}.${process.pid}.tmp`;
    const res = spawnSync(cc, ["-O2", "-o", tmp, source, ...libs], { encoding: "utf8", timeout: 60_000 });
    if (res.status !== 0) {
      error = `building ${name} failed: ${(res.stderr || res.error?.message || "").trim()}`;
      continue;
    }
    chmodSync(tmp, mode);
    renameSync(tmp, p);
    return { path: p };
  }
  return { error: error ?? `no writable directory for ${name}` };
}
