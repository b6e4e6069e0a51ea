import { spawn, spawnSync } from "node:child_process";
import { chmodSync, chownSync, mkdirSync, renameSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { join } from "node:path";

/**
 * Deleting what a slot wrote, where no mount can be dropped instead (slot-disk.ts has none
 * in its fallback set-ups; template views in copy mode; the terminal's session dir there).
 * A slot may leave any tree: 150,000 files, 4,000 levels deep, directories without write
 * permission. So nothing here walks a tree in this process: a directory is renamed away
 * (one syscall, O(1)) and an empty one made in its place, and the old tree is deleted by
 * a child process (`chmod -R u+rwx` so a non-root server may remove read-only dirs, then
 * GNU `rm -rf`, which walks relative to each directory and has no depth limit).
 */
export class TreeRemoval {
  private readonly running = new Set<Promise<void>>();

  /** `trashDir`: on the same filesystem as the trees to rename (the server's state dir). */
  constructor(private readonly trashDir: string) {
    // What an earlier server had not finished deleting: renamed aside and deleted too.
    try {
      const old = `${trashDir}-${randomBytes(6).toString("hex")}`;
      renameSync(trashDir, old);
      void this.runRemoval(["-c", REMOVE_TREE, "slotpool-remove", old], old).catch(() => undefined);
    } catch {
      /* none */
    }
    mkdirSync(trashDir, { recursive: true, mode: 0o700 });
    chmodSync(trashDir, 0o700);
  }

  /**
   * Makes `dir` an empty directory (mode 0700, `owner`'s) at once and deletes what it held
   * in the background. Falls back to deleting its entries in a child process, waited for,
   * when it cannot be renamed (a mount point). Rejects when the directory is not empty
   * afterwards.
   */
  async empty(dir: string, owner?: { uid: number; gid: number }): Promise<void> {
    if (this.moveAway(dir)) {
      mkdirSync(dir, { mode: 0o700 });
      chmodSync(dir, 0o700);
      if (owner) chownSync(dir, owner.uid, owner.gid);
      return;
    }
    await this.runRemoval(["-c", REMOVE_ENTRIES, "slotpool-empty", dir], dir);
  }

  /** The same, for start-up (constructors): the deletion runs on in the background (in a child process, waited for, when the directory cannot be renamed). */
  emptyNow(dir: string, owner?: { uid: number; gid: number }): void {
    if (!this.moveAway(dir)) {
      // A mount point a crashed server left: emptied before anything can be written there
      // (a deletion still running once a fresh disk is mounted there would hit the new files).
      const r = spawnSync("/bin/sh", ["-c", REMOVE_ENTRIES, "slotpool-empty", dir], { encoding: "utf8", env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" } });
      if (r.status !== 0) throw new Error(`cannot empty ${dir}: ${(r.stderr || r.error?.message || "").trim().split("\n")[0]}`);
      return;
    }
    mkdirSync(dir, { mode: 0o700 });
    chmodSync(dir, 0o700);
    if (owner) chownSync(dir, owner.uid, owner.gid);
  }

  /**
   * Renames `path` into the trash and deletes it there in the background (absent: nothing;
   * on another filesystem: deleted in place in the background, so never reuse its name).
   */
  discard(path: string): void {
    this.moveAway(path);
  }

  /** Resolves when every background deletion started so far has ended (shutdown, tests). */
  async settle(): Promise<void> {
    await Promise.all([...this.running]);
  }

  private moveAway(path: string): boolean {
    const to = join(this.trashDir, randomBytes(6).toString("hex"));
    try {
      renameSync(path, to);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") return true;
      // Another filesystem (a slot's own disk) or a mount point: delete it where it is.
      if (code === "EXDEV") {
        void this.runRemoval(["-c", REMOVE_TREE, "slotpool-remove", path], path).catch(() => undefined);
        return true;
      }
      return false;
    }
    void this.runRemoval(["-c", REMOVE_TREE, "slotpool-remove", to], to).catch(() => undefined);
    return true;
  }

  private runRemoval(args: string[], what: string): Promise<void> {
    const done = new Promise<void>((resolve, reject) => {
      const child = spawn("/bin/sh", args, { stdio: ["ignore", "ignore", "pipe"], env: { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" } });
      // Never what keeps a stopping server alive: a deletion goes on by itself after it exits.
      child.unref();
      (child.stderr as unknown as { unref?: () => void }).unref?.();
      let err = "";
      child.stderr!.setEncoding("utf8");
      child.stderr!.on("data", (d: string) => {
        err = (err + d).slice(-500);
      });
      child.once("error", (e) => reject(new Error(`cannot delete ${what}: ${e.message}`)));
      child.once("exit", (code) => (code === 0 ? resolve() : reject(new Error(`cannot delete ${what}: ${err.trim().split("\n")[0] || `exit ${code}`}`))));
    });
    this.running.add(done);
    void done.catch(() => undefined).finally(() => this.running.delete(done));
    return done;
  }
}

/** Lowest CPU and I/O priority: a deletion in the background must not slow the slots that run. */
const BACKGROUND = `renice -n 19 -p $$ >/dev/null 2>&1; ionice -c 3 -p $$ >/dev/null 2>&1;`;

/** Deletes the tree $1 (made writable first: a non-root owner cannot empty a read-only dir). */
const REMOVE_TREE = `${BACKGROUND} chmod -R u+rwx -- "$1" 2>/dev/null; rm -rf -- "$1"`;

/** Deletes every entry of directory $1, dotfiles included, and fails unless it is empty afterwards. */
const REMOVE_ENTRIES = `chmod -R u+rwx -- "$1" 2>/dev/null; find "$1" -mindepth 1 -maxdepth 1 -exec rm -rf -- {} + ; [ -z "$(ls -A -- "$1")" ] || { echo "$1 is not empty after deleting its entries" >&2; exit 1; }`;
