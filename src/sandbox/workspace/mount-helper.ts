import { execFile, spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { promisify } from "node:util";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "../native/native-build.js";

const run = promisify(execFile);

/**
 * The mount helper (`native/template-mount.c`): the server's only way to mount (Node has
 * no mount syscalls). Slot disks (`slot-disk.ts`) and template views
 * (`workspace-overlay.ts`) send it requests. One long-lived helper per user (`serve`
 * mode: one request per line) so a reset costs a pipe round trip, not a fork + exec, and
 * every mount call runs in that process, never on the server's event loop.
 */
export class MountHelper {
  private server: { child: ChildProcess; waiting: Array<(answer: string) => void> } | undefined;

  constructor(readonly path: string) {}

  /** One request; rejects with the helper's error message. */
  async call(args: string[]): Promise<void> {
    // A path with a tab or newline cannot travel in serve mode's line format: one exec.
    if (args.some((a) => /[\t\n]/.test(a))) {
      try {
        await run(this.path, args);
        return;
      } catch (err) {
        throw new Error((err as { stderr?: string }).stderr?.trim() || (err instanceof Error ? err.message : String(err)));
      }
    }
    let srv = this.server;
    if (!srv || srv.child.exitCode !== null || srv.child.signalCode !== null) {
      const child = spawn(this.path, ["serve"], { stdio: ["pipe", "pipe", "ignore"] });
      const started = { child, waiting: [] as Array<(answer: string) => void> };
      createInterface({ input: child.stdout! }).on("line", (line) => started.waiting.shift()?.(line));
      child.once("exit", () => {
        for (const w of started.waiting.splice(0)) w("err the mount helper exited");
        if (this.server === started) this.server = undefined;
      });
      child.once("error", () => undefined);
      child.stdin!.on("error", () => undefined);
      srv = this.server = started;
    }
    const answer = await new Promise<string>((resolve) => {
      srv.waiting.push(resolve);
      srv.child.stdin!.write(args.join("\t") + "\n");
    });
    if (answer !== "ok") throw new Error(answer.replace(/^err /, ""));
  }

  /** Ends the long-lived helper (shutdown). */
  close(): void {
    this.server?.child.kill();
    this.server = undefined;
  }
}

let helperPath: string | null | undefined;
let helperError: string | undefined;

/** Compiles (once, cached by source hash) the mount helper; null when it cannot (`mountHelperError` says why). */
export function mountHelperBinary(cacheDir: string): string | null {
  if (helperPath !== undefined && (helperPath === null || existsSync(helperPath))) return helperPath;
  const src = nativeSource("template-mount.c");
  const prebuilt = prebuiltNative("slotpool-template-mount");
  if (!src) {
    helperPath = existsSync(prebuilt) ? prebuilt : null;
    if (!helperPath) helperError = "template-mount.c not found";
    return helperPath;
  }
  // Next to this module first (outlives any one server's data dir), else the state dir.
  const built = compileNative("slotpool-template-mount", src, [NATIVE_DIR, cacheDir], 0o700);
  if ("path" in built) return (helperPath = built.path);
  helperError = built.error;
  return (helperPath = null);
}

export function mountHelperError(): string | undefined {
  return helperError;
}
