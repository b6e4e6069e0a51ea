import { chmodSync, copyFileSync, existsSync, lstatSync, renameSync } from "node:fs";
import { dirname, join } from "node:path";
import { blockedForOthers } from "../../host/reachable.js";
import { compileNative, NATIVE_DIR, nativeBinaryName, nativeSource, prebuiltNative, writableDir } from "../native/native-build.js";

/**
 * Where the per-slot spawner binary (`native/spawner.c`, see spawner.ts) comes from: an
 * explicit SLOTPOOL_SPAWNER, the image's prebuilt one, or a build at first start; and, for a
 * root server whose checkout slot uids cannot reach, a copy where they can.
 */

let binaryPath: string | null | undefined;
let binaryError: string | undefined;

/**
 * Path of the compiled spawner, compiling it (once, cached by source hash) when needed.
 * `SLOTPOOL_SPAWNER` may point at a prebuilt binary (the sandbox image builds it).
 * Returns null (with `spawnerUnavailableReason()`) when it cannot be built.
 */
export function spawnerBinary(cacheDirs: string[], options: { othersMustReach?: boolean } = {}): string | null {
  if (binaryPath !== undefined) return binaryPath;
  const found = locateSpawner(cacheDirs);
  binaryPath = found && options.othersMustReach ? reachableSpawner(found, cacheDirs) : found;
  return binaryPath;
}

function locateSpawner(cacheDirs: string[]): string | null {
  const explicit = process.env["SLOTPOOL_SPAWNER"];
  if (explicit) {
    if (!existsSync(explicit)) binaryError = `SLOTPOOL_SPAWNER=${explicit} does not exist`;
    return existsSync(explicit) ? explicit : null;
  }
  // Prebuilt next to this module (the sandbox image compiles it in its build stage:
  // `cc -O2 -o dist/src/sandbox/native/slotpool-spawner src/sandbox/native/spawner.c`).
  const prebuilt = prebuiltNative("slotpool-spawner");
  const src = nativeSource("spawner.c");
  if (!src && existsSync(prebuilt)) return prebuilt;
  if (!src) {
    binaryError = "spawner source (src/sandbox/native/spawner.c) not found";
    return null;
  }
  const built = compileNative("slotpool-spawner", src, [NATIVE_DIR, ...cacheDirs], 0o755);
  if ("path" in built) return built.path;
  binaryError = built.error;
  return null;
}

/**
 * Root-owned directory for runtime files every slot uid must reach, whatever the checkout's
 * location (`/run` is root's, mode 0755, on every systemd or Docker host).
 */
export const RUNTIME_DIR = "/run/slotpool";

/**
 * A root server's slots start their namespace as their own uid, and bubblewrap, running as that
 * uid, must reach the spawner to bind it. A checkout under a private directory (/root, a
 * `mktemp -d`) hides the binary built next to the code: then it is copied (content-addressed)
 * into RUNTIME_DIR, or else into a cache dir (the data dir's state dir, already checked to be
 * reachable). Null, with the reason, when no such place exists.
 */
function reachableSpawner(found: string, cacheDirs: string[]): string | null {
  if (!blockedForOthers(dirname(found))) return found;
  const name = nativeBinaryName("slotpool-spawner", found);
  const dirs = [RUNTIME_DIR, ...cacheDirs];
  for (const d of dirs) {
    if (!writableDir(d)) continue;
    try {
      if (d === RUNTIME_DIR) chmodSync(d, 0o755);
      const st = lstatSync(d);
      // Only a directory no one else can write to may hold a binary every slot executes.
      if (!st.isDirectory() || st.uid !== process.getuid?.() || (st.mode & 0o022) !== 0) continue;
    } catch {
      continue;
    }
    if (blockedForOthers(d)) continue;
    const p = join(d, name);
    if (!existsSync(p)) {
      const tmp = `${p}.${process.pid}.tmp`;
      copyFileSync(found, tmp);
      chmodSync(tmp, 0o755);
      renameSync(tmp, p);
    }
    return p;
  }
  const blocked = blockedForOthers(dirname(found))!;
  binaryError = `the spawner ${found} is out of reach of the slot uids (${blocked.dir} is not searchable by others) and none of ${dirs.join(", ")} can hold a copy`;
  return null;
}

export function spawnerUnavailableReason(): string | undefined {
  return binaryError;
}
