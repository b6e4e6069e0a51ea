import { posix } from "node:path";
import { E2bApiError } from "./errors.js";

/**
 * E2B code works in /home/user (the default user's home and working directory). In a slot
 * that directory IS the workspace: every command runs with the workspace mounted at both
 * /home/user and /workspace, and relative paths are relative to /home/user. Paths the
 * filesystem API and /files accept must lie in the workspace (either name); anything else
 * is refused with a 400 naming the path, before anything runs.
 */
export const E2B_HOME = "/home/user";
const ROOTS = [E2B_HOME, "/workspace"];

/** The absolute path (under /home/user or /workspace) a request's path names, or a 400. */
export function workspacePath(path: string | undefined, field = "path"): string {
  if (path === undefined || path === "") throw new E2bApiError(400, `${field} is required`, field);
  if (path.includes("\0")) throw new E2bApiError(400, `${field} must not contain NUL bytes`, field);
  const abs = posix.normalize(path.startsWith("/") ? path : posix.join(E2B_HOME, path)).replace(/\/+$/, "") || "/";
  if (!ROOTS.some((r) => abs === r || abs.startsWith(r + "/"))) {
    throw new E2bApiError(400, `${field} '${path}' is outside the sandbox's workspace: slotpool sandboxes offer /home/user (also /workspace) and paths relative to it`, field);
  }
  return abs;
}

/** A working directory for a command: any absolute path inside the sandbox, relative ones under /home/user. */
export function commandCwd(cwd: string | undefined): string {
  if (!cwd) return E2B_HOME;
  return cwd.startsWith("/") ? posix.normalize(cwd) : posix.join(E2B_HOME, cwd);
}
