import { Code, ConnectError, type ServiceImpl } from "@connectrpc/connect";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { FileType, Filesystem, type EntryInfoSchema } from "./gen/filesystem/filesystem_pb.js";
import { sandboxForRpc, toConnectError } from "./envd-auth.js";
import { workspacePath } from "./paths.js";
import type { E2bSandbox, SandboxRegistry } from "./sandboxes.js";

type Entry = MessageInitShape<typeof EntryInfoSchema>;

/**
 * envd's `filesystem.Filesystem` Connect service. Each operation runs as a small shell
 * command inside the sandbox's slot (its uid, its isolation), so it sees exactly what the
 * sandbox's commands see; paths must lie in the workspace (/home/user or /workspace, or
 * relative to /home/user), checked before anything runs. `find -printf` with NUL-separated
 * fields reports entries (any file name survives). Watching directories is not offered.
 */

/** find -printf format: 9 NUL-terminated fields per entry. */
const FMT = "%y\\0%s\\0%m\\0%M\\0%u\\0%g\\0%T@\\0%l\\0%p\\0";
const NOT_FOUND = 44;
const WRONG_TYPE = 45;
const EXISTS = 47;

const SCRIPTS = {
  stat: `[ -e "$1" ] || [ -L "$1" ] || exit ${NOT_FOUND}; exec find "$1" -maxdepth 0 -printf '${FMT}'`,
  list: `[ -e "$1" ] || exit ${NOT_FOUND}; [ -d "$1" ] || exit ${WRONG_TYPE}; exec find "$1" -mindepth 1 -maxdepth "$2" -printf '${FMT}'`,
  makeDir: `[ -e "$1" ] && exit ${EXISTS}; mkdir -p -- "$1" && exec find "$1" -maxdepth 0 -printf '${FMT}'`,
  move: `[ -e "$1" ] || [ -L "$1" ] || exit ${NOT_FOUND}; mkdir -p -- "$(dirname -- "$2")" && mv -T -- "$1" "$2" && exec find "$2" -maxdepth 0 -printf '${FMT}'`,
  remove: `[ -e "$1" ] || [ -L "$1" ] || exit ${NOT_FOUND}; exec rm -rf -- "$1"`,
};

const TYPES: Record<string, FileType> = { f: FileType.FILE, d: FileType.DIRECTORY, l: FileType.SYMLINK };

function parseEntries(out: Buffer): Entry[] {
  const fields = out.toString("utf8").split("\0");
  const entries: Entry[] = [];
  for (let i = 0; i + 9 <= fields.length; i += 9) {
    const [type, size, mode, perms, owner, group, mtime, link, path] = fields.slice(i, i + 9) as [string, string, string, string, string, string, string, string, string];
    const [sec, frac = "0"] = mtime.split(".");
    entries.push({
      name: path.slice(path.lastIndexOf("/") + 1),
      type: TYPES[type] ?? FileType.UNSPECIFIED,
      path,
      size: BigInt(size || "0"),
      mode: parseInt(mode, 8),
      permissions: perms,
      owner,
      group,
      modifiedTime: { seconds: BigInt(sec || "0"), nanos: Number(frac.padEnd(9, "0").slice(0, 9)) },
      ...(type === "l" ? { symlinkTarget: link } : {}),
    });
  }
  return entries;
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

export function filesystemService(registry: SandboxRegistry): ServiceImpl<typeof Filesystem> {
  const unsupported = async (): Promise<never> => {
    throw new ConnectError("watching directories is not supported by slotpool yet (see docs/e2b.md)", Code.Unimplemented);
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
      return { entries: await runOp(s, "list", [p, String(Math.max(1, req.depth))], p) };
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
    // eslint-disable-next-line require-yield
    async *watchDir() {
      await unsupported();
    },
    createWatcher: unsupported,
    getWatcherEvents: unsupported,
    removeWatcher: unsupported,
  };
}
