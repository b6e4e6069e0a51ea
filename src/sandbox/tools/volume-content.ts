import { randomBytes } from "node:crypto";
import { closeSync, constants as fsc, fchmodSync, fchownSync, fstatSync, lstatSync, mkdirSync, openSync, readdirSync, readlinkSync, renameSync, type Stats, unlinkSync } from "node:fs";
import type { FileHandle } from "node:fs/promises";
import { posix } from "node:path";
import { HttpError } from "../../http/errors.js";
import type { VolumeEntry } from "../../protocol/volumes.js";
import type { VolumeStore } from "../workspace/volume-store.js";
import { fdPath, resolveInWorkspace, resolveInWorkspaceSync, WorkspacePathError } from "./path-guard.js";

/**
 * The volume content operations (protocol/volumes.ts) of E2B's volume content API, done by
 * the server on a volume's directory from outside any slot. Slots write there too (a volume
 * mounted into their sessions), so every path goes through the workspace path guard
 * (path-guard.ts) with the volume's directory as its root: one name at a time, no symlink
 * followed out of the volume, no FIFO waited on, and what the server creates is the volume
 * owner's. Semantics as E2B's (its SDK tests' reference server): a write over an existing
 * file needs `force`, `mkdir` of an existing path too (and then only a directory), a
 * missing parent is a 404 unless `mkdir`'s `force` makes it, removing `/` is refused.
 *
 * Owners: every file of a volume is the volume's own (volume-store.ts); a sandbox mounting
 * it owns them all. `uid`/`gid` are accepted and answered as E2B's sandbox user's (1000),
 * the one owner a sandbox sees; `mode` is the file's real mode.
 */

/** What every entry reports as its owner: E2B's sandbox user (`user`, 1000), whom every sandbox is. */
export const VOLUME_ENTRY_ID = 1000;
/** Most entries one listing returns. */
export const MAX_LIST_ENTRIES = 10_000;

/** A volume path (absolute from the volume's root, or relative to it) as the guard's relative form. */
function rel(path: string): string {
  const parts = path.split("/").filter((c) => c !== "" && c !== ".");
  return parts.length === 0 ? "." : parts.join("/");
}

/** The canonical absolute form E2B answers with. */
function absolute(relPath: string): string {
  return relPath === "." ? "/" : `/${relPath}`;
}

function entryOf(path: string, st: Stats, target?: string): VolumeEntry {
  const type = st.isFile() ? "file" : st.isDirectory() ? "directory" : st.isSymbolicLink() ? "symlink" : "unknown";
  return {
    name: path === "/" ? "/" : posix.basename(path),
    path,
    type,
    size: st.isFile() ? st.size : 0,
    mode: st.mode & 0o7777,
    uid: VOLUME_ENTRY_ID,
    gid: VOLUME_ENTRY_ID,
    atime: st.atime.toISOString(),
    mtime: st.mtime.toISOString(),
    ctime: st.ctime.toISOString(),
    ...(target !== undefined ? { target } : {}),
  };
}

/** The guard's refusals as the volume API's statuses, naming the volume path. */
function refusal(err: unknown, path: string): never {
  if (err instanceof WorkspacePathError) {
    const msg = err.message.replaceAll("the workspace", "the volume").replaceAll('"/workspace"', '"/"');
    if (err.problem === "not_found") throw new HttpError(404, `path '${path}' not found in the volume`, "path");
    if (err.problem === "is_directory" || err.problem === "not_directory" || err.problem === "not_regular") throw new HttpError(409, msg, "path");
    throw new HttpError(400, msg, "path");
  }
  throw err;
}

export class VolumeContent {
  constructor(private readonly store: VolumeStore) {}

  private root(volumeId: string): string {
    return this.store.dataDir(volumeId);
  }

  stat(volumeId: string, path: string): VolumeEntry {
    const root = this.root(volumeId);
    const r = rel(path);
    try {
      const g = resolveInWorkspaceSync(root, r, { intent: "read" });
      closeSync(g.fd);
      return entryOf(absolute(g.path), g.stat);
    } catch (err) {
      refusal(err, path);
    }
  }

  /** The directory's entries, `depth` levels down (symlinks listed as symlinks, never followed). */
  list(volumeId: string, path: string, depth: number): VolumeEntry[] {
    const root = this.root(volumeId);
    const out: VolumeEntry[] = [];
    let dir: number;
    let base: string;
    try {
      const g = resolveInWorkspaceSync(root, rel(path), { intent: "directory" });
      dir = g.fd;
      base = g.path;
    } catch (err) {
      refusal(err, path);
    }
    const walk = (fd: number, relDir: string, level: number): void => {
      for (const name of readdirSync(fdPath(fd)).sort()) {
        if (out.length >= MAX_LIST_ENTRIES) throw new HttpError(413, `the listing has more than ${MAX_LIST_ENTRIES} entries: list a deeper directory or with less depth`, "depth");
        const childRel = relDir === "." ? name : `${relDir}/${name}`;
        let st: Stats;
        try {
          st = lstatSync(fdPath(fd, name));
        } catch {
          continue; // gone meanwhile
        }
        let target: string | undefined;
        if (st.isSymbolicLink()) {
          try {
            target = readlinkSync(fdPath(fd, name));
          } catch {
            /* gone */
          }
        }
        out.push(entryOf(absolute(childRel), st, target));
        if (st.isDirectory() && level < depth) {
          let child: number;
          try {
            child = openSync(fdPath(fd, name), fsc.O_RDONLY | fsc.O_DIRECTORY | fsc.O_NOFOLLOW);
          } catch {
            continue;
          }
          try {
            walk(child, childRel, level + 1);
          } finally {
            closeSync(child);
          }
        }
      }
    };
    try {
      walk(dir, base, 1);
    } finally {
      closeSync(dir);
    }
    return out;
  }

  /** Makes a directory; `force`: its missing parents too, and an existing directory is fine. */
  mkdir(volumeId: string, path: string, options: { force: boolean; mode?: number | undefined }): VolumeEntry {
    const root = this.root(volumeId);
    const parts = rel(path).split("/").filter((p) => p !== ".");
    if (parts.length === 0) {
      if (!options.force) throw new HttpError(409, "path '/' exists already", "path");
      return this.stat(volumeId, "/");
    }
    for (let i = 1; i <= parts.length; i++) {
      const sub = parts.slice(0, i).join("/");
      const last = i === parts.length;
      try {
        const g = resolveInWorkspaceSync(root, sub, { intent: "directory" });
        closeSync(g.fd);
        if (last && !options.force) throw new HttpError(409, `path '${path}' exists already`, "path");
        continue;
      } catch (err) {
        if (err instanceof HttpError) throw err;
        if (!(err instanceof WorkspacePathError) || err.problem !== "not_found") refusal(err, path);
        if (!last && !options.force) throw new HttpError(404, `path '${absolute(parts.slice(0, i).join("/"))}' not found in the volume (force makes missing parents)`, "path");
      }
      this.makeOne(root, parts.slice(0, i - 1).join("/") || ".", parts[i - 1]!, last ? (options.mode ?? 0o755) : 0o755, path);
    }
    return this.stat(volumeId, path);
  }

  private makeOne(root: string, parentRel: string, name: string, mode: number, path: string): void {
    let parent: number;
    try {
      parent = resolveInWorkspaceSync(root, parentRel, { intent: "directory" }).fd;
    } catch (err) {
      refusal(err, path);
    }
    try {
      try {
        mkdirSync(fdPath(parent, name), mode);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
      }
      // Opened without following, then fchown/fchmod: the name may have been swapped meanwhile.
      const made = openSync(fdPath(parent, name), fsc.O_RDONLY | fsc.O_DIRECTORY | fsc.O_NOFOLLOW);
      try {
        const owner = this.store.owner;
        if (owner) fchownSync(made, owner.uid, owner.gid);
        fchmodSync(made, mode);
      } finally {
        closeSync(made);
      }
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ELOOP" || (err as NodeJS.ErrnoException).code === "ENOTDIR") throw new HttpError(409, `path '${path}' is not a directory`, "path");
      throw err;
    } finally {
      closeSync(parent);
    }
  }

  /** Sets the mode (uid/gid: see the class comment). */
  chmeta(volumeId: string, path: string, mode: number | undefined): VolumeEntry {
    const root = this.root(volumeId);
    let g;
    try {
      g = resolveInWorkspaceSync(root, rel(path), { intent: "read" });
    } catch (err) {
      refusal(err, path);
    }
    try {
      if (mode !== undefined) fchmodSync(g.fd, mode);
      return entryOf(absolute(g.path), fstatSync(g.fd));
    } finally {
      closeSync(g.fd);
    }
  }

  /** Removes a file, a symlink or a whole directory (in the background); 404 when missing, `/` refused. */
  remove(volumeId: string, path: string): void {
    const root = this.root(volumeId);
    const parts = rel(path).split("/").filter((p) => p !== ".");
    if (parts.length === 0) throw new HttpError(404, "the volume's root cannot be removed", "path");
    let parent: number;
    try {
      parent = resolveInWorkspaceSync(root, parts.slice(0, -1).join("/") || ".", { intent: "directory" }).fd;
    } catch (err) {
      refusal(err, path);
    }
    const name = parts.at(-1)!;
    try {
      let st: Stats;
      try {
        st = lstatSync(fdPath(parent, name));
      } catch {
        throw new HttpError(404, `path '${path}' not found in the volume`, "path");
      }
      if (st.isDirectory()) this.store.discardTree(fdPath(parent, name));
      else unlinkSync(fdPath(parent, name));
    } finally {
      closeSync(parent);
    }
  }

  /** Opens a regular file for reading (404 when missing, 409 a directory). */
  async openForRead(volumeId: string, path: string): Promise<{ handle: FileHandle; size: number }> {
    const root = this.root(volumeId);
    let g;
    try {
      g = await resolveInWorkspace(root, rel(path), { intent: "read" });
    } catch (err) {
      refusal(err, path);
    }
    if (!g.stat.isFile()) {
      await g.handle.close();
      throw new HttpError(g.stat.isDirectory() ? 409 : 400, `path '${path}' is ${g.stat.isDirectory() ? "a directory" : "not a regular file"}`, "path");
    }
    return { handle: g.handle, size: g.stat.size };
  }

  /**
   * Starts writing a file: the bytes go to a hidden file beside it (created with `mode`,
   * default 0644), which `commit` renames over the name (never following what is there: a
   * symlink planted there is replaced, not written through), so a failed or refused upload
   * leaves the old file as it was. An existing file is replaced only with `force` (409
   * otherwise), a directory never; the parent must exist (404).
   */
  async beginWrite(volumeId: string, path: string, options: { force: boolean; mode?: number | undefined }): Promise<{ handle: FileHandle; commit(): VolumeEntry; abort(): void }> {
    const root = this.root(volumeId);
    const parts = rel(path).split("/").filter((p) => p !== ".");
    if (parts.length === 0) throw new HttpError(409, "path '/' is a directory", "path");
    const parentRel = parts.slice(0, -1).join("/") || ".";
    const name = parts.at(-1)!;
    let existing: Stats | undefined;
    const parentFd = (): number => {
      try {
        return resolveInWorkspaceSync(root, parentRel, { intent: "directory" }).fd;
      } catch (err) {
        refusal(err, path);
      }
    };
    const parent = parentFd();
    try {
      existing = lstatSync(fdPath(parent, name));
    } catch {
      existing = undefined;
    } finally {
      closeSync(parent);
    }
    if (existing?.isDirectory()) throw new HttpError(409, `path '${path}' is a directory`, "path");
    if (existing && !options.force) throw new HttpError(409, `path '${path}' exists already: write it with force to replace it`, "path");
    const temp = `.${name.slice(0, 200)}.slotpool-upload-${randomBytes(6).toString("hex")}`;
    const tempRel = parentRel === "." ? temp : `${parentRel}/${temp}`;
    let g;
    try {
      g = await resolveInWorkspace(root, tempRel, { intent: "write", fileMode: options.mode ?? 0o644, ...(this.store.owner ? { owner: this.store.owner } : {}) });
    } catch (err) {
      refusal(err, path);
    }
    await g.handle.chmod(options.mode ?? 0o644);
    const dropTemp = (): void => {
      const p = parentFd();
      try {
        unlinkSync(fdPath(p, temp));
      } catch {
        /* gone */
      } finally {
        closeSync(p);
      }
    };
    return {
      handle: g.handle,
      commit: () => {
        const p = parentFd();
        try {
          renameSync(fdPath(p, temp), fdPath(p, name));
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === "EISDIR" || (err as NodeJS.ErrnoException).code === "ENOTEMPTY") {
            dropTemp();
            throw new HttpError(409, `path '${path}' is a directory`, "path");
          }
          throw err;
        } finally {
          closeSync(p);
        }
        return this.stat(volumeId, path);
      },
      abort: dropTemp,
    };
  }
}
