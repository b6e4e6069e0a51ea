import { posix } from "node:path";
import { E2bApiError } from "./errors.js";

/**
 * E2B code works in /home/user (the default user's home and working directory). In a slot
 * that directory IS the workspace: every command runs with the workspace mounted at both
 * /home/user and /workspace, and relative paths are relative to /home/user. The filesystem
 * API and /files take any absolute path, as E2B's do: their operations run inside the slot's
 * sandbox as the slot's uid, so they reach exactly what the sandbox's commands reach (the
 * workspace, /tmp, /var/tmp, /dev/shm writable; the rest of the image read-only) and fail
 * where a command would.
 */
export const E2B_HOME = "/home/user";

/** The absolute, normalized path inside the sandbox a request's path names (relative ones under /home/user), or a 400. */
export function workspacePath(path: string | undefined, field = "path"): string {
  if (path === undefined || path === "") throw new E2bApiError(400, `${field} is required`, field);
  if (path.includes("\0")) throw new E2bApiError(400, `${field} must not contain NUL bytes`, field);
  return posix.normalize(path.startsWith("/") ? path : posix.join(E2B_HOME, path)).replace(/\/+$/, "") || "/";
}

/**
 * A working directory for a command: any absolute path inside the sandbox, relative ones under
 * /home/user; none given: `workdir` (a task image's WorkingDir, as E2B starts a template's
 * commands in its workdir), else /home/user.
 */
export function commandCwd(cwd: string | undefined, workdir?: string): string {
  if (!cwd) return workdir ?? E2B_HOME;
  return cwd.startsWith("/") ? posix.normalize(cwd) : posix.join(E2B_HOME, cwd);
}
