import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { SlotpoolError } from "../../protocol/errors.js";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "../native/native-build.js";

/** Helper processes per server: an unmount waits for an RCU grace period (milliseconds under load), so a fork's children unmount in parallel. */
const HELPERS = 4;

type Helper = { child: ChildProcess; waiting: Array<(answer: string) => void> };

/**
 * The mount steps of a fork (`native/fork-mount.c`), through a few long-lived helper
 * processes per server (a request costs a pipe round trip, not a fork + exec). Each request
 * names a `lane` (a slot index): requests of one lane go to one helper, in order; lanes
 * spread over the helpers. A path with a tab or newline cannot be sent and is refused.
 */
export class ForkMounter {
  private readonly helpers: Array<Helper | undefined> = new Array(HELPERS).fill(undefined);

  constructor(readonly binary: string) {}

  /** The helper, compiled once per source hash; or why it cannot be. */
  static build(cacheDir: string): ForkMounter | { error: string } {
    const src = nativeSource("fork-mount.c");
    if (!src) {
      const pre = prebuiltNative("slotpool-fork-mount");
      return existsSync(pre) ? new ForkMounter(pre) : { error: "fork-mount.c not found" };
    }
    const built = compileNative("slotpool-fork-mount", src, [NATIVE_DIR, cacheDir], 0o700);
    return "path" in built ? new ForkMounter(built.path) : built;
  }

  /** A read-only clone of `src` at `mountpoint`, files of `from` appearing as `to`'s. */
  idmap(lane: number, src: string, mountpoint: string, from: Ids, to: Ids): Promise<void> {
    return this.call(lane, ["idmap", src, mountpoint, String(from.uid), String(to.uid), String(from.gid), String(to.gid)]);
  }

  /** overlayfs at `target` (on top of what is there), lowers top first. */
  overlay(lane: number, target: string, upper: string, work: string, lowers: readonly string[]): Promise<void> {
    return this.call(lane, ["overlay", target, upper, work, ...lowers]);
  }

  /**
   * In `pid`'s mount namespace: /workspace read-only, then a clone of `source` over it.
   * Rejects with a `ForkBusyError` when a process holds a file of the old mount open for writing.
   */
  seal(lane: number, pid: number, source: string): Promise<void> {
    return this.call(lane, ["seal", String(pid), source]);
  }

  umount(lane: number, path: string): Promise<void> {
    return this.call(lane, ["umount", path]);
  }

  /** A read-only clone of `src` at `mountpoint` (a layer's own handle, see fork-mount.c). */
  bind(lane: number, src: string, mountpoint: string): Promise<void> {
    return this.call(lane, ["bind", src, mountpoint]);
  }

  /** Detaches `path` from a detached grandchild (the freeing of a last reference does not hold the helper). */
  umountInBackground(lane: number, path: string): Promise<void> {
    return this.call(lane, ["umount-bg", path]);
  }

  close(): void {
    for (const h of this.helpers) h?.child.kill();
    this.helpers.fill(undefined);
  }

  private async call(lane: number, args: string[]): Promise<void> {
    if (args.some((a) => /[\t\n]/.test(a))) throw new Error(`fork-mount: a path holds a tab or newline: ${JSON.stringify(args)}`);
    const i = lane % HELPERS;
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
    if (answer === "ok") return;
    const msg = answer.replace(/^err /, "");
    throw msg.startsWith("busy: ") ? new ForkBusyError(msg.slice(6)) : new Error(`fork-mount ${args[0]}: ${msg}`);
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
