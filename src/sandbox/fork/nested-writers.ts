import { readdirSync, readFileSync, readlinkSync } from "node:fs";
import { SlotpoolError } from "../../protocol/errors.js";
import { descendants } from "../run/process-barrier.js";

/**
 * The fork seal for mount namespaces below a slot's own (issue 28). The seal makes the old
 * workspace mount read-only in each namespace the server started for the slot; a process
 * that made a mount namespace of its own (`unshare -Urm`, allowed in a user namespace the
 * slot creates) holds a copy of that mount the seal never reaches, and kept writing into the
 * layer the children read. Such copies can be anywhere in the nested namespace's tree
 * (moved, stacked over), so they are not sealed one by one: after the seal, every process
 * below the slot's namespaces that is in another mount namespace, or holds an fd of one (it
 * could enter it again), is stopped (SIGKILL). With neither left, nothing can enter those
 * copies any more. Namespaces made after the seal copy the sealed, read-only mount (inside a
 * user namespace it is locked read-only), so a few rounds reach a fixed point; a slot that
 * keeps escaping them gets NestedWritersError (the fork then stops every process of the
 * parent).
 *
 * Not covered (docs/security-model.md): a file or directory fd opened in a nested namespace
 * and passed (SCM_RIGHTS) to a process of the slot's own namespace before the nested one
 * ended. Checking every fd's mount (fdinfo `mnt_id` against each namespace's mountinfo, and
 * every working directory and root) was measured at 15-90 ms per fork on a loaded 2-core
 * box against about 1 ms for this scan, far past the fork's cost budget; refusing nested
 * user namespaces (the seccomp layer) closes it.
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
      for (const pid of descendants(root)) if (writesOutside(pid, allowed)) found.push(pid);
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


/** Whether `pid` is in a mount namespace other than `allowed`, or holds an fd of one. */
function writesOutside(pid: number, allowed: string): boolean {
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
    if (target.startsWith("mnt:[") && target !== allowed) return true;
  }
  return false;
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
