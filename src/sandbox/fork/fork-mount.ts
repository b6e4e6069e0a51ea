import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, rmdirSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { SlotpoolError } from "../../protocol/errors.js";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "../native/native-build.js";

/** Helper processes per server: an unmount waits for an RCU grace period (milliseconds under load), so a fork's children unmount in parallel. */
const HELPERS = 4;

type Helper = { child: ChildProcess; waiting: Array<(answer: string) => void> };

/** The lane of the helper that holds the layer handles (detached mounts are file descriptors of one process). */
const KEEPER = -1;

/**
 * The mount steps of a fork (`native/fork-mount.c`), through a few long-lived helper
 * processes per server (a request costs a pipe round trip, not a fork + exec). Each request
 * names a `lane` (a slot index): requests of one lane go to one helper, in order; lanes
 * spread over the helpers. A path with a tab or newline cannot be sent and is refused.
 *
 * Layer handles (`handle`, `idmapHandle`): where the kernel lets overlayfs take a detached
 * mount as a layer (Linux 6.15), a handle is a detached mount held by one more helper, the
 * keeper, named `/proc/<keeper>/fd/<n>`: in no mount table, so the server's namespace, which
 * every new slot namespace copies, does not grow with the live layers. Elsewhere a handle is
 * a mount under `<stateDir>/fork-layers` (one more mount per layer and reader).
 */
export class ForkMounter {
  private readonly helpers: Array<Helper | undefined> = new Array(HELPERS + 1).fill(undefined);
  /** Whether layer handles are detached mounts (else mounts in the server's namespace). */
  readonly detached: boolean;
  /** Why not, if not (logged once). */
  readonly attachedBecause: string | undefined;

  constructor(
    readonly binary: string,
    private readonly handleDir: string,
  ) {
    // SLOTPOOL_FORK_LAYERS=mounts: the older kernels' way, on any kernel (to test it).
    if (process.env["SLOTPOOL_FORK_LAYERS"] === "mounts") {
      this.detached = false;
      this.attachedBecause = "SLOTPOOL_FORK_LAYERS=mounts";
      return;
    }
    const probe = spawnSync(binary, ["serve"], { input: `probe\t${join(handleDir, `probe-${randomBytes(4).toString("hex")}`)}\n`, encoding: "utf8", timeout: 10_000 });
    const answer = (probe.stdout ?? "").trim();
    this.detached = answer === "ok";
    this.attachedBecause = this.detached ? undefined : answer.replace(/^err /, "") || probe.error?.message || "the probe gave no answer";
  }

  /** The helper, compiled once per source hash; or why it cannot be. `handleDir`: where attached layer handles go. */
  static build(cacheDir: string, handleDir: string): ForkMounter | { error: string } {
    const src = nativeSource("fork-mount.c");
    if (!src) {
      const pre = prebuiltNative("slotpool-fork-mount");
      return existsSync(pre) ? new ForkMounter(pre, handleDir) : { error: "fork-mount.c not found" };
    }
    const built = compileNative("slotpool-fork-mount", src, [NATIVE_DIR, cacheDir], 0o700);
    return "path" in built ? new ForkMounter(built.path, handleDir) : built;
  }

  /** A read-only handle of the dir `src` (a layer), alive until `dropHandle`, also after `src`'s filesystem is detached. */
  async handle(src: string): Promise<string> {
    if (this.detached) return this.keeperPath(await this.call(KEEPER, ["keep", src]));
    const path = this.handlePath();
    await this.bind(0, src, path).catch((err: unknown) => {
      rmdirQuiet(path);
      throw err;
    });
    return path;
  }

  /** A read-only handle of the handle `src`, files of `from` appearing as `to`'s (an id-mapped clone). */
  async idmapHandle(src: string, from: Ids, to: Ids): Promise<string> {
    if (this.detached) return this.keeperPath(await this.call(KEEPER, ["keep-idmap", src, String(from.uid), String(to.uid), String(from.gid), String(to.gid)]));
    const path = this.handlePath();
    await this.idmap(0, src, path, from, to).catch((err: unknown) => {
      rmdirQuiet(path);
      throw err;
    });
    return path;
  }

  /** Drops a handle (in the background: the last reference to a reset slot disk frees it there). */
  async dropHandle(handle: string): Promise<void> {
    const m = /^\/proc\/(\d+)\/fd\/(\d+)$/.exec(handle);
    if (!m) {
      await this.umountInBackground(0, handle);
      // The grandchild may not have run yet: the dir goes when it is no mount point any more.
      setTimeout(() => rmdirQuiet(handle), 1000).unref();
      return;
    }
    // A handle of a keeper that has since exited went with it.
    if (Number(m[1]) === this.helpers[HELPERS]?.child.pid) await this.call(KEEPER, ["drop", m[2]!]);
  }

  /** The keeper's pid (tests count its handles), if it runs. */
  keeperPid(): number | undefined {
    return this.helpers[HELPERS]?.child.pid;
  }

  private keeperPath(fd: string): string {
    return `/proc/${this.helpers[HELPERS]!.child.pid}/fd/${fd}`;
  }

  private handlePath(): string {
    const path = join(this.handleDir, randomBytes(6).toString("hex"));
    mkdirSync(path, { recursive: true, mode: 0o700 });
    return path;
  }

  /** overlayfs at `target` (on top of what is there), lowers top first. */
  async overlay(lane: number, target: string, upper: string, work: string, lowers: readonly string[]): Promise<void> {
    await this.call(lane, ["overlay", target, upper, work, ...lowers]);
  }

  /**
   * overlayfs held detached by the lane's helper (attached later by `attach`, or `closeMount`).
   * Resolves to its name for a `seal` of the same lane.
   */
  async overlayDetached(lane: number, upper: string, work: string, lowers: readonly string[]): Promise<string> {
    return `/proc/self/fd/${await this.call(lane, ["overlay-detached", upper, work, ...lowers])}`;
  }

  /**
   * The lane's detached overlay `mount` in place of the overlay on top of `target` (mounted
   * beneath it, the old one detached). Resolves to whether it had to be stacked on top instead
   * (a kernel without MOVE_MOUNT_BENEATH): then the old one stays beneath until the slot's release.
   */
  async attach(lane: number, mount: string, target: string): Promise<boolean> {
    return (await this.call(lane, ["attach", fdOf(mount), target])) === "stacked";
  }

  /** The lane's detached overlay `mount` on top of `target` (a fork child's new view over its new disk). */
  async attachTop(lane: number, mount: string, target: string): Promise<void> {
    await this.call(lane, ["attach-top", fdOf(mount), target]);
  }

  async closeMount(lane: number, mount: string): Promise<void> {
    await this.call(lane, ["close", fdOf(mount)]);
  }

  /**
   * In `pid`'s mount namespace: /workspace read-only, then a clone of `source` over it.
   * Rejects with a `ForkBusyError` when a process holds a file of the old mount open for writing.
   */
  async seal(lane: number, pid: number, source: string): Promise<void> {
    await this.call(lane, ["seal", String(pid), source]);
  }

  async umount(lane: number, path: string): Promise<void> {
    await this.call(lane, ["umount", path]);
  }

  /** A read-only clone of `src` at `mountpoint` (a layer's own handle where handles cannot be detached, see fork-mount.c). */
  private async bind(lane: number, src: string, mountpoint: string): Promise<void> {
    await this.call(lane, ["bind", src, mountpoint]);
  }

  /** A read-only clone of `src` at `mountpoint`, files of `from` appearing as `to`'s. */
  private async idmap(lane: number, src: string, mountpoint: string, from: Ids, to: Ids): Promise<void> {
    await this.call(lane, ["idmap", src, mountpoint, String(from.uid), String(to.uid), String(from.gid), String(to.gid)]);
  }

  /** Detaches `path` from a detached grandchild (the freeing of a last reference does not hold the helper). */
  private async umountInBackground(lane: number, path: string): Promise<void> {
    await this.call(lane, ["umount-bg", path]);
  }

  close(): void {
    for (const h of this.helpers) h?.child.kill();
    this.helpers.fill(undefined);
  }

  /** Sends one request; resolves to what follows "ok " in the answer ("" for a bare "ok"). */
  private async call(lane: number, args: string[]): Promise<string> {
    if (args.some((a) => /[\t\n]/.test(a))) throw new Error(`fork-mount: a path holds a tab or newline: ${JSON.stringify(args)}`);
    const i = lane === KEEPER ? HELPERS : lane % HELPERS;
    let srv = this.helpers[i];
    if (!srv || srv.child.exitCode !== null || srv.child.signalCode !== null) {
      const child = spawn(this.binary, ["serve"], { stdio: ["pipe", "pipe", "ignore"] });
      const started = { child, waiting: [] as Array<(answer: string) => void> };
      createInterface({ input: child.stdout! }).on("line", (line) => started.waiting.shift()?.(line));
      child.once("exit", () => {
        for (const w of started.waiting.splice(0)) w("err the fork mount helper exited");
        if (this.helpers[i] === started) this.helpers[i] = undefined;
      });
      child.stdin!.on("error", () => undefined);
      srv = this.helpers[i] = started;
    }
    const s = srv;
    const answer = await new Promise<string>((resolve) => {
      s.waiting.push(resolve);
      s.child.stdin!.write(args.join("\t") + "\n");
    });
    if (answer === "ok") return "";
    if (answer.startsWith("ok ")) return answer.slice(3);
    const msg = answer.replace(/^err /, "");
    throw msg.startsWith("busy: ") ? new ForkBusyError(msg.slice(6)) : new Error(`fork-mount ${args[0]}: ${msg}`);
  }
}

function fdOf(selfPath: string): string {
  return selfPath.replace(/^\/proc\/self\/fd\//, "");
}

function rmdirQuiet(path: string): void {
  try {
    rmdirSync(path);
  } catch {
    /* still a mount point, or gone */
  }
}

export interface Ids {
  uid: number;
  gid: number;
}

/** The parent's old workspace mount is held open for writing: it cannot be sealed now (code FORK_BUSY). */
export class ForkBusyError extends SlotpoolError {
  override name = "ForkBusyError";
}
