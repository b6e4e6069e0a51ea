import { closeSync, constants as fsc, fstatSync, openSync, readFileSync, readlinkSync, type Stats } from "node:fs";

/**
 * Paths inside an image's root as the image sees them (chroot semantics): every component
 * opened relative to the directory before it with O_NOFOLLOW through /proc/self/fd, a symlink
 * expanded by this module (an absolute target from the image's root, `..` never above it), so
 * nothing the image holds can lead the server outside the root it walks.
 */

const MAX_SYMLINKS = 40;

function fd(n: number, name?: string): string {
  return name === undefined ? `/proc/self/fd/${n}` : `/proc/self/fd/${n}/${name}`;
}

/** Where `path` leads inside `rootDir`: an open fd (O_PATH-like, read-only) and its stat, or undefined when it does not exist. */
export function openInRoot(rootDir: string, path: string): { fd: number; stat: Stats } | undefined {
  const root = openSync(rootDir, fsc.O_RDONLY | fsc.O_DIRECTORY);
  const stack: number[] = [root];
  const queue = path.split("/").filter((c) => c !== "" && c !== ".");
  let expansions = 0;
  try {
    while (queue.length > 0) {
      const name = queue.shift()!;
      const top = stack[stack.length - 1]!;
      if (name === "..") {
        if (stack.length > 1) closeSync(stack.pop()!);
        continue;
      }
      let next: number;
      try {
        next = openSync(fd(top, name), fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK | (queue.length > 0 ? fsc.O_DIRECTORY : 0));
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code;
        if (code === "ELOOP" || code === "ENOTDIR") {
          let target: string;
          try {
            target = readlinkSync(fd(top, name));
          } catch {
            return undefined;
          }
          if (++expansions > MAX_SYMLINKS) return undefined;
          if (target.startsWith("/")) while (stack.length > 1) closeSync(stack.pop()!);
          queue.unshift(...target.split("/").filter((c) => c !== "" && c !== "."));
          continue;
        }
        if (code === "ENOENT" || code === "ENXIO" || code === "EACCES") return undefined;
        throw err;
      }
      stack.push(next);
    }
    const last = stack.pop()!;
    return { fd: last, stat: fstatSync(last) };
  } finally {
    for (const f of stack) closeSync(f);
  }
}

/** The text of a regular file inside the root (at most `maxBytes`), or undefined. */
export function readInRoot(rootDir: string, path: string, maxBytes = 1 << 20): string | undefined {
  const opened = openInRoot(rootDir, path);
  if (!opened) return undefined;
  try {
    if (!opened.stat.isFile() || opened.stat.size > maxBytes) return undefined;
    return readFileSync(opened.fd, "utf8");
  } finally {
    closeSync(opened.fd);
  }
}

/**
 * The stat of each existing prefix of `dir` inside the root, until the first that is missing
 * (or not a directory); `symlink` when a prefix is a symlink (a layer must not shadow it).
 */
export function existingPrefixes(rootDir: string, dir: string): { parts: string[]; existing: Stats[]; symlink: boolean } {
  const parts = dir.split("/").filter((c) => c !== "" && c !== "." && c !== "..");
  const existing: Stats[] = [];
  let symlink = false;
  for (let i = 1; i <= parts.length; i++) {
    const parent = openInRoot(rootDir, parts.slice(0, i - 1).join("/"));
    if (!parent) break;
    try {
      readlinkSync(fd(parent.fd, parts[i - 1]!));
      symlink = true;
    } catch {
      /* not a symlink (or missing) */
    } finally {
      closeSync(parent.fd);
    }
    if (symlink) break;
    const opened = openInRoot(rootDir, parts.slice(0, i).join("/"));
    if (!opened) break;
    closeSync(opened.fd);
    if (!opened.stat.isDirectory()) break;
    existing.push(opened.stat);
  }
  return { parts, existing, symlink };
}
