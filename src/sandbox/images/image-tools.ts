import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { chmodSync, copyFileSync, cpSync, existsSync, mkdirSync, openSync, readSync, closeSync, readFileSync, realpathSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { findExecutable } from "../../host/executables.js";
import { IMAGE_BASH, IMAGE_TOOLS_MOUNT } from "../isolation/isolation.js";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "../native/native-build.js";

/**
 * The tools a slot's sandbox runs in an image root, whatever the image holds (busybox only,
 * distroless, no libc at all): they never run the image's programs. One directory per
 * server, bound read-only at /run/slotpool in every image root:
 *   spawner        the per-slot spawner, linked statically (`cc -static`);
 *   bash           Debian's bash-static (the `bash` tool's shell, the terminal's, the process
 *                  sessions' launcher);
 *   bin/           busybox (static) and the applets the tools' own scripts use;
 *   tmux/          the host's tmux with its own loader and libraries (`ld.so --library-path`)
 *                  and the terminfo entries it reads, started through bin/tmux.
 * What is missing (no static bash or busybox on the host, no C compiler) makes images
 * unavailable on this server, with the reason (scripts/setup.sh installs them).
 */

export const IMAGE_TOOLS_BIN = `${IMAGE_TOOLS_MOUNT}/bin`;
export const IMAGE_SPAWNER = `${IMAGE_TOOLS_MOUNT}/spawner`;
export const IMAGE_TMUX = `${IMAGE_TOOLS_BIN}/tmux`;

/** busybox applets the tools' scripts call (the terminal's helper script, the session launcher). */
const APPLETS = ["cat", "chmod", "chown", "clear", "cp", "grep", "mkdir", "rm", "sleep", "timeout", "printf", "ls", "id", "env", "true", "false"];
/** The host's C.UTF-8 locale (Debian: libc-bin), which tmux needs. */
const LOCALE = "/usr/lib/locale/C.utf8";
/** terminfo entries tmux may look up (its default-terminal, and what clients claim). */
const TERMINFO = ["x/xterm", "x/xterm-256color", "s/screen", "s/screen-256color", "t/tmux", "t/tmux-256color", "d/dumb", "v/vt100"];

/** Whether an ELF executable is statically linked (no PT_INTERP program header). */
export function isStatic(path: string): boolean {
  const fd = openSync(path, "r");
  try {
    const h = Buffer.alloc(64);
    if (readSync(fd, h, 0, 64, 0) < 64 || h.readUInt32BE(0) !== 0x7f454c46 || h[4] !== 2) return false;
    const phoff = Number(h.readBigUInt64LE(32));
    const phentsize = h.readUInt16LE(54);
    const phnum = h.readUInt16LE(56);
    const ph = Buffer.alloc(phentsize * phnum);
    readSync(fd, ph, 0, ph.length, phoff);
    for (let i = 0; i < phnum; i++) if (ph.readUInt32LE(i * phentsize) === 3) return false;
    return true;
  } finally {
    closeSync(fd);
  }
}

function staticBinary(candidates: string[], what: string): string {
  for (const c of candidates) {
    if (existsSync(c) && isStatic(realpathSync(c))) return realpathSync(c);
  }
  throw new Error(`no static ${what} on this host (looked for ${candidates.join(", ")}; Debian: apt-get install ${what === "bash" ? "bash-static" : "busybox-static"})`);
}

/** The static spawner, compiled once per source hash (or the image's prebuilt one). */
function staticSpawner(cacheDir: string): string {
  const prebuilt = prebuiltNative("slotpool-spawner-static");
  const src = nativeSource("spawner.c");
  if (!src) {
    if (existsSync(prebuilt)) return prebuilt;
    throw new Error("spawner.c not found");
  }
  const built = compileNative("slotpool-spawner-static", src, [NATIVE_DIR, cacheDir], 0o755, ["-static"]);
  if ("error" in built) throw new Error(`${built.error} (a static build needs libc6-dev's libc.a)`);
  return built.path;
}

/** The host's tmux, its shared libraries and loader, as `ldd` lists them. */
function tmuxBundle(): { tmux: string; loader: string; libs: Array<{ soname: string; file: string }> } {
  const tmux = findExecutable("tmux");
  if (!tmux) throw new Error("tmux is not installed");
  const out = execFileSync("ldd", [tmux], { encoding: "utf8", timeout: 10_000 });
  const libs: Array<{ soname: string; file: string }> = [];
  let loader = "";
  for (const line of out.split("\n")) {
    const lib = /^\s*(\S+)\s*=>\s*(\/\S+)/.exec(line);
    if (lib) libs.push({ soname: lib[1]!, file: realpathSync(lib[2]!) });
    else if (/^\s*\/\S*ld[-\w.]*\.so/.test(line)) loader = /^\s*(\/\S+)/.exec(line)![1]!;
  }
  if (!loader) throw new Error("ldd names no dynamic loader for tmux");
  return { tmux: realpathSync(tmux), loader: realpathSync(loader), libs };
}

let built: { dir: string } | { error: string } | undefined;

/** The tools dir under `stateDir` (built once per server), or why images cannot have them here. */
export function imageTools(stateDir: string): { dir: string } | { error: string } {
  if (built) return built;
  try {
    const bash = staticBinary(["/bin/bash-static", "/usr/bin/bash-static"], "bash");
    const busybox = staticBinary(["/bin/busybox", "/usr/bin/busybox"], "busybox");
    const spawner = staticSpawner(stateDir);
    const t = tmuxBundle();
    const sources = [bash, busybox, spawner, t.tmux, t.loader, ...t.libs.map((l) => l.file), "applets-v4"];
    const hash = createHash("sha256").update(sources.join("\n")).update(readFileSync(spawner)).digest("hex").slice(0, 12);
    const dir = join(stateDir, `image-tools-${hash}`);
    if (!existsSync(join(dir, ".ready"))) {
      const tmp = `${dir}.${process.pid}.tmp`;
      rmSync(tmp, { recursive: true, force: true });
      mkdirSync(join(tmp, "bin"), { recursive: true, mode: 0o755 });
      mkdirSync(join(tmp, "tmux", "lib"), { recursive: true, mode: 0o755 });
      copyFileSync(spawner, join(tmp, "spawner"));
      copyFileSync(bash, join(tmp, "bash"));
      copyFileSync(busybox, join(tmp, "bin", "busybox"));
      for (const a of APPLETS) symlinkSync("busybox", join(tmp, "bin", a));
      copyFileSync(t.tmux, join(tmp, "tmux", "tmux"));
      copyFileSync(t.loader, join(tmp, "tmux", "ld.so"));
      // Under the names the binary asks for (its sonames), from the files they resolve to.
      for (const l of t.libs) copyFileSync(l.file, join(tmp, "tmux", "lib", l.soname));
      for (const entry of TERMINFO) {
        for (const root of ["/lib/terminfo", "/usr/share/terminfo"]) {
          const src = join(root, entry);
          if (!existsSync(src)) continue;
          mkdirSync(join(tmp, "tmux", "terminfo", entry.split("/")[0]!), { recursive: true, mode: 0o755 });
          copyFileSync(realpathSync(src), join(tmp, "tmux", "terminfo", entry));
          break;
        }
      }
      // tmux wants a UTF-8 locale: the host's C.UTF-8 (glibc does not build it in), found through LOCPATH.
      if (existsSync(LOCALE)) cpSync(LOCALE, join(tmp, "tmux", "locale", "C.utf8"), { recursive: true, dereference: true });
      const T = `${IMAGE_TOOLS_MOUNT}/tmux`;
      writeFileSync(
        join(tmp, "bin", "tmux"),
        `#!${IMAGE_BASH}\n# slotpool: the host's tmux with its own loader, libraries and locale (the image's are never used).\nexport TERMINFO=${T}/terminfo LOCPATH=${T}/locale LC_ALL=C.UTF-8\nexec ${T}/ld.so --library-path ${T}/lib ${T}/tmux "$@"\n`,
        { mode: 0o755 },
      );
      for (const f of ["spawner", "bash", "bin/busybox", "bin/tmux", "tmux/tmux", "tmux/ld.so"]) chmodSync(join(tmp, f), 0o755);
      writeFileSync(join(tmp, ".ready"), "");
      rmSync(dir, { recursive: true, force: true });
      renameSync(tmp, dir);
    }
    built = { dir };
  } catch (err) {
    built = { error: err instanceof Error ? err.message : String(err) };
  }
  return built;
}
