import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { HttpError } from "../../http/errors.js";
import type { VolumeInfo, VolumeMount } from "../../protocol/volumes.js";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "../native/native-build.js";
import type { Slot } from "../core/slot.js";
import { TreeRemoval } from "./tree-removal.js";

const run = promisify(execFile);

/**
 * The server's volumes (protocol/volumes.ts): named directories under the volumes directory
 * (`--volumes-dir`), which every container of a pool shares (the local provisioner's one
 * folder, a Nomad host volume), so a volume outlives every slot and is the same whichever
 * container a sandbox lands on. `<dir>/<id>/` holds a volume's files, `<dir>/.meta/<id>.json`
 * its name and token (mode 0600: the server's only).
 *
 * Who owns the files: where the server is root, every slot has a uid of its own, so on disk a
 * volume's files all belong to one fixed uid, the volume owner (`--volume-owner`, 19999 by
 * default: outside every slot uid block), and each slot sees a volume through a view of its
 * own (native/volume-mount.c: an id-mapped mount, nosuid, nodev) in which those files are the
 * slot's: any slot that mounts the volume reads and writes them, and what it creates lands on
 * disk as the volume owner's. A non-root server runs every slot as itself: its uid owns the
 * files and sessions bind the directory as it is.
 */

/** The default uid (and gid) a root server's volumes belong to on disk: below the default slot uid base (20000), far from Nomad's blocks. */
export const DEFAULT_VOLUME_OWNER = 19_999;

let helperPath: string | null | undefined;
let helperError: string | undefined;

function volumeMountHelper(cacheDir: string): string | null {
  if (helperPath !== undefined && (helperPath === null || existsSync(helperPath))) return helperPath;
  const src = nativeSource("volume-mount.c");
  const prebuilt = prebuiltNative("slotpool-volume-mount");
  if (!src) {
    helperPath = existsSync(prebuilt) ? prebuilt : null;
    if (!helperPath) helperError = "volume-mount.c not found";
    return helperPath;
  }
  const built = compileNative("slotpool-volume-mount", src, [NATIVE_DIR, cacheDir], 0o700);
  if ("path" in built) return (helperPath = built.path);
  helperError = built.error;
  return (helperPath = null);
}

export interface VolumeStoreOptions {
  /** The shared volumes directory. */
  dir: string;
  /** Where the server keeps per-slot views (its state dir). */
  stateDir: string;
  /** Root: the uid/gid volumes belong to on disk (views map it to each slot's). Undefined: a non-root server, one uid for all. */
  owner: { uid: number; gid: number } | undefined;
}

export class VolumeStore {
  /** The store of a sandbox server: `--volumes-dir` (default `<data dir>/volumes`); as root with per-slot uids, owned by `--volume-owner`. */
  static forServer(options: { volumesDir?: string | undefined; volumeOwner?: number | undefined }, dataDir: string, stateDir: string, perSlotRoot: boolean): VolumeStore {
    const owner = options.volumeOwner ?? DEFAULT_VOLUME_OWNER;
    return new VolumeStore({ dir: resolve(options.volumesDir ?? join(dataDir, "volumes")), stateDir, owner: perSlotRoot ? { uid: owner, gid: owner } : undefined });
  }

  readonly dir: string;
  private readonly metaDir: string;
  private readonly viewsDir: string;
  private removalOf: TreeRemoval | undefined;
  /** Per slot: the volumes it has a view of now (root), each mounted once until the slot's sessions end. */
  private readonly views = new Map<number, Map<string, Promise<string>>>();

  /**
   * Nothing is made on disk until the first volume is created (or removed): a server that
   * serves no volume leaves its data dir as it found it (a user looking there sees only
   * the slots), and a shared volumes directory appears once something is kept in it.
   */
  constructor(private readonly options: VolumeStoreOptions) {
    this.dir = options.dir;
    this.metaDir = join(this.dir, ".meta");
    this.viewsDir = join(options.stateDir, "volume-views");
  }

  /** Makes the volumes directory (its metadata and this server's trash) where it is missing. */
  private prepare(): TreeRemoval {
    if (this.removalOf) return this.removalOf;
    mkdirSync(this.metaDir, { recursive: true, mode: 0o700 });
    chmodSync(this.metaDir, 0o700);
    // The volumes directory must be reachable by the slot uids' views (root) or the server alone.
    chmodSync(this.dir, 0o711);
    // A trash of this server's own: others share the volumes directory (and empty their own).
    mkdirSync(join(this.dir, ".trash"), { recursive: true, mode: 0o700 });
    return (this.removalOf = new TreeRemoval(join(this.dir, ".trash", `${process.pid}-${randomBytes(4).toString("hex")}`)));
  }

  get owner(): { uid: number; gid: number } | undefined {
    return this.options.owner;
  }

  create(id: string, name: string, token: string): VolumeInfo {
    if (this.list().some((v) => v.name === name)) throw new HttpError(409, `a volume named '${name}' exists already`, "name");
    const data = join(this.dir, id);
    if (existsSync(this.metaFile(id)) || existsSync(data)) throw new HttpError(409, `volume '${id}' exists already`, "volume_id");
    this.prepare();
    mkdirSync(data, { mode: 0o755 });
    chmodSync(data, 0o755);
    if (this.owner) chownSync(data, this.owner.uid, this.owner.gid);
    const info: VolumeInfo = { volume_id: id, name, token, created_at: new Date().toISOString() };
    const tmp = `${this.metaFile(id)}.tmp`;
    writeFileSync(tmp, JSON.stringify(info), { mode: 0o600 });
    renameSync(tmp, this.metaFile(id));
    return info;
  }

  list(): VolumeInfo[] {
    const out: VolumeInfo[] = [];
    // No volumes directory yet: no volume was ever created (by this server or one sharing it).
    if (!existsSync(this.metaDir)) return out;
    for (const f of readdirSync(this.metaDir)) {
      if (!f.endsWith(".json")) continue;
      try {
        out.push(JSON.parse(readFileSync(join(this.metaDir, f), "utf8")) as VolumeInfo);
      } catch {
        /* being written or removed by another server sharing the directory */
      }
    }
    return out.sort((a, b) => a.created_at.localeCompare(b.created_at) || a.volume_id.localeCompare(b.volume_id));
  }

  get(id: string): VolumeInfo {
    try {
      return JSON.parse(readFileSync(this.metaFile(id), "utf8")) as VolumeInfo;
    } catch {
      throw new HttpError(404, `no volume '${id}'`, "volume_id");
    }
  }

  /** The directory holding the volume's files (404 when there is no such volume). */
  dataDir(id: string): string {
    this.get(id);
    return join(this.dir, id);
  }

  /** Deletes the volume: its name goes at once, its files in the background. */
  delete(id: string): void {
    this.get(id);
    renameSync(this.metaFile(id), join(this.metaDir, `.deleted-${id}-${Date.now()}`));
    const removal = this.prepare();
    removal.discard(join(this.dir, id));
    for (const f of readdirSync(this.metaDir)) if (f.startsWith(`.deleted-${id}-`)) removal.discard(join(this.metaDir, f));
  }

  /** Deletes a tree of a volume in the background (renamed into the volumes' own trash first: same filesystem). */
  discardTree(path: string): void {
    this.prepare().discard(path);
  }

  /**
   * bubblewrap arguments binding `mounts` into a session of `slot` (each at its path,
   * read-write): the volume's directory, or on a root server the slot's view of it.
   */
  async sessionBinds(slot: Slot, mounts: readonly VolumeMount[]): Promise<string[]> {
    const args: string[] = [];
    for (const m of mounts) args.push("--bind", await this.sourceFor(slot, m.volume_id), m.path);
    return args;
  }

  private async sourceFor(slot: Slot, id: string): Promise<string> {
    const data = this.dataDir(id);
    const owner = this.owner;
    if (!owner || !slot.owner) return data;
    let mine = this.views.get(slot.index);
    if (!mine) this.views.set(slot.index, (mine = new Map()));
    let view = mine.get(id);
    if (!view) {
      view = this.mountView(slot, id, data, owner);
      mine.set(id, view);
      view.catch(() => mine.delete(id));
    }
    return view;
  }

  private async mountView(slot: Slot, id: string, data: string, owner: { uid: number; gid: number }): Promise<string> {
    const helper = volumeMountHelper(this.options.stateDir);
    if (!helper) throw new HttpError(503, `volumes cannot be mounted: the volume view helper could not be built (${helperError ?? "unknown reason"})`);
    const target = join(this.viewsDir, slot.id, id);
    mkdirSync(this.viewsDir, { recursive: true, mode: 0o711 });
    mkdirSync(target, { recursive: true, mode: 0o700 });
    chmodSync(join(this.viewsDir, slot.id), 0o711);
    try {
      await run(helper, ["mount", data, target, String(owner.uid), String(slot.owner!.uid), String(owner.gid), String(slot.owner!.gid)]);
    } catch (err) {
      throw new HttpError(500, `mounting volume '${id}' for ${slot.id} failed: ${(err as { stderr?: string }).stderr?.trim() || (err instanceof Error ? err.message : String(err))}`);
    }
    return target;
  }

  /** Detaches the slot's views (its sessions have ended: reset, fork, kill of all processes). */
  async releaseSlot(slot: Slot): Promise<void> {
    const mine = this.views.get(slot.index);
    if (!mine || mine.size === 0) return;
    this.views.delete(slot.index);
    const helper = volumeMountHelper(this.options.stateDir);
    await Promise.all(
      [...mine.keys()].map(async (id) => {
        const target = join(this.viewsDir, slot.id, id);
        await mine.get(id)!.catch(() => undefined);
        if (helper) await run(helper, ["umount", target]).catch(() => undefined);
        try {
          rmdirSync(target);
        } catch {
          /* still mounted (busy) or gone */
        }
      }),
    );
  }

  private metaFile(id: string): string {
    return join(this.metaDir, `${id}.json`);
  }
}
