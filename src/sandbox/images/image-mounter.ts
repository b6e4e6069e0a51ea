import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "../native/native-build.js";

/**
 * The image mount helper (`native/image-mount.c`) as the image room uses it: one long-lived
 * process per server (`serve` mode, one request per line), so a reset into an image costs a
 * pipe round trip. It holds the slots' user namespaces and their id-mapped layer handles as
 * file descriptors of its own (`handlePath`): detached mounts in no mount table, so the
 * server's mount namespace, which every new slot namespace copies, does not grow with them.
 */
export class ImageMounter {
  private server: { child: ChildProcess; waiting: Array<(answer: string) => void> } | undefined;

  private constructor(readonly binary: string) {}

  /** The helper, compiled once per source hash; or why it cannot be, or why this kernel cannot serve images. */
  static build(cacheDir: string): ImageMounter | { error: string } {
    const src = nativeSource("image-mount.c");
    let binary: string;
    if (!src) {
      const pre = prebuiltNative("slotpool-image-mount");
      if (!existsSync(pre)) return { error: "image-mount.c not found" };
      binary = pre;
    } else {
      const built = compileNative("slotpool-image-mount", src, [NATIVE_DIR, cacheDir], 0o700);
      if ("error" in built) return built;
      binary = built.path;
    }
    // Layer handles are detached mounts: overlayfs takes them as layers from Linux 6.15 on.
    const probe = spawnSync(binary, ["serve"], { input: `probe\t${join(cacheDir, `image-probe-${randomBytes(4).toString("hex")}`)}\n`, encoding: "utf8", timeout: 10_000 });
    const answer = (probe.stdout ?? "").trim();
    if (probe.error) return { error: `the image mount helper ${binary} could not run: ${probe.error.message}` };
    if (answer !== "ok") return { error: `overlayfs here does not take a detached mount as a layer (Linux 6.15 or newer does): ${answer.replace(/^err /, "") || "no answer"}` };
    return new ImageMounter(binary);
  }

  /** One request; resolves with what follows "ok" ("" or a number), rejects with the helper's message. */
  async call(args: readonly string[]): Promise<string> {
    if (args.some((a) => /[\t\n]/.test(a))) throw new Error(`a path with a tab or newline cannot be mounted: ${JSON.stringify(args.find((a) => /[\t\n]/.test(a)))}`);
    const srv = this.start();
    const answer = await new Promise<string>((resolve) => {
      srv.waiting.push(resolve);
      srv.child.stdin!.write(args.join("\t") + "\n");
    });
    if (answer === "ok") return "";
    if (answer.startsWith("ok ")) return answer.slice(3);
    throw new Error(answer.replace(/^err /, ""));
  }

  /** The helper's pid (starting it if none runs). */
  get pid(): number {
    return this.start().child.pid!;
  }

  /** A descriptor the helper answered with, as another process opens it. */
  handlePath(fd: string): string {
    return `/proc/${this.start().child.pid}/fd/${fd}`;
  }

  /** A descriptor as the helper itself names it (a `lowerdir+` of its own `overlay`). */
  ownPath(fd: string): string {
    return `/proc/self/fd/${fd}`;
  }

  private start(): { child: ChildProcess; waiting: Array<(answer: string) => void> } {
    const srv = this.server;
    if (srv && srv.child.exitCode === null && srv.child.signalCode === null) return srv;
    // Its descriptors (namespaces, layer handles) die with it: a restarted helper has none, and
    // the image room must not name the old ones (`generation` tells it).
    const child = spawn(this.binary, ["serve"], { stdio: ["pipe", "pipe", "ignore"] });
    const started = { child, waiting: [] as Array<(answer: string) => void> };
    createInterface({ input: child.stdout! }).on("line", (line) => started.waiting.shift()?.(line));
    child.once("exit", () => {
      for (const w of started.waiting.splice(0)) w("err the image mount helper exited");
      if (this.server === started) this.server = undefined;
    });
    child.once("error", () => undefined);
    child.stdin!.on("error", () => undefined);
    this.server = started;
    this.started++;
    return started;
  }

  private started = 0;

  /** Which run of the helper is the current one (starting it if none runs): descriptors of an older one are gone. */
  get generation(): number {
    this.start();
    return this.started;
  }

  close(): void {
    this.server?.child.kill();
    this.server = undefined;
  }
}
