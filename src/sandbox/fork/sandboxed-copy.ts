import { spawn } from "node:child_process";
import { closeSync, constants as fsc, fchownSync, openSync } from "node:fs";
import { withoutCapabilities } from "../../host/mount-namespace.js";
import { HttpError } from "../../http/errors.js";
import { SlotpoolError } from "../../protocol/errors.js";
import { bwrapArgs, READ_ONLY_ROOT } from "../isolation/isolation.js";
import { filterArgs, sendFilter, type SlotFilter } from "../isolation/seccomp.js";

/**
 * A copy-mode fork's copy of the parent's workspace, made inside a sandbox like the parent's
 * own and as the parent's uid (issue 28): the parent's jobs keep running while it copies, and
 * a parent that swaps a directory for a symlink mid-copy (renameat2 RENAME_EXCHANGE in a
 * loop) makes `cp` follow it. Run as root on the host, `cp` then copied root-only host files
 * into the child; here the symlink leads only to what the parent's own commands see (the
 * sandbox's read-only system view), read with the parent's own rights. The destination is
 * inherited as an open directory fd (3) and written through `/proc/self/fd/3/`: the parent's
 * uid needs no path to it (it lies on the child's disk or in the server's state dir, where
 * it may not even traverse; bubblewrap's `--bind-fd` resolves the fd's path again and fails
 * there), and nothing else of the host is mounted in.
 */
export interface SandboxedCopy {
  bwrapPath: string;
  /** The parent's workspace (host path), bound at /workspace as in the parent's sandbox. */
  from: string;
  /** An empty directory the copy goes into (the server's; writable by `owner`). */
  to: string;
  /** The parent's uid and gid (root server); undefined: the server's own. */
  owner: { uid: number; gid: number } | undefined;
  identity: { passwd: string; group: string } | undefined;
  /** The slots' seccomp filter: the copy runs the parent's tools on the parent's tree, so it gets the same filter. */
  filter: SlotFilter | null | undefined;
  /** Called with the sandbox's pid (the parent's cgroup takes it). */
  onSpawn?: (pid: number) => void;
  timeoutMs: number;
}

/** The copy inside the parent's sandbox failed (code FORK_COPY_FAILED); the message is cp's or the timeout. */
export class ForkCopyFailedError extends SlotpoolError {
  override name = "ForkCopyFailedError";
}

/**
 * The parent's tree changed under the copy (HTTP 409, code FORK_TREE_CHANGED): a name cp had
 * just listed was gone, no longer a directory, or a symlink loop when cp reached it. The
 * parent's own processes did that (a background job, or a parent swapping directories for
 * symlinks, issue 28); nothing changed in the parent or any child, so the client may retry.
 */
export class ForkTreeChangedError extends HttpError {
  override name = "ForkTreeChangedError";
  constructor(
    /** cp's first complaint, e.g. "'/workspace/./d5': No such file or directory". */
    readonly detail: string,
    parentId?: string,
  ) {
    super(
      409,
      `${parentId ? `fork of ${parentId}` : "the fork"} refused: the parent's workspace changed while it was being copied (copy mode, no per-slot disk: ${detail}). Nothing changed in the parent or any child; stop the parent's processes that change its files (or wait for them), then fork again`,
      "slot_id",
    );
  }
}

/**
 * cp's complaints that mean a source name changed between cp listing it and reaching it: gone,
 * no longer a directory, a symlink loop, or a symlink turned into something else (readlink:
 * EINVAL), or a type that changed between two entries of one name.
 */
const CHANGED = [
  /: (No such file or directory|Not a directory|Too many levels of symbolic links)$/,
  /^cp: cannot read symbolic link '.*': Invalid argument$/,
  /^cp: cannot overwrite (non-)?directory '.*' with (non-)?directory '.*'$/,
];

/**
 * cp's first complaint if every complaint is about a source path that changed under it; else
 * undefined. Whole lines only (the last, unterminated piece may be cut by the stderr cap).
 */
export function treeChangedDetail(stderr: string, sourcePrefix: string): string | undefined {
  const lines = stderr.split("\n").slice(0, -1).map((l) => l.trim()).filter(Boolean);
  if (lines.length === 0) return undefined;
  const quoted = `'${sourcePrefix}`;
  for (const l of lines) if (!l.startsWith("cp: ") || !l.includes(quoted) || !CHANGED.some((re) => re.test(l))) return undefined;
  return lines[0]!.slice("cp: ".length);
}

/** The destination as the copy sees it: its inherited fd 3 (a magic link: no path walk to the dir). */
const DEST = "/proc/self/fd/3/";
/** bubblewrap reads the seccomp program from this fd (fd 3 is the destination). */
const FILTER_FD = 4;

/**
 * Copies `from` into `to` as `owner` (given `to`, through its fd, first). Without bubblewrap
 * (the server runs slots unsandboxed, by the operator's choice) the copy still runs as the
 * parent's uid, with the same rights as the parent's commands.
 */
export async function copyInSandbox(c: Omit<SandboxedCopy, "bwrapPath"> & { bwrapPath: string | null }): Promise<void> {
  const destFd = openSync(c.to, fsc.O_RDONLY | fsc.O_DIRECTORY | fsc.O_NOFOLLOW);
  try {
    if (c.owner) fchownSync(destFd, c.owner.uid, c.owner.gid);
    const source = c.bwrapPath === null ? `${c.from}/.` : "/workspace/.";
    const cmd = c.bwrapPath === null ? { file: "cp", args: ["-a", "--reflink=auto", source, DEST] } : withoutCapabilities(c.bwrapPath, [
      ...bwrapArgs({ workspaceDir: c.from, allowNetwork: false, ...(c.identity ? { identity: c.identity } : {}) }),
      ...filterArgs(c.filter, FILTER_FD),
      ...READ_ONLY_ROOT,
      // cp's complaints in plain ASCII quotes, whatever the server's locale (treeChangedDetail reads them).
      "--setenv", "LC_ALL", "C",
      "--", "cp", "-a", "--reflink=auto", source, DEST,
    ]);
    const child = spawn(cmd.file, cmd.args, {
      stdio: ["ignore", "ignore", "pipe", destFd, c.bwrapPath !== null && c.filter ? "pipe" : "ignore"],
      ...(c.owner ? { uid: c.owner.uid, gid: c.owner.gid } : {}),
      env: { ...process.env, LC_ALL: "C" },
    });
    if (c.bwrapPath !== null) sendFilter(child.stdio[FILTER_FD] as NodeJS.WritableStream | null, c.filter);
    if (child.pid !== undefined) c.onSpawn?.(child.pid);
    let stderr = "";
    child.stderr!.on("data", (d: Buffer) => {
      if (stderr.length < 4096) stderr += d.toString("utf8");
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), c.timeoutMs);
    const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((resolve, reject) => {
      child.once("error", reject);
      child.once("close", (code, signal) => resolve([code, signal]));
    }).finally(() => clearTimeout(timer));
    if (code !== 0) {
      const changed = signal === null ? treeChangedDetail(stderr, source) : undefined;
      if (changed !== undefined) throw new ForkTreeChangedError(changed);
      const why = signal === "SIGKILL" ? `it took longer than ${c.timeoutMs / 1000} s` : stderr.trim().split("\n")[0] || `exit ${code ?? signal}`;
      throw new ForkCopyFailedError(`copying the parent's workspace inside its sandbox failed: ${why}`);
    }
  } finally {
    closeSync(destFd);
  }
}
