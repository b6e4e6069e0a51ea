import { randomUUID } from "node:crypto";
import { posix } from "node:path";
import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { FileType, Filesystem, type EntryInfoSchema, type WatchDirResponseSchema } from "./gen/filesystem/filesystem_pb.js";
import { DirWatch, type WatchEvent } from "./dir-watch.js";
import { GETFATTR, parseXattrDump, type FileMetadata } from "./file-metadata.js";
import { sandboxForRpc, toConnectError } from "./envd-auth.js";
import { workspacePath } from "./paths.js";
import type { E2bSandbox, SandboxRegistry } from "./sandboxes.js";

type Entry = MessageInitShape<typeof EntryInfoSchema>;

/**
 * envd's `filesystem.Filesystem` Connect service. Each operation runs as a small shell
 * command inside the sandbox's slot (its uid, its isolation), so it sees exactly what the
 * sandbox's commands see; paths must lie in the workspace (/home/user or /workspace, or
 * relative to /home/user), checked before anything runs. `find -printf` with NUL-separated
 * fields reports entries (any file name survives). Watching polls (dir-watch.ts).
 */

/** find -printf format: 10 NUL-terminated fields per entry (%Y: the type a symlink points to, as E2B reports it). */
const FMT = "%y\\0%Y\\0%s\\0%m\\0%M\\0%u\\0%g\\0%T@\\0%l\\0%p\\0";
const FIELDS = 10;
const NOT_FOUND = 44;
const WRONG_TYPE = 45;
const EXISTS = 47;

/** Ends an operation's entries; getfattr's dump of their `user.e2b.*` attributes follows (file-metadata.ts). */
const META_MARK = "\\1\\0";
/** The metadata of "$@" after the marker; none where getfattr is missing (the entries still answer). */
const metaOf = (paths: string) => `printf '${META_MARK}'; command -v getfattr >/dev/null 2>&1 && ${GETFATTR} -- ${paths} 2>/dev/null; exit 0`;

const SCRIPTS = {
  stat: `[ -e "$1" ] || [ -L "$1" ] || exit ${NOT_FOUND}; find "$1" -maxdepth 0 -printf '${FMT}' || exit $?; ${metaOf(`"$1"`)}`,
  list: `[ -e "$1" ] || exit ${NOT_FOUND}; [ -d "$1" ] || exit ${WRONG_TYPE}; find "$1" -mindepth 1 -maxdepth "$2" -printf '${FMT}' || exit $?
printf '${META_MARK}'; command -v getfattr >/dev/null 2>&1 && find "$1" -mindepth 1 -maxdepth "$2" -exec ${GETFATTR} -- {} + 2>/dev/null; exit 0`,
  makeDir: `[ -e "$1" ] && exit ${EXISTS}; mkdir -p -- "$1" && exec find "$1" -maxdepth 0 -printf '${FMT}'`,
  move: `[ -e "$1" ] || [ -L "$1" ] || exit ${NOT_FOUND}; mkdir -p -- "$(dirname -- "$2")" && mv -T -- "$1" "$2" && find "$2" -maxdepth 0 -printf '${FMT}' || exit $?; ${metaOf(`"$2"`)}`,
  // Removing what is not there succeeds, as in E2B.
  remove: `exec rm -rf -- "$1"`,
  // The entries of watch events: those still there (a removed one has none, as in envd).
  statMany: `for p; do if [ -e "$p" ] || [ -L "$p" ]; then find "$p" -maxdepth 0 -printf '${FMT}'; fi; done; ${metaOf(`"$@"`)}`,
};

const TYPES: Record<string, FileType> = { f: FileType.FILE, d: FileType.DIRECTORY, l: FileType.SYMLINK };

/** The entries before META_MARK and the metadata dump after it (found by counting fields: a name may hold \\1). */
function splitMeta(out: Buffer): [Buffer, Map<string, FileMetadata>] {
  let pos = 0;
  for (;;) {
    if (out[pos] === 1 && out[pos + 1] === 0) return [out.subarray(0, pos), parseXattrDump(out.subarray(pos + 2))];
    for (let j = 0; j < FIELDS; j++) {
      pos = out.indexOf(0, pos) + 1;
      if (pos === 0) return [out, new Map()];
    }
  }
}

function parseEntries(out: Buffer): Entry[] {
  const [listing, metadata] = splitMeta(out);
  const fields = listing.toString("utf8").split("\0");
  const entries: Entry[] = [];
  for (let i = 0; i + FIELDS <= fields.length; i += FIELDS) {
    const [type, target, size, mode, perms, owner, group, mtime, link, path] = fields.slice(i, i + FIELDS) as [string, string, string, string, string, string, string, string, string, string];
    const [sec, frac = "0"] = mtime.split(".");
    const meta = metadata.get(path);
    entries.push({
      name: path.slice(path.lastIndexOf("/") + 1),
      // As envd: a symlink has the type of what it points to (a dangling one stays a symlink),
      // and its target as an absolute path.
      type: TYPES[type === "l" ? target : type] ?? (type === "l" ? FileType.SYMLINK : FileType.UNSPECIFIED),
      path,
      size: BigInt(size || "0"),
      mode: parseInt(mode, 8),
      permissions: perms,
      owner,
      group,
      modifiedTime: { seconds: BigInt(sec || "0"), nanos: Number(frac.padEnd(9, "0").slice(0, 9)) },
      ...(type === "l" ? { symlinkTarget: posix.resolve(posix.dirname(path), link) } : {}),
      ...(meta && Object.keys(meta).length > 0 ? { metadata: meta } : {}),
    });
  }
  return entries;
}

/** envd's order: a directory walk in lexical order of names (a directory's entries right after it). */
function byWalkOrder(a: Entry, b: Entry): number {
  const x = (a.path ?? "").split("/");
  const y = (b.path ?? "").split("/");
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! < y[i]! ? -1 : 1;
  return x.length - y.length;
}

async function runOp(s: E2bSandbox, op: keyof typeof SCRIPTS, args: string[], what: string): Promise<Entry[]> {
  let r;
  try {
    r = await s.processes.run("/bin/sh", ["-c", SCRIPTS[op], "sh", ...args]);
  } catch (err) {
    throw toConnectError(err);
  }
  if (r.exitCode === NOT_FOUND) throw new ConnectError(`${what}: no such file or directory`, Code.NotFound);
  if (r.exitCode === WRONG_TYPE) throw new ConnectError(`${what}: not a directory`, Code.InvalidArgument);
  if (r.exitCode === EXISTS) throw new ConnectError(`${what}: already exists`, Code.AlreadyExists);
  if (r.exitCode !== 0) {
    const msg = r.stderr.trim() || `exit ${r.exitCode}`;
    throw new ConnectError(`${what}: ${msg}`, /permission denied/i.test(msg) ? Code.PermissionDenied : Code.Internal);
  }
  return parseEntries(r.stdout);
}

function path(p: string, field = "path"): string {
  try {
    return workspacePath(p, field);
  } catch (err) {
    throw toConnectError(err);
  }
}

type FsEvent = { name: string; type: WatchEvent["type"]; entry?: Entry };

/** A watch's events, each with its entry when `includeEntry` (envd ≥ 0.6.3) asked for it: one listing of the changed paths in the slot. */
async function withEntries(s: E2bSandbox, root: string, events: WatchEvent[], includeEntry: boolean): Promise<FsEvent[]> {
  if (!includeEntry || events.length === 0) return events.map((e) => ({ name: e.name, type: e.type }));
  const paths = [...new Set(events.map((e) => posix.join(root, e.name)))];
  const entries: Entry[] = [];
  // In batches, so a burst of events stays within the argument list's limit.
  for (let i = 0; i < paths.length; i += 256) {
    try {
      entries.push(...(await runOp(s, "statMany", paths.slice(i, i + 256), root)));
    } catch {
      // Best effort, as envd's: an event without its entry is still the event.
    }
  }
  const byPath = new Map(entries.map((e) => [e.path, e]));
  return events.map((e) => {
    const entry = byPath.get(posix.join(root, e.name));
    return { name: e.name, type: e.type, ...(entry ? { entry } : {}) };
  });
}

/** Watchers made by CreateWatcher, polled by GetWatcherEvents. */
interface Watcher {
  sandboxId: string;
  /** Undefined while it starts. */
  watch: DirWatch | undefined;
  /** The watched directory and whether events carry their entry. */
  root: string;
  includeEntry: boolean;
  pending: WatchEvent[];
  ended: boolean;
}

/** Watchers (CreateWatcher) one sandbox may hold at once (--max-watchers-per-sandbox). */
export const DEFAULT_MAX_WATCHERS = 8;

export function filesystemService(registry: SandboxRegistry, options: { maxWatchers?: number } = {}): ServiceImpl<typeof Filesystem> {
  const maxWatchers = options.maxWatchers ?? DEFAULT_MAX_WATCHERS;
  const watchers = new Map<string, Watcher>();
  /** Each watcher holds a process and a stream in the sandbox until removed: a sandbox gets a few, not all of its server's connections. */
  const reserve = (s: E2bSandbox): void => {
    let held = 0;
    for (const w of watchers.values()) if (w.sandboxId === s.id && !w.ended) held++;
    if (held >= maxWatchers) {
      throw new ConnectError(`this sandbox already has ${maxWatchers} watchers (--max-watchers-per-sandbox): remove one (RemoveWatcher) first`, Code.ResourceExhausted);
    }
  };
  const startWatch = async (s: E2bSandbox, p: string, recursive: boolean): Promise<DirWatch> => {
    let w: DirWatch | null;
    try {
      w = await DirWatch.start(s, p, recursive);
    } catch (err) {
      throw toConnectError(err);
    }
    if (!w) throw new ConnectError(`${p}: no such directory`, Code.NotFound);
    return w;
  };
  const watcherOf = (s: E2bSandbox, id: string): Watcher => {
    const w = watchers.get(id);
    // Another sandbox's watcher id is as unknown as a made-up one.
    if (!w || w.sandboxId !== s.id) throw new ConnectError(`no watcher '${id}' in this sandbox`, Code.NotFound);
    return w;
  };
  return {
    async stat(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const p = path(req.path);
      const [entry] = await runOp(s, "stat", [p], p);
      return { entry };
    },
    async listDir(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const p = path(req.path);
      return { entries: (await runOp(s, "list", [p, String(Math.max(1, req.depth))], p)).sort(byWalkOrder) };
    },
    async makeDir(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const p = path(req.path);
      const [entry] = await runOp(s, "makeDir", [p], p);
      return { entry };
    },
    async move(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const src = path(req.source, "source");
      const dst = path(req.destination, "destination");
      const [entry] = await runOp(s, "move", [src, dst], src);
      return { entry };
    },
    async remove(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const p = path(req.path);
      await runOp(s, "remove", [p], p);
      return {};
    },
    async *watchDir(req, ctx): AsyncGenerator<MessageInitShape<typeof WatchDirResponseSchema>> {
      const s = sandboxForRpc(registry, ctx);
      // allowNetworkMounts (envd ≥ 0.6.4) is accepted and changes nothing: the watch lists what the sandbox sees, whatever its filesystem.
      const root = path(req.path);
      const w = await startWatch(s, root, req.recursive);
      const stop = () => w.close();
      ctx.signal.addEventListener("abort", stop, { once: true });
      const keepaliveS = Number(ctx.requestHeader.get("keepalive-ping-interval")) || 50;
      try {
        yield { event: { case: "start", value: {} } };
        let next = w.next();
        for (;;) {
          let timer: NodeJS.Timeout | undefined;
          const tick = new Promise<"tick">((r) => (timer = setTimeout(() => r("tick"), keepaliveS * 1000)));
          const got = await Promise.race([next, tick]);
          clearTimeout(timer);
          if (got === "tick") {
            yield { event: { case: "keepalive", value: {} } };
            continue;
          }
          if (got === null) break;
          next = w.next();
          for (const ev of await withEntries(s, root, got, req.includeEntry)) yield { event: { case: "filesystem", value: ev } };
        }
      } finally {
        ctx.signal.removeEventListener("abort", stop);
        w.close();
      }
    },
    async createWatcher(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      reserve(s);
      const id = randomUUID();
      // Counted from now: concurrent CreateWatcher calls cannot all pass the check above.
      const root = path(req.path);
      const entry: Watcher = { sandboxId: s.id, watch: undefined, root, includeEntry: req.includeEntry, pending: [], ended: false };
      watchers.set(id, entry);
      try {
        entry.watch = await startWatch(s, root, req.recursive);
      } catch (err) {
        watchers.delete(id);
        throw err;
      }
      const watch = entry.watch;
      void (async () => {
        for (let evs = await watch.next(); evs; evs = await watch.next()) entry.pending.push(...evs.slice(0, 10_000 - entry.pending.length));
        entry.ended = true;
        // A watcher of a sandbox that has ended is nobody's to read: forget it.
        if (!registry.get(s.id)) watchers.delete(id);
      })();
      return { watcherId: id };
    },
    async getWatcherEvents(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      const w = watcherOf(s, req.watcherId);
      await w.watch?.settled(); // changes made before this call are in the answer, as with E2B's inotify
      const events = w.pending.splice(0);
      if (w.ended && events.length === 0) {
        watchers.delete(req.watcherId);
        throw new ConnectError(`watcher '${req.watcherId}' has ended (its directory or sandbox is gone)`, Code.NotFound);
      }
      return { events: await withEntries(s, w.root, events, w.includeEntry) };
    },
    async removeWatcher(req, ctx) {
      const s = sandboxForRpc(registry, ctx);
      watcherOf(s, req.watcherId).watch?.close();
      watchers.delete(req.watcherId);
      return {};
    },
  };
}
