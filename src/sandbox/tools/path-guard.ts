import { closeSync, constants as fsc, fchownSync, fstatSync, mkdirSync, openSync, readlinkSync, type Stats } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { posix } from "node:path";
import { SlotpoolError } from "../../protocol/errors.js";
import { slotPathProblem, workspacePathProblem } from "../../protocol/sandbox.js";

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
 * The walk is synchronous (resolveInWorkspaceSync): directories are held as plain fds and
 * every step (open of one name with O_NOFOLLOW, fstat, readlink of a /proc magic link,
 * mkdir of a missing parent) takes a few microseconds on the slot's local disk, where a
 * thread-pool round trip per step cost more than the step (a write_file was 7 round trips,
 * the bulk of its time under load). Nothing in the walk can block: directory steps open
 * with O_DIRECTORY and the final entry with O_NONBLOCK, so a planted FIFO is refused, not
 * waited on. resolveInWorkspace hands the verified entry out as a FileHandle instead.
 *
 * Paths returned to callers are workspace-relative ("dir/file.txt", "." for the root):
 * host paths never leave this module.
 *
 * A slot whose root is an image (src/sandbox/images/) is walked the same way with a
 * `RootScope`: its whole root is the scope (`/` is the image's root, an absolute path or
 * symlink target starts there, `..` at the root stays at the root, as the kernel does in a
 * chroot), a relative path starts at the image's working directory, and paths come back
 * absolute ("/etc/hosts").
 */

/** The path commands see for the workspace root. */
export const WORKSPACE_MOUNT = "/workspace";

/** An image root as the scope of a walk: its host dir and the working directory relative paths start from (absolute, as the image sees it). */
export interface RootScope {
  dir: string;
  cwd: string;
}

/** What a walk may reach: a workspace (its host dir) or an image's whole root. */
export type PathScope = string | RootScope;

function scopeDir(scope: PathScope): string {
  return typeof scope === "string" ? scope : scope.dir;
}
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
export function workspaceComponents(userPath: string, scope?: PathScope): string[] {
  if (scope !== undefined && typeof scope !== "string") return rootComponents(userPath, scope);
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

/** An image root's components: absolute from its root, relative from its working directory (`..` resolved by the walk). */
function rootComponents(userPath: string, scope: RootScope): string[] {
  if (userPath.length === 0) throw new WorkspacePathError("invalid", userPath, "path must not be empty");
  if (userPath.includes("\0")) throw new WorkspacePathError("invalid", userPath, `path ${q(userPath)} contains a NUL byte`);
  const problem = slotPathProblem(userPath);
  if (problem) throw new WorkspacePathError("invalid", userPath, `path ${q(userPath.slice(0, 200))} ${problem}`);
  const full = userPath.startsWith("/") ? userPath : `${scope.cwd}/${userPath}`;
  return full.split("/").filter((c) => c !== "" && c !== ".");
}

function errnoCode(err: unknown): string | undefined {
  return typeof err === "object" && err !== null && "code" in err ? String((err as { code: unknown }).code) : undefined;
}

/** A directory of the walk, held open as a plain fd. */
interface Frame {
  fd: number;
  name: string;
}

/** A resolved entry as a plain fd (resolveInWorkspaceSync); the caller closes it (closeSync). */
export interface GuardedFd {
  fd: number;
  /** Workspace-relative path of the entry actually opened (symlinks expanded). */
  path: string;
  stat: Stats;
  /** write intent: the file did not exist and was created by this call. */
  created: boolean;
}

/**
 * Opens `userPath` inside the workspace according to `options.intent`, as a FileHandle.
 * Throws WorkspacePathError for every user mistake or refused path; other errors (EIO,
 * EMFILE) propagate. The walk is resolveInWorkspaceSync's; the verified fd is then reopened
 * through its /proc magic link (the same open file, not a new lookup by name) as a
 * FileHandle, for callers that stream large files or trees (artifacts).
 */
export async function resolveInWorkspace(
  workspaceDir: PathScope,
  userPath: string,
  options: ResolveOptions,
): Promise<GuardedEntry> {
  const entry = resolveInWorkspaceSync(workspaceDir, userPath, options);
  try {
    const flags = options.intent === "write" ? fsc.O_WRONLY | fsc.O_NONBLOCK : options.intent === "directory" ? fsc.O_RDONLY | fsc.O_DIRECTORY : fsc.O_RDONLY | fsc.O_NONBLOCK;
    const handle = await open(fdPath(entry.fd), flags);
    return { handle, path: entry.path, stat: entry.stat, created: entry.created };
  } finally {
    closeSync(entry.fd);
  }
}

/**
 * The walk itself, synchronous: every step is an open/fstat/readlink/mkdir of a single name
 * relative to an fd already held, a few microseconds each on the slot's local disk, and a
 * planted FIFO cannot block it (directory steps use O_DIRECTORY, the final entry
 * O_NONBLOCK). The file tools' hot path (perf, issue 22): no thread-pool round trip per
 * step. Same refusals and errors as resolveInWorkspace.
 */
export function resolveInWorkspaceSync(
  scope: PathScope,
  userPath: string,
  options: ResolveOptions,
): GuardedFd {
  const imageRoot = typeof scope !== "string";
  const queue = workspaceComponents(userPath, scope);
  const root = openSync(scopeDir(scope), fsc.O_RDONLY | fsc.O_DIRECTORY);
  const stack: Frame[] = [{ fd: root, name: "" }];
  let result: GuardedFd | undefined;
  try {
    let expansions = 0;
    let viaSymlink: string | undefined;
    const relOf = (name?: string) => {
      const names = stack.slice(1).map((f) => f.name);
      if (name !== undefined) names.push(name);
      if (imageRoot) return "/" + names.join("/");
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
    const expandSymlink = (dir: Frame, name: string): void => {
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
      if (target.startsWith("/") && imageRoot) {
        // The image's own absolute link (/lib -> /usr/lib): from its root.
        while (stack.length > 1) closeSync(stack.pop()!.fd);
        queue.unshift(...target.split("/").filter((c) => c !== "" && c !== "."));
      } else if (target.startsWith("/")) {
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
        // At an image's root, `..` is the root itself (as in a chroot).
        if (stack.length === 1 && imageRoot) continue;
        if (stack.length === 1) escape();
        closeSync(stack.pop()!.fd);
        continue;
      }
      const isLast = queue.length === 0;
      if (!isLast || options.intent === "directory") {
        const opened = openDirectoryStep(top, name, isLast, options, userPath, relOf);
        if (opened === "symlink") {
          expandSymlink(top, name);
          continue;
        }
        stack.push({ fd: opened, name });
        continue;
      }
      const final = options.intent === "write"
        ? openFileForWrite(top, name, options, userPath, relOf)
        : openForRead(top, name, userPath, relOf);
      if (final === "symlink") {
        expandSymlink(top, name);
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
      const fd = openSync(fdPath(stack[stack.length - 1]!.fd), fsc.O_RDONLY | fsc.O_DIRECTORY);
      result = { fd, path: rel, stat: fstatSync(fd), created: false };
    }
    verifyInside(root, result.fd, userPath);
    return result;
  } catch (err) {
    if (result) {
      try {
        closeSync(result.fd);
      } catch {
        // already closed
      }
    }
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

function openDirectoryStep(
  dir: Frame,
  name: string,
  isLast: boolean,
  options: ResolveOptions,
  userPath: string,
  relOf: (name?: string) => string,
): number | "symlink" {
  const path = fdPath(dir.fd, name);
  for (let attempt = 0; ; attempt++) {
    try {
      return openSync(path, fsc.O_RDONLY | fsc.O_DIRECTORY | fsc.O_NOFOLLOW);
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

function openForRead(
  dir: Frame,
  name: string,
  userPath: string,
  relOf: (name?: string) => string,
): Omit<GuardedFd, "path"> | "symlink" {
  let fd: number;
  try {
    // O_NONBLOCK: opening a FIFO planted by a command must not hang the server.
    fd = openSync(fdPath(dir.fd, name), fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
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
  return { fd, stat: fstatSync(fd), created: false };
}

function openFileForWrite(
  dir: Frame,
  name: string,
  options: ResolveOptions,
  userPath: string,
  relOf: (name?: string) => string,
): Omit<GuardedFd, "path"> | "symlink" {
  const path = fdPath(dir.fd, name);
  const notRegular = () =>
    new WorkspacePathError("not_regular", userPath, `path ${q(userPath)} exists and is not a regular file`);
  // First try to create it (O_EXCL tells us whether we did, so we chown only our own files),
  // then open an existing one. Never O_TRUNC here: truncation happens after verification.
  try {
    const fd = openSync(path, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW | fsc.O_NONBLOCK, options.fileMode ?? 0o644);
    try {
      if (options.owner) fchownSync(fd, options.owner.uid, options.owner.gid);
      return { fd, stat: fstatSync(fd), created: true };
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  } catch (err) {
    const code = errnoCode(err);
    if (code === "ELOOP") return "symlink";
    if (code !== "EEXIST") throw err;
  }
  try {
    const fd = openSync(path, fsc.O_WRONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
    const stat = fstatSync(fd);
    if (!stat.isFile()) {
      closeSync(fd);
      throw notRegular();
    }
    return { fd, stat, created: false };
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
function verifyInside(root: number, fd: number, userPath: string): void {
  const rootReal = readlinkSync(fdPath(root));
  const real = readlinkSync(fdPath(fd));
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
