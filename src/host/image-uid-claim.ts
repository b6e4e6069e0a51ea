import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, lstatSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { findExecutable } from "./executables.js";
import { IMAGE_UID_RANGE_START, imageUidPositions, uidsInUse } from "./slot-uid-blocks.js";

/** Where a root server's claims on image uid blocks are (see slot-uid-blocks.ts). */
export const IMAGE_UID_CLAIM_DIR = "/run/slotpool/image-uids";

/** An image uid block held by this server: `base` is its first uid; `release` gives it back (shutdown). */
export interface ImageUidClaim {
  base: number;
  release(): void;
}

/**
 * Claims this server's image uid block (slot-uid-blocks.ts): tries positions from the one
 * `slotUidBase` gives, each with `flock --nonblock` on its lock file, held by that flock
 * process until this server exits (its stdin, a pipe from us, then closes). A position whose
 * uids a live process uses is skipped. Without `flock` or a writable /run (a container), the
 * first position without a live process is taken unclaimed.
 */
export async function claimImageUidBlock(slotUidBase: number, slots: number, inUse: (first: number, count: number) => boolean = uidsInUse): Promise<ImageUidClaim> {
  const { count, first, size } = imageUidPositions(slotUidBase, slots);
  const flock = findExecutable("flock");
  const dir = claimDir();
  for (let i = 0; i < count; i++) {
    const position = (first + i) % count;
    const base = IMAGE_UID_RANGE_START + position * size;
    if (inUse(base, size)) continue;
    if (!flock || !dir) return { base, release: () => undefined };
    const holder = await tryLock(flock, join(dir, `${position}.lock`));
    if (holder) return { base, release: () => holder.kill() };
  }
  throw new Error(`no free image uid block for ${slots} slots: every position of [2^31, 2^32) is claimed or in use`);
}

function claimDir(): string | undefined {
  try {
    mkdirSync(IMAGE_UID_CLAIM_DIR, { recursive: true, mode: 0o700 });
    const st = lstatSync(IMAGE_UID_CLAIM_DIR);
    // Only a directory of ours that no one else writes to decides who owns a block.
    if (!st.isDirectory() || st.uid !== process.getuid?.()) return undefined;
    chmodSync(IMAGE_UID_CLAIM_DIR, 0o700);
    return IMAGE_UID_CLAIM_DIR;
  } catch {
    return undefined;
  }
}

/** `flock --nonblock FILE` holding the lock while its `cat` reads our pipe; null when another holds it. */
function tryLock(flock: string, file: string): Promise<ChildProcess | null> {
  return new Promise((resolve) => {
    const child = spawn(flock, ["--nonblock", "--conflict-exit-code", "75", file, "/bin/sh", "-c", "echo held; exec cat >/dev/null"], { stdio: ["pipe", "pipe", "ignore"] });
    let done = false;
    const finish = (v: ChildProcess | null): void => {
      if (!done) {
        done = true;
        resolve(v);
      }
    };
    child.stdout!.once("data", () => {
      // Held: not waited for by the event loop from now on; it lives exactly as long as this server.
      child.unref();
      (child.stdout as unknown as { unref?: () => void }).unref?.();
      (child.stdin as unknown as { unref?: () => void }).unref?.();
      finish(child);
    });
    child.once("exit", () => finish(null));
    child.once("error", () => finish(null));
    child.stdin!.on("error", () => undefined);
  });
}
