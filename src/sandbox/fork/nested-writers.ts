import { closeSync, constants as fsc, openSync, readdirSync, readFileSync, readlinkSync } from "node:fs";
import { SlotpoolError } from "../../protocol/errors.js";

/**
 * The fork seal for mount namespaces below a slot's own (issue 28). The seal makes the old
 * workspace mount read-only in each namespace the server started for the slot; a process
 * that made a mount namespace of its own (`unshare -Urm`, allowed in a user namespace the
 * slot creates) holds a copy of that mount the seal never reaches, and kept writing into the
 * layer the children read. Such copies can be anywhere in the nested namespace's tree (moved,
 * stacked over, reached through an fd passed to another process), so they are not sealed one
 * by one: after the seal, every process below the slot's namespaces that could still write
 * through a mount that is not one of its namespace's own is stopped (SIGKILL) — a process in
 * another mount namespace, one holding an fd of another mount namespace, or one with an open
 * file, working directory or root on a mount its namespace does not hold. With no process and
 * no fd left, nothing refers to those copies any more. Namespaces made after the seal copy
 * the sealed, read-only mount (and inside a user namespace it is locked read-only), so a few
 * rounds reach a fixed point; a slot that keeps escaping them gets NestedWritersError (the
 * fork then stops every process of the parent).
 */

/** Rounds of scan and kill before the fork gives up. */
const MAX_ROUNDS = 5;
/** How long a round waits for the processes it killed to be gone. */
const KILL_WAIT_MS = 2_000;

/** The slot kept starting writers outside the sealed mount (code NESTED_WRITERS). */
export class NestedWritersError extends SlotpoolError {
  override name = "NestedWritersError";
}

/**
 * Stops every process below `roots` (each a process in one of the slot's own namespaces,
 * whose mount namespace is the allowed one for its subtree) that could write through a copy
 * of an old mount. Resolves with the number of processes stopped.
 */
export async function stopNestedWriters(roots: readonly number[]): Promise<number> {
  let stopped = 0;
  for (let round = 0; round < MAX_ROUNDS; round++) {
    const found: number[] = [];
    for (const root of roots) {
      const allowed = namespaceOf(root);
      if (allowed === undefined || allowed === "unknown") continue; // that namespace is gone: nothing below it
      const mounts = mountIds(root);
      for (const pid of descendants(root)) if (writesOutside(pid, allowed, mounts)) found.push(pid);
    }
    if (found.length === 0) return stopped;
    for (const pid of found) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        /* already gone */
      }
    }
    stopped += found.length;
    await gone(found, KILL_WAIT_MS);
  }
  throw new NestedWritersError(
    `the slot keeps starting processes in mount namespaces of its own (${MAX_ROUNDS} rounds of stopping them did not end it): they would keep writing into what the fork's children read`,
  );
}

/** `pid`'s mount namespace; undefined once it exited; "unknown" where the server may not look (never taken as allowed). */
function namespaceOf(pid: number): string | undefined {
  try {
    return readlinkSync(`/proc/${pid}/ns/mnt`);
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ENOENT" ? undefined : "unknown";
  }
}

/** The ids of the mounts in `pid`'s mount namespace (first field of each mountinfo line). */
function mountIds(pid: number): Set<string> {
  const ids = new Set<string>();
  try {
    for (const line of readFileSync(`/proc/${pid}/mountinfo`, "utf8").split("\n")) {
      const sp = line.indexOf(" ");
      if (sp > 0) ids.add(line.slice(0, sp));
    }
  } catch {
    /* gone */
  }
  return ids;
}

/** Every process below `root` (not `root` itself), through /proc/<pid>/task/<tid>/children. */
function descendants(root: number): number[] {
  const out: number[] = [];
  const queue = [root];
  const seen = new Set<number>([root]);
  while (queue.length > 0) {
    const pid = queue.shift()!;
    let tids: string[];
    try {
      tids = readdirSync(`/proc/${pid}/task`);
    } catch {
      continue;
    }
    for (const tid of tids) {
      let text: string;
      try {
        text = readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8");
      } catch {
        continue;
      }
      for (const c of text.split(" ")) {
        const child = Number(c);
        if (!child || seen.has(child)) continue;
        seen.add(child);
        out.push(child);
        queue.push(child);
      }
    }
  }
  return out;
}

/** Whether `pid` could write through a mount that is not one of `allowed`'s own. */
function writesOutside(pid: number, allowed: string, mounts: Set<string>): boolean {
  const ns = namespaceOf(pid);
  if (ns === undefined) return false; // exited
  if (ns !== allowed) return true;
  let fds: string[];
  try {
    fds = readdirSync(`/proc/${pid}/fd`);
  } catch {
    return false;
  }
  for (const fd of fds) {
    let target: string;
    try {
      target = readlinkSync(`/proc/${pid}/fd/${fd}`);
    } catch {
      continue;
    }
    if (target.startsWith("mnt:[")) {
      if (target !== allowed) return true;
      continue;
    }
    // Pipes, sockets, anonymous inodes live on internal mounts no namespace lists.
    if (!target.startsWith("/")) continue;
    const id = fdMountId(`/proc/${pid}/fdinfo/${fd}`);
    if (id !== undefined && !mounts.has(id) && !target.startsWith("/memfd:")) return true;
  }
  for (const link of ["cwd", "root"]) {
    const id = dirMountId(`/proc/${pid}/${link}`);
    if (id !== undefined && !mounts.has(id)) return true;
  }
  return false;
}

function fdMountId(fdinfo: string): string | undefined {
  try {
    return /^mnt_id:\s*(\d+)/m.exec(readFileSync(fdinfo, "utf8"))?.[1];
  } catch {
    return undefined;
  }
}

/** The mount of a process's working directory or root: opened (a directory: never blocks) and read back from our own fdinfo. */
function dirMountId(link: string): string | undefined {
  let fd: number;
  try {
    fd = openSync(link, fsc.O_RDONLY | fsc.O_DIRECTORY);
  } catch {
    return undefined;
  }
  try {
    return fdMountId(`/proc/self/fdinfo/${fd}`);
  } finally {
    closeSync(fd);
  }
}

async function gone(pids: number[], boundMs: number): Promise<void> {
  const end = Date.now() + boundMs;
  for (;;) {
    const alive = pids.filter((p) => {
      try {
        // A zombie is gone for our purpose: its fds and mounts are released.
        return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${p}/stat`, "utf8"));
      } catch {
        return false;
      }
    });
    if (alive.length === 0 || Date.now() > end) return;
    await new Promise((r) => setTimeout(r, 10));
  }
}
