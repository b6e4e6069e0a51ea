import { closeSync, constants as fsc, fchownSync, fstatSync, lstatSync, openSync, readSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import { SlotpoolError } from "../../protocol/errors.js";

/**
 * The server's reads and writes of single files a slot can reach (its terminal's session
 * files): `dir` is a directory whose own path the slot cannot change (no parent of it is in
 * the slot's reach), so only the last name is the slot's, and that is opened with O_NOFOLLOW (a
 * planted symlink fails with ELOOP instead of leading to a host file) and O_NONBLOCK (a
 * planted FIFO cannot hang the server). What is opened must be a regular file with one
 * link (a hard link to another of the uid's files is refused) and of the expected owner;
 * reads are bounded. Nothing here ever chowns or truncates by name.
 */

/** A file of a slot the server refused to read or write (code SLOT_FILE_REFUSED): the reason says what it was. */
export class SlotFileRefusedError extends SlotpoolError {
  override name = "SlotFileRefusedError";
  constructor(
    readonly path: string,
    reason: string,
  ) {
    super(`the server refused ${path}: ${reason}`);
  }
}

export interface Ids {
  uid: number;
  gid: number;
}

/**
 * Reads `dir/name` (at most `maxBytes`); undefined when it does not exist. Throws
 * SlotFileRefusedError when it is a symlink, not a regular file, has other links, is not
 * `owner`'s (where given), or is larger than `maxBytes`.
 */
export function readSlotFile(dir: string, name: string, maxBytes: number, owner?: Ids): string | undefined {
  const path = join(dir, name);
  let fd: number;
  try {
    fd = openSync(path, fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK | fsc.O_NOCTTY);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOENT") return undefined;
    if (code === "ELOOP") throw new SlotFileRefusedError(path, "it is a symbolic link (never followed)");
    throw err;
  }
  try {
    checkEntry(fd, path, owner);
    const buf = Buffer.allocUnsafe(Math.min(maxBytes + 1, 1 << 20));
    const parts: Buffer[] = [];
    let total = 0;
    for (;;) {
      const n = readSync(fd, buf, 0, buf.length, null);
      if (n === 0) break;
      total += n;
      if (total > maxBytes) throw new SlotFileRefusedError(path, `it is larger than ${maxBytes} bytes`);
      parts.push(Buffer.from(buf.subarray(0, n)));
    }
    return Buffer.concat(parts).toString("utf8");
  } finally {
    closeSync(fd);
  }
}

/**
 * Creates `dir/name` with `data` (mode 0600, given to `owner` through its fd); false when
 * something is already there (whatever it is: never opened, never truncated).
 */
export function createSlotFile(dir: string, name: string, data: string, owner?: Ids): boolean {
  const path = join(dir, name);
  let fd: number;
  try {
    fd = openSync(path, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW | fsc.O_NONBLOCK | fsc.O_NOCTTY, 0o600);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw err;
  }
  try {
    if (owner) fchownSync(fd, owner.uid, owner.gid);
    const bytes = Buffer.from(data);
    for (let off = 0; off < bytes.length; ) off += writeSync(fd, bytes, off, bytes.length - off);
  } finally {
    closeSync(fd);
  }
  return true;
}

/**
 * Removes `dir/name` unless it is a directory (a symlink or file the slot put where a mount
 * point goes: bubblewrap cannot mount on a dangling symlink). unlink never follows the name.
 */
export function clearMountPoint(dir: string, name: string): void {
  const path = join(dir, name);
  try {
    if (!lstatSync(path).isDirectory()) unlinkSync(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
}

function checkEntry(fd: number, path: string, owner: Ids | undefined): void {
  const st = fstatSync(fd);
  if (!st.isFile()) throw new SlotFileRefusedError(path, "it is not a regular file");
  if (st.nlink !== 1) throw new SlotFileRefusedError(path, `it has ${st.nlink} hard links (a link to another file is never read)`);
  if (owner && st.uid !== owner.uid) throw new SlotFileRefusedError(path, `it belongs to uid ${st.uid}, not the slot's ${owner.uid}`);
}
