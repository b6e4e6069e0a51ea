import { statSync } from "node:fs";
import { dirname, resolve } from "node:path";

/**
 * Can another uid reach a path? A root sandbox server runs each slot as its own uid
 * (20000 + i), and those uids must walk down to the slot's workspace, the state files and the
 * spawner binary. A clone under a private directory (root's home /root is 0700, so is every
 * `mktemp -d`) breaks that walk. Shared by the sandbox server (which refuses to start on an
 * unreachable data dir) and the local provisioner (which picks a reachable base for the data
 * dirs it makes).
 */

export interface BlockedDirectory {
  /** The first directory on the way that others cannot search. */
  dir: string;
  /** Its permission bits (e.g. 0o700). */
  mode: number;
}

/**
 * The first directory from `/` down to `path` (itself included when it is a directory) that a
 * uid which is neither its owner nor in its group cannot search (no `o+x`), or undefined when
 * the whole way is open. Judged from the mode bits only (ACLs are not consulted), which errs
 * on the side of refusing.
 */
export function blockedForOthers(path: string): BlockedDirectory | undefined {
  const target = resolve(path);
  const chain: string[] = [];
  for (let d = target; ; d = dirname(d)) {
    chain.unshift(d);
    if (dirname(d) === d) break;
  }
  for (const dir of chain) {
    let st;
    try {
      st = statSync(dir);
    } catch {
      return undefined; // not there yet: whoever creates it decides its mode
    }
    if (!st.isDirectory()) continue;
    if ((st.mode & 0o001) === 0) return { dir, mode: st.mode & 0o7777 };
  }
  return undefined;
}

/** `0o700` → "0700". */
export function octal(mode: number): string {
  return mode.toString(8).padStart(4, "0");
}
