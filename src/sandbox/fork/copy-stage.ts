import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, mkdirSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import type { Ids } from "./fork-mount.js";
import { ForkTreeChangedError } from "./sandboxed-copy.js";

const run = promisify(execFile);

/**
 * Copy mode's fork (no per-slot disk, or no mounts) made atomic: the parent's tree is copied
 * into a staging dir beside the child's workspace (on the same filesystem: the child's own
 * disk where it has one, so the copy counts against its bound and ENOSPC fails the fork),
 * and only swapped in once every child's copy is complete and the child's processes are
 * dead. A failed copy is removed and the child keeps its files.
 */
export interface CopyStage {
  /** The staged copy of the parent's tree, owned by the child. */
  dir: string;
}

/**
 * Copies the parent's workspace into a new dir under `besideDir` with `copyInto` (inside the
 * parent's sandbox, as its uid: sandboxed-copy.ts), then gives it to `owner` where given
 * (root server, per-slot uids). `midway` runs between the copy and the chown (tests inject a
 * failure there). Rejects with nothing left behind.
 */
export async function stageCopy(copyInto: (dir: string) => Promise<void>, besideDir: string, owner: Ids | undefined, midway: () => void): Promise<CopyStage> {
  const dir = join(besideDir, `fork-copy-${randomBytes(4).toString("hex")}`);
  mkdirSync(dir, { mode: 0o700 });
  try {
    await copyInto(dir);
    midway();
    if (owner) await run("chown", ["-R", "--no-dereference", `${owner.uid}:${owner.gid}`, dir]);
  } catch (err) {
    await removeNow(dir);
    // Not the server's failure: the fork answers 409 with it (fork.ts).
    if (err instanceof ForkTreeChangedError) throw err;
    const why = (err as { stderr?: string }).stderr?.trim().split("\n")[0] || (err instanceof Error ? err.message : String(err));
    throw new Error(`copying the parent's workspace for the child failed: ${why}`, { cause: err });
  }
  return { dir };
}

/** Drops a staged copy (another child failed): waited for, so the child's disk space is free when the fork answers. */
export async function dropStage(stage: CopyStage): Promise<void> {
  await removeNow(stage.dir);
}

/**
 * Puts a staged copy in place of `workspace` (the child's processes are dead). `bound`: the
 * workspace is a bind mount of `bound.source` (a dir on the child's disk): the bind still
 * points at that dir, so its entries are exchanged (renames on one filesystem, O(top-level
 * entries)); otherwise the workspace dir itself is renamed away and the stage renamed onto
 * it. What was there is handed to `discard` (deleted in the background). `scratch` (dirs of
 * the child's disk besides the workspace: /tmp, /var/tmp, /dev/shm) are emptied the same
 * way, as a reset would.
 */
export function swapIn(stage: CopyStage, workspace: string, bound: { source: string; scratch: string[] } | undefined, discard: (path: string) => void): void {
  const old = `${stage.dir}.old`;
  if (!bound) {
    renameSync(workspace, old);
    renameSync(stage.dir, workspace);
    discard(old);
    return;
  }
  mkdirSync(old, { mode: 0o700 });
  for (const name of readdirSync(bound.source)) renameSync(join(bound.source, name), join(old, name));
  for (const name of readdirSync(stage.dir)) renameSync(join(stage.dir, name), join(bound.source, name));
  // The workspace root takes the parent's mode and the child's owner (cp -a set them on the stage).
  const st = statSync(stage.dir);
  chmodSync(bound.source, st.mode & 0o7777);
  chownSync(bound.source, st.uid, st.gid);
  for (const dir of bound.scratch) {
    const st = statSync(dir);
    renameSync(dir, join(old, `scratch-${randomBytes(4).toString("hex")}`));
    mkdirSync(dir);
    chmodSync(dir, st.mode & 0o7777);
    chownSync(dir, st.uid, st.gid);
  }
  rmSync(stage.dir, { recursive: true, force: true });
  discard(old);
}

/** Removes a tree that may hold read-only dirs (chmod first, as tree-removal.ts does). */
async function removeNow(dir: string): Promise<void> {
  await run("/bin/sh", ["-c", `chmod -R u+rwx -- "$1" 2>/dev/null; rm -rf -- "$1"`, "slotpool-drop-copy", dir]).catch(() => rmSync(dir, { recursive: true, force: true }));
}
