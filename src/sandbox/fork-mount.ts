import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { SlotpoolError } from "../protocol/errors.js";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "./native-build.js";

/**
 * The mount steps of a fork (`native/fork-mount.c`), through one long-lived helper process
 * per server (a request costs a pipe round trip, not a fork + exec). Requests are answered
 * in order; a path with a tab or newline cannot be sent and is refused.
 */
export class ForkMounter {
  private server: { child: ChildProcess; waiting: Array<(answer: string) => void> } | undefined;

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
  idmap(src: string, mountpoint: string, from: Ids, to: Ids): Promise<void> {
    return this.call(["idmap", src, mountpoint, String(from.uid), String(to.uid), String(from.gid), String(to.gid)]);
  }

  /** overlayfs at `target` (on top of what is there), lowers top first. */
  overlay(target: string, upper: string, work: string, lowers: readonly string[]): Promise<void> {
    return this.call(["overlay", target, upper, work, ...lowers]);
  }

  /**
   * In `pid`'s mount namespace: /workspace read-only, then a clone of `source` over it.
   * Rejects with a `ForkBusyError` when a process holds a file of the old mount open for writing.
   */
  seal(pid: number, source: string): Promise<void> {
    return this.call(["seal", String(pid), source]);
  }

  umount(path: string): Promise<void> {
    return this.call(["umount", path]);
  }

  close(): void {
    this.server?.child.kill();
    this.server = undefined;
  }

  private async call(args: string[]): Promise<void> {
    if (args.some((a) => /[\t\n]/.test(a))) throw new Error(`fork-mount: a path holds a tab or newline: ${JSON.stringify(args)}`);
    let srv = this.server;
    if (!srv || srv.child.exitCode !== null || srv.child.signalCode !== null) {
      const child = spawn(this.binary, ["serve"], { stdio: ["pipe", "pipe", "ignore"] });
      const started = { child, waiting: [] as Array<(answer: string) => void> };
      createInterface({ input: child.stdout! }).on("line", (line) => started.waiting.shift()?.(line));
      child.once("exit", () => {
        for (const w of started.waiting.splice(0)) w("err the fork mount helper exited");
        if (this.server === started) this.server = undefined;
      });
      child.stdin!.on("error", () => undefined);
      srv = this.server = started;
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
