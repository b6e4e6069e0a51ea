import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { bwrapArgs, READ_ONLY_ROOT } from "../../isolation/isolation.js";
import { filterArgs } from "../../isolation/seccomp.js";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "../../native/native-build.js";
import { firstChild, isRunning, killNamespaceInit, processRef, type ProcessRef } from "../../run/process-barrier.js";
import type { Slot } from "../../core/slot.js";
import type { SlotHost } from "../../workspace/slot-host.js";
import { chromiumSwitches, PROFILE_DIR } from "./chromium.js";

/**
 * How a slot's browser is started: the command Playwright runs as its "browser executable".
 *
 * Playwright talks CDP over a pipe (fds 3 and 4 of the process it spawns), so no port is ever
 * opened and a network-off slot needs none. The process it spawns is `slotpool-browser-launch`
 * (native/browser-launch.c), which, keeping fds 3/4 and its pid: writes its pid to a file (the
 * server kills the browser's PID namespace by it), joins the slot's cgroups, becomes the slot's
 * uid without capabilities under the same rlimits as a slot command, joins the network namespace
 * of the slot's terminal (so a server the task or the model started there is the browser's
 * 127.0.0.1; with network off nothing else is reachable), and becomes bubblewrap, which builds the
 * slot's sandbox (the same `bwrapArgs` as every slot command: read-only system, the workspace,
 * the slot's /tmp and /dev/shm, a fresh /proc, the slot's seccomp filter) and becomes Chromium.
 */

/** The fds bubblewrap reads its arguments and the seccomp program from (3 and 4 are the CDP pipe). */
const ARGS_FD = 5;
const FILTER_FD = 6;

let launcher: { path: string } | { error: string } | undefined;

/** The compiled launcher: SLOTPOOL_BROWSER_LAUNCHER, the image's prebuilt one, or built at first use. */
export function browserLauncher(cacheDirs: readonly string[]): { path: string } | { error: string } {
  if (launcher) return launcher;
  const explicit = process.env["SLOTPOOL_BROWSER_LAUNCHER"];
  const src = nativeSource("browser-launch.c");
  const prebuilt = prebuiltNative("slotpool-browser-launch");
  if (explicit) launcher = existsSync(explicit) ? { path: explicit } : { error: `SLOTPOOL_BROWSER_LAUNCHER=${explicit} does not exist` };
  else if (!src && existsSync(prebuilt)) launcher = { path: prebuilt };
  else if (!src) launcher = { error: "the browser launcher's source (src/sandbox/native/browser-launch.c) is missing" };
  else launcher = compileNative("slotpool-browser-launch", src, [NATIVE_DIR, ...cacheDirs], 0o755);
  return launcher;
}

export interface LaunchPlan {
  /** What Playwright spawns (the launcher) and its arguments. */
  executable: string;
  args: string[];
  /** Where the launcher writes its pid (= bubblewrap's: it execs, never forks). */
  pidFile: string;
  /** bubblewrap's arguments (deleted once the browser runs or failed). */
  argsFile: string;
}

export interface LaunchInputs {
  slot: Slot;
  launcher: string;
  chromium: string;
  /** A process in the slot terminal's namespaces: the browser joins its network namespace. */
  network: ProcessRef;
  allowNetwork: boolean;
}

/** Files of the server's own (0700, root's or the server user's): never bound into a slot. */
function browserStateDir(host: SlotHost): string {
  const dir = join(host.stateDir, "browser");
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  return dir;
}

let filterFile: { program: Buffer; path: string } | undefined;

/** The slots' seccomp program as a file the launcher opens (written once per server). */
function seccompFile(host: SlotHost): string | undefined {
  const filter = host.bwrap.filter;
  if (!filter) return undefined;
  if (filterFile?.program === filter.program && existsSync(filterFile.path)) return filterFile.path;
  const path = join(browserStateDir(host), `seccomp-${process.pid}.bpf`);
  writeFileSync(path, filter.program, { mode: 0o600 });
  filterFile = { program: filter.program, path };
  return path;
}

/** The launch of one slot's browser (its files are written now). */
export function planLaunch(host: SlotHost, input: LaunchInputs): LaunchPlan {
  const { slot } = input;
  const dir = browserStateDir(host);
  const name = `${slot.id}-${randomBytes(6).toString("hex")}`;
  const pidFile = join(dir, `${name}.pid`);
  const argsFile = join(dir, `${name}.args`);
  const uid = slot.owner?.uid ?? process.getuid?.() ?? 0;
  const gid = slot.owner?.gid ?? process.getgid?.() ?? 0;
  const internet = input.allowNetwork ? host.internetAccess : undefined;
  const bwrap = [
    // The terminal's network namespace is joined before bubblewrap runs: it must not make one.
    ...bwrapArgs({ workspaceDir: slot.workspaceDir, allowNetwork: true, identity: host.identity(slot), writableArgs: host.disks.writableArgs(slot), bootId: host.bootIds.file(slot) }),
    // Chromium's files (profile, caches, ~/.config) in the slot's /tmp, never in the workspace.
    "--setenv", "HOME", PROFILE_DIR,
    "--setenv", "XDG_CONFIG_HOME", `${PROFILE_DIR}/config`,
    "--setenv", "XDG_CACHE_HOME", `${PROFILE_DIR}/cache`,
    // The joined user namespace maps the slot's uid to root where network is on (slirp's): back to the slot's uid.
    "--uid", String(uid), "--gid", String(gid),
    ...(internet ? ["--ro-bind", internet.resolvConf, "/etc/resolv.conf"] : []),
    ...filterArgs(host.bwrap.filter, FILTER_FD),
    ...READ_ONLY_ROOT,
  ];
  writeFileSync(argsFile, Buffer.from(bwrap.map((a) => a + "\0").join(""), "utf8"), { mode: 0o600 });
  const filter = seccompFile(host);
  const limits = host.limits;
  // Without a slot cgroup (a non-root server) RLIMIT_AS cannot bound Chromium: it reserves
  // terabytes of address space it never uses. RLIMIT_DATA (what a process may make writable)
  // and V8's heap limit bound a runaway page there instead (docs/browser.md).
  const noCgroup = host.addressSpaceBytes > 0;
  const rlimits = [`nproc=${limits.maxProcesses}`, `fsize=${limits.maxFileBytes}`, "core=0", ...(noCgroup ? [`data=${limits.memoryBytes}`] : [])];
  const args = [
    "--pidfile", pidFile,
    ...host.cgroups.procsFiles(slot.index).flatMap((f) => ["--cgroup", f]),
    "--args-file", argsFile, "--args-fd", String(ARGS_FD),
    ...(filter ? ["--filter-file", filter, "--filter-fd", String(FILTER_FD)] : []),
    ...(slot.owner ? ["--uid", String(slot.owner.uid), "--gid", String(slot.owner.gid)] : []),
    ...rlimits.flatMap((r) => ["--rlimit", r]),
    "--netns-of", `${input.network.pid}:${input.network.startTime}`,
    "--",
    host.bwrap.path!, "--args", String(ARGS_FD), "--", input.chromium,
    // Chromium ignores it; on the host it tells whose browser a process is (ps, the tests).
    `--slotpool-slot=${slot.id}`,
    ...chromiumSwitches({ v8HeapMb: noCgroup ? Math.max(128, Math.floor(limits.memoryBytes / 2 / 1024 / 1024)) : undefined }),
  ];
  return { executable: input.launcher, args, pidFile, argsFile };
}

/** The pid a launcher wrote (undefined before it ran, or when it could not). */
export function readPid(file: string): number | undefined {
  try {
    const n = Number(readFileSync(file, "utf8").trim());
    return Number.isInteger(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Ends a slot's browser and resolves once no process of its sandbox runs (the reset barrier):
 * `pid` is the launcher's, which became bubblewrap; its first child is the init of the
 * browser's PID namespace, SIGKILLed and waited for (the kernel ends every other process of
 * the namespace first); then bubblewrap itself, outside it.
 */
export async function killBrowserTree(pid: number | undefined): Promise<void> {
  if (pid === undefined) return;
  const self = processRef(pid);
  const init = firstChild(pid);
  if (init) await killNamespaceInit(init).catch(() => undefined);
  if (self && isRunning(self)) {
    try {
      process.kill(pid, "SIGKILL");
    } catch {
      /* gone */
    }
  }
}
