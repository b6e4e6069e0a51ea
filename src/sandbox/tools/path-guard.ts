import { closeSync, constants as fsc, fchownSync, fstatSync, mkdirSync, open as openCallback, openSync, readlinkSync, type Stats } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { posix } from "node:path";
import { SlotpoolError } from "../../protocol/errors.js";
import { workspacePathProblem } from "../../protocol/sandbox.js";

/**
 * Resolves user-given paths inside a slot's workspace (host directory `workspaceDir`, seen
 * by commands as `/workspace`) without ever touching anything outside it.
 *
 * Node has no openat(2), so every step goes through `/proc/self/fd/<dirfd>/<name>`: the
 * kernel follows the magic link to the directory we already hold open and then looks up
 * exactly one name in it, with O_NOFOLLOW. That is openat(dirfd, name, O_NOFOLLOW), so a
 * slot command that swaps a directory for a symlink between our checks cannot redirect
 * us: symlinks are only ever read (readlink) and expanded by this module, which refuses
 * any that lead out of the workspace. The opened file is verified once more through
 * `/proc/self/fd/<fd>` before it is handed out.
 *
 * Directories of the walk are held as plain fds (opened asynchronously, closed at once),
 * and the cheap calls on them (fstat, readlink of /proc magic links, mkdir of a missing
 * parent) are synchronous: each is a few microseconds, where a thread-pool round trip and
 * a FileHandle per step cost more than the step (a write_file was 12 round trips). Only
 * the final entry, which may be a FIFO or a large file, is handed out as a FileHandle.
 *
 * Paths returned to callers are workspace-relative ("dir/file.txt", "." for the root):
 * host paths never leave this module.
 */

/** The path commands see for the workspace root. */
export const WORKSPACE_MOUNT = "/workspace";
/** Linux's own limit on symlink expansions in one lookup. */
const MAX_SYMLINK_EXPANSIONS = 40;

export type WorkspacePathProblem =
  | "invalid"
  | "outside"
  | "symlink_outside"
  | "symlink_loop"
  | "not_found"
  | "not_directory"
  | "is_directory"
  | "not_regular";

/** A user's path was refused or does not name what the call needs. Message names the path. */
export class WorkspacePathError extends SlotpoolError {
  override name = "WorkspacePathError";
  constructor(
    readonly problem: WorkspacePathProblem,
    readonly path: string,
    message: string,
  ) {
    super(message);
  }
}

export interface FileOwner {
  uid: number;
  gid: number;
}

export interface GuardedEntry {
  /** Open handle on the resolved entry; the caller closes it. */
  handle: FileHandle;
  /** Workspace-relative path of the entry actually opened (symlinks expanded). */
  path: string;
  stat: Stats;
  /** write intent: the file did not exist and was created by this call. */
  created: boolean;
}

export interface ResolveOptions {
  /**
   * read: open whatever the path names (file or directory) read-only.
   * directory: the path must name a directory.
   * write: open a regular file for writing, creating it (not truncating it) when missing.
   */
  intent: "read" | "directory" | "write";
  /** write: create missing parent directories. */
  createParents?: boolean;
  /** chown files and directories this call creates, so slot commands can change them. */
  owner?: FileOwner;
  fileMode?: number;
  dirMode?: number;
}

const q = (p: string) => JSON.stringify(p);

/** `/proc/self/fd/N[/name]`: the path through which the kernel resolves relative to an open fd. */
export function fdPath(handle: FileHandle | number, name?: string): string {
  const fd = typeof handle === "number" ? handle : handle.fd;
  return name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`;
}

/**
 * Splits a user path into components relative to the workspace root. Relative paths are
 * taken as relative to the root; absolute ones must lie under `/workspace`.
 */
export function workspaceComponents(userPath: string): string[] {
  if (userPath.length === 0) {
    throw new WorkspacePathError("invalid", userPath, "path must not be empty");
  }
  if (userPath.includes("\0")) {
    throw new WorkspacePathError("invalid", userPath, `path ${q(userPath)} contains a NUL byte`);
  }
  // Also checked by the request schemas: refused before any directory is created on the way.
  const problem = workspacePathProblem(userPath);
  if (problem) throw new WorkspacePathError(/outside|escapes/.test(problem) ? "outside" : "invalid", userPath, `path ${q(userPath.slice(0, 200))} ${problem}`);
  let rest = userPath;
  if (userPath.startsWith("/")) {
    const parts = userPath.split("/").filter((c) => c !== "" && c !== ".");
    if (parts[0] !== "workspace") {
      throw new WorkspacePathError(
        "outside",
        userPath,
        `path ${q(userPath)} is outside the workspace: absolute paths must be under ${WORKSPACE_MOUNT}/ ` +
          `(or use a path relative to ${WORKSPACE_MOUNT})`,
      );
    }
    rest = parts.slice(1).join("/");
  }
  return rest.split("/").filter((c) => c !== "" && c !== ".");
}

function errnoCode(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err ? String((err as { code: unknown }).code) : undefined;
}

/** A directory of the walk, held open as a plain fd. */
interface Frame {
  fd: number;
  name: string;
}

/**
 * Opens `userPath` inside the workspace according to `options.intent`. Throws
 * WorkspacePathError for every user mistake or refused path; other errors (EIO, EMFILE)
 * propagate.
 */
export async function resolveInWorkspace(
  workspaceDir: string,
  userPath: string,
  options: ResolveOptions,
): Promise<GuardedEntry> {
  const queue = workspaceComponents(userPath);
  const root = await openFd(workspaceDir, fsc.O_RDONLY | fsc.O_DIRECTORY);
  const stack: Frame[] = [{ fd: root, name: "" }];
  let result: GuardedEntry | undefined;
  try {
    let expansions = 0;
    let viaSymlink: string | undefined;
    const relOf = (name?: string) => {
      const names = stack.slice(1).map((f) => f.name);
      if (name !== undefined) names.push(name);
      return names.length === 0 ? "." : names.join("/");
    };
    const escape = (): never => {
      if (viaSymlink !== undefined) {
        throw new WorkspacePathError(
          "symlink_outside",
          userPath,
          `path ${q(userPath)} is refused: symlink ${q(viaSymlink)} leads outside the workspace`,
        );
      }
      throw new WorkspacePathError("outside", userPath, `path ${q(userPath)} escapes the workspace ("..")`);
    };
    const expandSymlink = async (dir: Frame, name: string) => {
      const linkRel = relOf(name);
      if (++expansions > MAX_SYMLINK_EXPANSIONS) {
        throw new WorkspacePathError("symlink_loop", userPath, `path ${q(userPath)} has too many levels of symlinks`);
      }
      let target: string;
      try {
        target = readlinkSync(fdPath(dir.fd, name));
      } catch (err) {
        // A command replaced the symlink since we met it: look the name up again (bounded
        // by the expansion count), or report it gone.
        const code = errnoCode(err);
        if (code === "EINVAL") {
          queue.unshift(name);
          return;
        }
        if (code === "ENOENT") {
          throw new WorkspacePathError("not_found", userPath, `path ${q(userPath)} not found: ${q(linkRel)} does not exist`);
        }
        throw err;
      }
      viaSymlink = linkRel;
      if (target.startsWith("/")) {
        const parts = target.split("/").filter((c) => c !== "" && c !== ".");
        if (parts[0] !== "workspace") {
          throw new WorkspacePathError(
            "symlink_outside",
            userPath,
            `path ${q(userPath)} is refused: symlink ${q(linkRel)} points outside the workspace (to ${q(target)})`,
          );
        }
        while (stack.length > 1) closeSync(stack.pop()!.fd);
        queue.unshift(...parts.slice(1));
      } else {
        queue.unshift(...target.split("/").filter((c) => c !== "" && c !== "."));
      }
    };

    while (queue.length > 0) {
      const name = queue.shift()!;
      const top = stack[stack.length - 1]!;
      if (name === "..") {
        if (stack.length === 1) escape();
        closeSync(stack.pop()!.fd);
        continue;
      }
      const isLast = queue.length === 0;
      if (!isLast || options.intent === "directory") {
        const opened = await openDirectoryStep(top, name, isLast, options, userPath, relOf);
        if (opened === "symlink") {
          await expandSymlink(top, name);
          continue;
        }
        stack.push({ fd: opened, name });
        continue;
      }
      const final = options.intent === "write"
        ? await openFileForWrite(top, name, options, userPath, relOf)
        : await openForRead(top, name, userPath, relOf);
      if (final === "symlink") {
        await expandSymlink(top, name);
        continue;
      }
      result = { ...final, path: relOf(name) };
    }

    if (!result) {
      // The path named a directory already on the stack (".", "/workspace", "a/..", "dir/").
      const rel = relOf();
      if (options.intent === "write") {
        throw new WorkspacePathError("is_directory", userPath, `path ${q(userPath)} is a directory, not a file`);
      }
      // Reopening the magic link of the directory we hold gives that same directory.
      const handle = await open(fdPath(stack[stack.length - 1]!.fd), fsc.O_RDONLY | fsc.O_DIRECTORY);
      result = { handle, path: rel, stat: fstatSync(handle.fd), created: false };
    }
    await verifyInside(root, result, userPath);
    return result;
  } catch (err) {
    if (result) await result.handle.close().catch(() => undefined);
    throw err;
  } finally {
    for (const frame of stack) {
      try {
        closeSync(frame.fd);
      } catch {
        // already closed by the walk
      }
    }
  }
}

async function openDirectoryStep(
  dir: Frame,
  name: string,
  isLast: boolean,
  options: ResolveOptions,
  userPath: string,
  relOf: (name?: string) => string,
): Promise<number | "symlink"> {
  const path = fdPath(dir.fd, name);
  for (let attempt = 0; ; attempt++) {
    try {
      return await openFd(path, fsc.O_RDONLY | fsc.O_DIRECTORY | fsc.O_NOFOLLOW);
    } catch (err) {
      const code = errnoCode(err);
      if (code === "ELOOP") return "symlink";
      if (code === "ENOTDIR") {
        if (isSymlink(dir, name)) return "symlink";
        throw new WorkspacePathError("not_directory", userPath, `path ${q(userPath)}: ${q(relOf(name))} is not a directory`);
      }
      if (code === "ENOENT") {
        if (options.intent === "write" && options.createParents && !isLast && attempt === 0) {
          makeDirectory(dir, name, options);
          continue;
        }
        throw new WorkspacePathError("not_found", userPath, `path ${q(userPath)} not found: ${q(relOf(name))} does not exist`);
      }
      throw err;
    }
  }
}

/** open(2) to a plain fd, off the main thread (no FileHandle: the walk closes it itself). */
function openFd(path: string, flags: number): Promise<number> {
  return new Promise((resolve, reject) => openCallback(path, flags, (err, fd) => (err ? reject(err) : resolve(fd))));
}

function makeDirectory(dir: Frame, name: string, options: ResolveOptions): void {
  try {
    mkdirSync(fdPath(dir.fd, name), options.dirMode ?? 0o755);
  } catch (err) {
    if (errnoCode(err) === "EEXIST") return; // a concurrent command made it; the retry opens it
    throw err;
  }
  if (options.owner) {
    // Open without following, then fchown: the name may have been swapped in between.
    let made: number;
    try {
      made = openSync(fdPath(dir.fd, name), fsc.O_RDONLY | fsc.O_DIRECTORY | fsc.O_NOFOLLOW);
    } catch {
      return;
    }
    try {
      fchownSync(made, options.owner.uid, options.owner.gid);
    } finally {
      closeSync(made);
    }
  }
}

function isSymlink(dir: Frame, name: string): boolean {
  try {
    readlinkSync(fdPath(dir.fd, name));
    return true;
  } catch {
    return false;
  }
}

async function openForRead(
  dir: Frame,
  name: string,
  userPath: string,
  relOf: (name?: string) => string,
): Promise<Omit<GuardedEntry, "path"> | "symlink"> {
  let handle: FileHandle;
  try {
    // O_NONBLOCK: opening a FIFO planted by a command must not hang the server.
    handle = await open(fdPath(dir.fd, name), fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
  } catch (err) {
    const code = errnoCode(err);
    if (code === "ELOOP") return "symlink";
    if (code === "ENOENT") {
      throw new WorkspacePathError("not_found", userPath, `path ${q(userPath)} not found: ${q(relOf(name))} does not exist`);
    }
    if (code === "ENXIO" || code === "EOPNOTSUPP") {
      throw new WorkspacePathError("not_regular", userPath, `path ${q(userPath)} is not a regular file or directory`);
    }
    throw err;
  }
  return { handle, stat: fstatSync(handle.fd), created: false };
}

async function openFileForWrite(
  dir: Frame,
  name: string,
  options: ResolveOptions,
  userPath: string,
  relOf: (name?: string) => string,
): Promise<Omit<GuardedEntry, "path"> | "symlink"> {
  const path = fdPath(dir.fd, name);
  const notRegular = () =>
    new WorkspacePathError("not_regular", userPath, `path ${q(userPath)} exists and is not a regular file`);
  // First try to create it (O_EXCL tells us whether we did, so we chown only our own files),
  // then open an existing one. Never O_TRUNC here: truncation happens after verification.
  try {
    const handle = await open(path, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW | fsc.O_NONBLOCK, options.fileMode ?? 0o644);
    if (options.owner) await handle.chown(options.owner.uid, options.owner.gid);
    return { handle, stat: fstatSync(handle.fd), created: true };
  } catch (err) {
    const code = errnoCode(err);
    if (code === "ELOOP") return "symlink";
    if (code !== "EEXIST") throw err;
  }
  try {
    const handle = await open(path, fsc.O_WRONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
    const stat = fstatSync(handle.fd);
    if (!stat.isFile()) {
      await handle.close();
      throw notRegular();
    }
    return { handle, stat, created: false };
  } catch (err) {
    const code = errnoCode(err);
    if (code === "ELOOP") return "symlink";
    if (code === "EISDIR") {
      throw new WorkspacePathError("is_directory", userPath, `path ${q(userPath)} is a directory, not a file`);
    }
    if (code === "ENXIO") throw notRegular();
    if (code === "ENOENT") {
      throw new WorkspacePathError("not_found", userPath, `path ${q(userPath)}: ${q(relOf(name))} vanished while being written`);
    }
    throw err;
  }
}

/** Last line of defence: the kernel's own idea of where the opened entry lives. */
async function verifyInside(root: number, entry: GuardedEntry, userPath: string): Promise<void> {
  const rootReal = readlinkSync(fdPath(root));
  const real = readlinkSync(fdPath(entry.handle));
  if (real === rootReal || real.startsWith(rootReal.endsWith("/") ? rootReal : rootReal + "/")) return;
  throw new WorkspacePathError("outside", userPath, `path ${q(userPath)} resolved outside the workspace and was refused`);
}

/**
 * Opens one entry of a directory already held open, never following a symlink. Used to
 * walk trees (listing, archiving). Returns undefined when the entry vanished or is a
 * symlink (ELOOP) so the caller can record it without following.
 */
export async function openChild(dir: FileHandle, name: string, flags: number): Promise<FileHandle | undefined> {
  try {
    return await open(fdPath(dir, name), flags | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
  } catch (err) {
    const code = errnoCode(err);
    if (code === "ENOENT" || code === "ELOOP" || code === "ENOTDIR" || code === "ENXIO" || code === "EOPNOTSUPP") return undefined;
    throw err;
  }
}

/** Joins a workspace-relative directory path and an entry name (root is "."). */
export function joinRelative(dir: string, name: string): string {
  return dir === "." ? name : posix.join(dir, name);
}
