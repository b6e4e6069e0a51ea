import { EventType } from "./gen/filesystem/filesystem_pb.js";
import { E2B_HOME } from "./paths.js";
import type { E2bSandbox } from "./sandboxes.js";
import type { ProcessStream } from "./slot-processes.js";

/**
 * Directory watching for envd's `WatchDir` and watcher RPCs, by polling: one process in the
 * sandbox's slot lists the directory (`find -printf`) every POLL_S seconds, and successive
 * listings are compared here. A new entry is a create, a changed size or mtime a write, a
 * ctime later than the mtime a chmod (an attribute change after the data's), a vanished one
 * a remove (a rename shows as remove + create). Polling, not inotify: slots
 * have no inotify tool, and a listing sees exactly what the sandbox's commands see.
 */

const POLL_S = 0.25;
const NOT_A_DIR = 45;
const SNAPSHOT_END = "\u0001";

export interface WatchEvent {
  /** Path relative to the watched directory. */
  name: string;
  type: EventType;
}

interface Stat {
  type: string;
  mtime: string;
  size: string;
  ctime: string;
}

type Listing = Map<string, Stat>;

/**
 * An attribute change after the last write (chmod, chown, xattrs): the inode changed later than
 * its data. `find` prints both times in one fixed format, so the strings compare as numbers.
 */
const attrChanged = (st: Stat): boolean => st.ctime > st.mtime;

export class DirWatch {
  private buf = "";
  private prev: Listing | null = null;
  private cur: Listing = new Map();
  private closed = false;
  private listings = 0;
  private waiters: Array<{ target: number; resolve: () => void }> = [];

  private constructor(
    private readonly sandbox: E2bSandbox,
    private readonly stream: ProcessStream,
    private readonly it: AsyncIterator<import("../protocol/process-session.js").ProcessEvent>,
  ) {}

  /** Starts watching; resolves after the first listing (null when the path is not a directory). */
  static async start(s: E2bSandbox, path: string, recursive: boolean): Promise<DirWatch | null> {
    const script = `[ -d "$1" ] || exit ${NOT_A_DIR}; while :; do find "$1" -mindepth 1 -maxdepth "$2" -printf '%y\\t%T@\\t%s\\t%C@\\t%P\\0'; printf '${SNAPSHOT_END}\\0'; sleep ${POLL_S}; done`;
    // A helper: hidden from the sandbox's commands.list by its pid, not by a tag.
    const stream = await s.processes.startHelper({
      cmd: "/bin/sh",
      args: ["-c", script, "sh", path, recursive ? "1000000" : "1"],
      stdin: false,
      workspace_alias: E2B_HOME,
      cwd: E2B_HOME,
    });
    const w = new DirWatch(s, stream, stream.events[Symbol.asyncIterator]());
    const first = await w.next();
    if (first === null) return null;
    return w;
  }

  /** The events between the last listing and the next one; null once the watch has ended. */
  async next(): Promise<WatchEvent[] | null> {
    while (!this.closed) {
      const r = await this.it.next();
      if (r.done || r.value.type === "end") {
        this.close();
        return null;
      }
      if (r.value.type !== "stdout") continue;
      this.buf += Buffer.from(r.value.data, "base64").toString("utf8");
      let events: WatchEvent[] | undefined;
      let nul: number;
      while ((nul = this.buf.indexOf("\0")) >= 0) {
        const rec = this.buf.slice(0, nul);
        this.buf = this.buf.slice(nul + 1);
        if (rec === SNAPSHOT_END) {
          events = [...(events ?? []), ...this.diff()];
          continue;
        }
        const parts = rec.split("\t");
        if (parts.length < 5) continue;
        const [type, mtime, size, ctime] = parts as [string, string, string, string];
        this.cur.set(parts.slice(4).join("\t"), { type, mtime, size, ctime });
      }
      if (events) return events;
    }
    return null;
  }

  /**
   * Resolves once a listing that began after this call has been compared (two listings from
   * now), or the watch ended: what changed before the call is in the events by then. E2B's
   * watchers see changes at once (inotify); a poller that asks right after a write must not
   * get an empty answer because the listing in flight began before the write.
   */
  settled(): Promise<void> {
    if (this.closed) return Promise.resolve();
    const target = this.listings + 2;
    return new Promise((resolve) => this.waiters.push({ target, resolve }));
  }

  private diff(): WatchEvent[] {
    this.listings++;
    const due = this.waiters.filter((w) => w.target <= this.listings);
    this.waiters = this.waiters.filter((w) => w.target > this.listings);
    // After this listing's events are handed to the reader (next() returns them first).
    setImmediate(() => due.forEach((w) => w.resolve()));
    const prev = this.prev;
    const cur = this.cur;
    this.prev = cur;
    this.cur = new Map();
    if (!prev) return [];
    const out: WatchEvent[] = [];
    for (const [name, st] of cur) {
      const before = prev.get(name);
      const isDir = st.type === "d";
      if (before === undefined) {
        // What inotify (E2B's) reports for a new file: created, written if it has content, then
        // CHMOD if its attributes changed after the write (envd's upload sets the owner; ours the mode).
        out.push({ name, type: EventType.CREATE });
        if (!isDir && st.size !== "0") out.push({ name, type: EventType.WRITE });
        if (!isDir && attrChanged(st)) out.push({ name, type: EventType.CHMOD });
        continue;
      }
      const written = !isDir && (before.type !== st.type || before.mtime !== st.mtime || before.size !== st.size);
      if (written) out.push({ name, type: EventType.WRITE });
      if (!isDir && st.ctime !== before.ctime && attrChanged(st)) out.push({ name, type: EventType.CHMOD });
    }
    for (const name of prev.keys()) if (!cur.has(name)) out.push({ name, type: EventType.REMOVE });
    return out;
  }

  /** Stops the watch (kills its process). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const w of this.waiters.splice(0)) w.resolve();
    this.stream.close();
    void this.sandbox.processes.signal(this.stream.pid, "SIGKILL").catch(() => undefined);
  }
}
