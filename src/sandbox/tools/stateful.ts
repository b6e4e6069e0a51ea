import type { ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { closeSync, constants as fsc, fchownSync, mkdirSync, openSync } from "node:fs";
import { join } from "node:path";
import type { ToolOutcome } from "../core/tool-outcome.js";
import { CappedOutput } from "../run/output.js";
import { runProcess, type RunResult } from "../run/runner.js";
import type { SlotHost } from "../workspace/slot-host.js";
import { clearMountPoint, createSlotFile, readSlotFile } from "../workspace/no-follow.js";
import { SlotNamespace, USERNS_FD } from "../isolation/spawner.js";
import { outputDir } from "./bash.js";
import { keepExports, type TerminalState } from "./terminal-state.js";
export { keepExports, type TerminalState };
import { IMAGE_TOOLS_BIN } from "../images/image-tools.js";
import { terminalPrologue, terminalShell, terminalTmux } from "./terminal-commands.js";
import type { Slot } from "../core/slot.js";
import { bwrapArgs, READ_ONLY_ROOT, SANDBOX_PATH } from "../isolation/isolation.js";
import { filterArgs } from "../isolation/seccomp.js";

import { ulimitPrologue } from "../isolation/limits.js";
/** The fd a terminal attach's bubblewrap reads the seccomp program from (ws.ts writes it). */
export const ATTACH_FILTER_FD = 4;
import { firstChild, killNamespaceInit, type ProcessRef } from "../run/process-barrier.js";
import { takeInjectedFault } from "./test-faults.js";

/**
 * `bash_stateful` and `tmux`: one persistent terminal per slot, a tmux session "main"
 * running bash, inside the same isolation as `bash` (its own long-lived namespace per
 * slot, a third "holder" in keep mode: what a command starts there stays until reset).
 *
 * A `bash_stateful` call writes the command to a file in the session's private /tmp,
 * types ` . file >out 2>err </dev/null; echo $? >rc; tmux wait-for -S chan` into the
 * shell and waits on the channel: `cd`, variables and background jobs persist (the file
 * is sourced by the session's shell) and each call gets its own stdout, stderr and exit
 * code. On timeout the waiter is killed, the session gets C-c, and the partial output is
 * returned. `tmux` actions drive the same session (start, send_keys, capture, stop), and a
 * WebSocket can attach to it read-only.
 */

export interface StatefulArgs {
  command?: string;
  action?: "start" | "send_keys" | "capture" | "stop";
  keys?: string;
  enter?: boolean;
  lines?: number;
  timeout?: number;
  allow_network?: boolean;
  require_sandbox?: boolean;
  require_stateful_sandbox?: boolean;
}

export function shQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

const TMUX_KEY_NAME = /^(C-[a-z\\\]^_@]|M-[a-z0-9]|Enter|Escape|Tab|BTab|BSpace|Space|Up|Down|Left|Right|Home|End|PageUp|PageDown|PPage|NPage|IC|DC|F\d{1,2})$/;

interface Session {
  holder: SlotNamespace | null;
  allowNetwork: boolean;
  /** In an image root: the image's PATH, given back to the terminal's shell (the helper scripts run the image tools' busybox). */
  imagePath?: string | undefined;
  /** Whose the session's files are: the slot's uid, or in an image root its user's. */
  owner: { uid: number; gid: number } | undefined;
  /**
   * Host dir of the session's files (tmux socket, command and output files), the slot's
   * own (0700, its uid). Sandboxed it is bound at /tmp/.slotpool in the session's
   * namespace and in the sandbox an attach runs in; unsandboxed it is used as is.
   */
  hostDir: string;
  seq: number;
}

/** Where the session's files appear inside the sandbox. */
const SESSION_MOUNT = "/tmp/.slotpool";
/** What a fork reads of the parent terminal's state at most (the slot writes it): `export -p` output, a working directory. */
const MAX_TERMINAL_ENV_BYTES = 1 << 20;
const MAX_TERMINAL_CWD_BYTES = 64 * 1024;

export class StatefulSessions {
  private readonly sessions = new Map<number, Session>();
  /** Per slot index: the terminal attach processes (WebSocket viewers) running now. */
  private readonly attaches = new Map<number, Set<ChildProcess>>();
  /** Per slot: where a fork's child's terminal starts (the parent's at the fork), until its first session. */
  private readonly pendingSeeds = new Map<number, TerminalState>();
  /** The start directory of a seeded session (shell-quoted). */
  private readonly seeds = new WeakMap<Session, string>();

  constructor(private readonly service: SlotHost) {}

  private dir(session: Session): string {
    return session.holder ? SESSION_MOUNT : session.hostDir;
  }

  private tmuxCmd(session: Session): string {
    return `${terminalTmux(session.imagePath)} -S ${shQuote(this.dir(session) + "/tmux.sock")}`;
  }

  private prologue(session: Session): string {
    return terminalPrologue(session.imagePath);
  }

  /** Shell that makes sure the session exists (prints "started" when it created it). */
  private ensureScript(session: Session): string {
    const D = shQuote(this.dir(session));
    const T = this.tmuxCmd(session);
    const Dp = this.dir(session);
    const Tp = T.replace(/'/g, "");
    const [rm, clear] = session.imagePath !== undefined ? [`${IMAGE_TOOLS_BIN}/rm`, `${IMAGE_TOOLS_BIN}/clear`] : ["rm", "clear"];
    // Typed once into the session's shell: the runner function each call invokes (so the
    // pane shows ` __sp <id>` per call), and an EXIT trap that releases a waiting call if
    // the command ends the shell.
    const setup =
      // After a fork (fork.ts) the shell's working directory is on the old, read-only mount:
      // `recd` makes the next call enter it again by its path, on the new one. After each
      // call the shell's exported environment and directory are saved, for the children of
      // a later fork (their terminals start from them).
      ` HISTCONTROL=ignorespace; __sp() { export SLOTPOOL_N=$1; if [ -e ${Dp}/recd ]; then ${rm} -f ${Dp}/recd; __o=$OLDPWD; cd -- "$PWD" 2>/dev/null; OLDPWD=$__o; fi;` +
      ` . ${Dp}/c.$1 >${Dp}/o.$1 2>${Dp}/e.$1 </dev/null; __r=$?; export -p >${Dp}/x.env 2>/dev/null; printf %s "$PWD" >${Dp}/x.cwd; echo $__r >${Dp}/r.$1; ${Tp} wait-for -S w.$1; };` +
      ` trap 'echo $? > ${Dp}/r.$SLOTPOOL_N; ${Tp} wait-for -S w.$SLOTPOOL_N' EXIT;` +
      // A fork's child: the parent's exported environment.
      ` [ -e ${Dp}/seed.env ] && . ${Dp}/seed.env; ${clear}`;
    const cwd = this.seeds.get(session) ?? `"$PWD"`;
    return [
      this.prologue(session) + `mkdir -p ${D} && chmod 700 ${D}`,
      `if ! ${T} has-session -t main 2>/dev/null; then`,
      `  ${T} new-session -d -s main -x 200 -y 50 -c ${cwd} ${shQuote(terminalShell(session.imagePath))} || exit 90`,
      `  ${T} set-option -t main history-limit 10000 >/dev/null`,
      `  ${T} send-keys -t main -l ${shQuote(setup)} && ${T} send-keys -t main Enter`,
      `  echo started`,
      `fi`,
    ].join("\n");
  }

  private session(slot: Slot, allowNetwork: boolean): Session {
    let s = this.sessions.get(slot.index);
    if (s && s.holder && (!s.holder.alive || s.allowNetwork !== allowNetwork)) {
      // Dead, or started under another network setting: start over (network setting wins over state).
      s.holder.kill();
      s = undefined;
    }
    if (!s) {
      const svc = this.service;
      const image = svc.imageRoots.rootFor(slot, USERNS_FD);
      const owner = image ? image.owner : slot.owner;
      const hostDir = this.hostDir(slot, owner);
      if (svc.bwrap.available && svc.spawnerPath) {
        // The session dir is mounted at /tmp/.slotpool: what the slot left there in its /tmp instead of a dir goes.
        const tmp = svc.disks.scratchDirs(slot)[0];
        if (tmp) clearMountPoint(tmp, SESSION_MOUNT.slice("/tmp/".length));
        const holder = new SlotNamespace({
          bwrapPath: svc.bwrap.path!,
          spawnerPath: svc.spawnerPath,
          filter: svc.bwrap.filter,
          workspaceDir: slot.workspaceDir,
          allowNetwork,
          internet: svc.internetAccess,
          writableArgs: svc.disks.writableArgs(slot, image !== undefined),
          bootId: svc.bootIds.file(slot),
          identity: svc.identity(slot),
          extraBinds: [[hostDir, SESSION_MOUNT]],
          uid: slot.owner?.uid,
          gid: slot.owner?.gid,
          onSpawn: (pid) => svc.cgroups.place(slot.index, pid),
          image,
          netns: image && allowNetwork ? svc.slotNetworks.holder(slot.index, svc.internetAccess, slot.owner, (pid) => svc.cgroups.place(slot.index, pid), image.parentFd) : undefined,
        });
        const imagePath = image ? (image.root.env.find((e) => e.startsWith("PATH="))?.slice(5) ?? "") : undefined;
        s = { holder, allowNetwork, hostDir, seq: 0, imagePath, owner };
      } else {
        s = { holder: null, allowNetwork, hostDir, seq: 0, owner };
      }
      this.sessions.set(slot.index, s);
      const seed = this.pendingSeeds.get(slot.index);
      if (seed) {
        this.pendingSeeds.delete(slot.index);
        createSlotFile(hostDir, "seed.env", seed.env, owner);
        // Unsandboxed, the shell sees host paths: the parent's workspace path becomes this slot's.
        this.seeds.set(s, shQuote(s.holder ? seed.cwd : seed.cwd.replace(/^\/workspace(?=\/|$)/, slot.workspaceDir)));
      }
    }
    return s;
  }

  /**
   * A process inside the slot's terminal namespace, which is started for that network setting
   * if it is not up: the slot's browser joins its network namespace, so a server the terminal
   * runs (`python3 -m http.server &`) is on the browser's loopback. Undefined when the terminal
   * is not sandboxed (no bubblewrap or spawner).
   */
  async networkProcess(slot: Slot, allowNetwork: boolean): Promise<ProcessRef | undefined> {
    const holder = this.session(slot, allowNetwork).holder;
    if (!holder) return undefined;
    await holder.start();
    // bubblewrap's first child: the init of the namespace (as the reset barrier finds it).
    return holder.pid !== undefined ? (firstChild(holder.pid) ?? undefined) : undefined;
  }

  /**
   * The slot's session dir, created empty for the slot's uid: on its bounded disk (so what the
   * session writes counts against the bound and goes with the disk at reset), else in the
   * server's state dir. Its parent is never inside the slot's reach (no path of its namespaces leads there), so the
   * slot owns what is in the dir but can never swap the dir itself for a symlink: the server's
   * accesses to the session files (no-follow.ts) then only have one name to distrust. A new
   * name each time: an old one may still be being deleted in the background.
   */
  private hostDir(slot: Slot, owner: { uid: number; gid: number } | undefined): string {
    const name = `term_${slot.index}_${randomBytes(4).toString("hex")}`;
    const parent = this.service.disks.sessionDir(slot) ?? this.service.stateDir;
    mkdirSync(parent, { recursive: true, mode: 0o711 });
    const dir = join(parent, name);
    mkdirSync(dir, { mode: 0o700 });
    if (owner) {
      const fd = openSync(dir, fsc.O_RDONLY | fsc.O_DIRECTORY | fsc.O_NOFOLLOW);
      try {
        fchownSync(fd, owner.uid, owner.gid);
      } finally {
        closeSync(fd);
      }
    }
    return dir;
  }

  /**
   * Runs a helper script in the session's namespace (keep mode: it may leave processes).
   * `signal`: the slot's abort signal as the call found it (a reset replaces the slot's
   * controller, and the answer must read why this one fired). A session whose sandbox
   * cannot start answers with `spawnError` (the `sandbox_start` marker), as `bash` does.
   */
  private async exec(slot: Slot, session: Session, script: string, timeoutS: number, output: CappedOutput, signal = slot.abortSignal): Promise<RunResult> {
    const svc = this.service;
    if (session.holder) {
      const holder = session.holder;
      try {
        return await this.runInHolder(holder, script, timeoutS, output, signal);
      } catch (err) {
        // A dead holder is replaced by the next call (session()); this one could not start.
        holder.kill();
        return { exitCode: null, signal: null, timedOut: false, aborted: signal.aborted, durationMs: 0, ...(signal.aborted ? {} : { spawnError: err instanceof Error ? err.message : String(err) }) };
      }
    }
    return runProcess({
      file: "/bin/bash",
      args: ["-c", script],
      cwd: slot.workspaceDir,
      env: { HOME: slot.workspaceDir, PATH: SANDBOX_PATH, LANG: "C.UTF-8", TERM: "xterm" },
      ...(slot.owner ? { uid: slot.owner.uid, gid: slot.owner.gid } : {}),
      timeoutMs: timeoutS * 1000,
      output,
      signal,
    });
  }

  private runInHolder(holder: SlotNamespace, script: string, timeoutS: number, output: CappedOutput, signal: AbortSignal): Promise<RunResult> {
    const svc = this.service;
    return holder.run({
      command: script,
      cpuSeconds: 0,
      maxProcesses: svc.limits.maxProcesses,
      maxFileBytes: svc.limits.maxFileBytes,
      addressSpaceBytes: svc.addressSpaceBytes,
      outputCap: svc.limits.outputCap,
      outputFileName: output.fileName,
      keep: true,
      timeoutMs: timeoutS * 1000,
      output,
      signal,
    });
  }

  private refuse(args: StatefulArgs): ToolOutcome | null {
    const svc = this.service;
    const sandboxed = svc.bwrap.available && svc.spawnerPath !== null;
    if (!sandboxed && (args.require_stateful_sandbox || args.require_sandbox)) {
      return {
        success: false,
        output: "",
        error: `stateful sandbox required but unavailable: ${svc.bwrap.reason ?? svc.spawnerReason ?? "bubblewrap cannot be used"}; refusing to start an unsandboxed terminal (require_stateful_sandbox is set)`,
        metadata: { exit_code: null, sandboxed: false, network_isolated: false },
      };
    }
    return null;
  }

  private newOutput(slot: Slot): CappedOutput {
    const svc = this.service;
    const image = svc.imageRoots.rootFor(slot, USERNS_FD);
    return new CappedOutput({ cap: svc.limits.outputCap, workspaceDir: outputDir(slot, image?.root.workingDir), fileName: svc.newOutputName(), owner: image ? image.owner : slot.owner });
  }

  async bashStateful(slot: Slot, args: StatefulArgs & { command: string }, envelopeTimeout: number | undefined): Promise<ToolOutcome> {
    const refused = this.refuse(args);
    if (refused) return refused;
    const svc = this.service;
    const allowNetwork = svc.effectiveNetwork(args.allow_network ?? svc.defaultAllowNetwork);
    const timeoutS = Math.min(args.timeout ?? envelopeTimeout ?? svc.limits.defaultTimeoutS, svc.limits.maxTimeoutS);
    const session = this.session(slot, allowNetwork);
    const n = `${Date.now().toString(36)}${(session.seq++).toString(36)}`;
    const D = this.dir(session);
    const T = this.tmuxCmd(session);
    const line = ` __sp ${n}`;
    const script = [
      this.ensureScript(session) + " >/dev/null",
      `printf '%s\\n' ${shQuote(args.command)} > ${D}/c.${n}`,
      `${T} send-keys -t main -l ${shQuote(line)} && ${T} send-keys -t main Enter || exit 91`,
      // Woken by the shell; re-checked every 0.5 s so a shell that died (or a wake-up lost
      // while tmux exits) never leaves the call waiting until its timeout.
      `until [ -e ${D}/r.${n} ]; do timeout 0.5 ${T} wait-for w.${n} 2>/dev/null; [ -e ${D}/r.${n} ] && break; ${T} has-session -t main 2>/dev/null || break; done`,
      `cat ${D}/o.${n}; cat ${D}/e.${n} >&2`,
      `rc=$(cat ${D}/r.${n} 2>/dev/null || echo 0)`,
      `rm -f ${D}/c.${n} ${D}/o.${n} ${D}/e.${n} ${D}/r.${n}`,
      `exit $rc`,
    ].join("\n");
    const output = this.newOutput(slot);
    // Captured now: a reset replaces the slot's controller, and the answer must read why this one fired.
    const signal = slot.abortSignal;
    const fault = takeInjectedFault(args.command);
    if (fault === "reset") setTimeout(() => slot.killRunning("reset"), 300).unref();
    if (fault === "shutdown") setTimeout(() => process.kill(process.pid, "SIGINT"), 300).unref();
    const res: RunResult =
      fault === "sandbox_start"
        ? { exitCode: null, signal: null, timedOut: false, aborted: false, durationMs: 0, spawnError: "the terminal's sandbox did not start within 10 s (injected by SLOTPOOL_TEST_FAULTS_DIR)" }
        : await this.exec(slot, session, script, timeoutS, output, signal);
    const ctx = { sandboxed: session.holder !== null, networkIsolated: session.holder !== null && !allowNetwork, timeoutS, abortReason: signal.reason };
    if (res.timedOut) {
      // Interrupt the command in the session and hand back what it printed so far.
      const partial = this.newOutput(slot);
      await this.exec(slot, session, `${this.prologue(session)}${T} send-keys -t main C-c; sleep 0.1; cat ${D}/o.${n} 2>/dev/null; cat ${D}/e.${n} 2>/dev/null >&2; rm -f ${D}/c.${n} ${D}/o.${n} ${D}/e.${n} ${D}/r.${n}`, 10, partial);
      return this.service.outcome(res, partial, ctx);
    }
    return this.service.outcome(res, output, ctx);
  }

  async tmux(slot: Slot, args: StatefulArgs & { action: "start" | "send_keys" | "capture" | "stop" }, envelopeTimeout: number | undefined): Promise<ToolOutcome> {
    const refused = this.refuse(args);
    if (refused) return refused;
    const svc = this.service;
    const allowNetwork = svc.effectiveNetwork(args.allow_network ?? svc.defaultAllowNetwork);
    const timeoutS = Math.min(args.timeout ?? envelopeTimeout ?? 30, svc.limits.maxTimeoutS);
    if (args.action === "stop") {
      await this.stop(slot);
      return { success: true, output: "tmux session stopped", error: "", metadata: { exit_code: 0 } };
    }
    const session = this.session(slot, allowNetwork);
    const T = this.tmuxCmd(session);
    let script: string;
    switch (args.action) {
      case "start":
        script = `${this.ensureScript(session)} | grep -q started && echo 'tmux session started' || echo 'tmux session already running'`;
        break;
      case "send_keys": {
        const keys = args.keys ?? "";
        const send = TMUX_KEY_NAME.test(keys) ? `${T} send-keys -t main ${keys}` : `${T} send-keys -t main -l ${shQuote(keys)}`;
        const enter = args.enter ?? !TMUX_KEY_NAME.test(keys);
        script = `${this.ensureScript(session)} >/dev/null\n${send}${enter ? ` && ${T} send-keys -t main Enter` : ""} && echo 'keys sent'`;
        break;
      }
      case "capture":
        script = `${this.ensureScript(session)} >/dev/null\n${T} capture-pane -p -t main -S -${args.lines ?? 50}`;
        break;
    }
    const output = this.newOutput(slot);
    const signal = slot.abortSignal;
    const res = await this.exec(slot, session, script, timeoutS, output, signal);
    return this.service.outcome(res, output, { sandboxed: session.holder !== null, networkIsolated: session.holder !== null && !allowNetwork, timeoutS, abortReason: signal.reason });
  }

  /**
   * How to attach to the slot's terminal read-only (WebSocket): a tmux client in control
   * mode (`-C`, read-only `-r`), or null when the slot has no session. The socket belongs
   * to the slot, which may have replaced tmux's server with its own program — and a tmux
   * server can make its client run commands. So the client runs in a sandbox of its own,
   * the same as the slot's (its uid, no network, its cgroup, the same rlimits as a slot
   * command), with only the session dir bound in (no workspace: an empty read-only
   * /workspace): whatever it is made to run stays inside the slot's walls, writes nothing
   * of the slot's, and dies at the slot's reset (`trackAttach`, `stop`).
   * `timeoutS`: how long the viewer may stay (the slot's longest command timeout).
   */
  attachCommand(slot: Slot): { sandboxArgs: string[] | null; command: string[]; hostDir: string; timeoutS: number } | null {
    const s = this.sessions.get(slot.index);
    if (!s) return null;
    const svc = this.service;
    const timeoutS = svc.limits.maxTimeoutS;
    // RLIMIT_AS too where no slot cgroup bounds memory, as for every slot command.
    const addressSpace = svc.addressSpaceBytes > 0 ? `ulimit -H -S -v ${Math.floor(svc.addressSpaceBytes / 1024)} 2>/dev/null\n` : "";
    const limited = (tmux: string[]): string[] => ["/bin/bash", "-c", `${ulimitPrologue(svc.limits, timeoutS)}${addressSpace}exec "$@"`, "slotpool-attach", ...tmux];
    if (!s.holder) {
      return { sandboxArgs: null, command: limited(["tmux", "-S", join(s.hostDir, "tmux.sock"), "-C", "attach-session", "-r", "-t", "main"]), hostDir: s.hostDir, timeoutS };
    }
    if (!s.holder.alive) return null;
    return {
      sandboxArgs: [
        ...bwrapArgs({ workspaceDir: null, allowNetwork: false, identity: svc.identity(slot) }),
        "--bind", s.hostDir, SESSION_MOUNT,
        // The program comes in on fd 4 (ws.ts sends it; 3 carries these arguments).
        ...filterArgs(svc.bwrap.filter, ATTACH_FILTER_FD),
        ...READ_ONLY_ROOT,
      ],
      command: limited(["tmux", "-S", `${SESSION_MOUNT}/tmux.sock`, "-C", "attach-session", "-r", "-t", "main"]),
      hostDir: s.hostDir,
      timeoutS,
    };
  }

  /** The pid of a process in the slot's terminal namespace (its mount namespace is the terminal's), if one runs. */
  terminalPid(slot: Slot): number | undefined {
    const h = this.sessions.get(slot.index)?.holder;
    return h?.alive && h.pid !== undefined ? firstChild(h.pid)?.pid : undefined;
  }

  /**
   * The terminal's working directory (as the sandbox sees it) and exported environment
   * after its last `bash_stateful` call (what a fork's children start from); undefined
   * without a terminal.
   */
  terminalState(slot: Slot): TerminalState | undefined {
    const s = this.sessions.get(slot.index);
    if (!s) return undefined;
    let env = "";
    let cwd = "/workspace";
    // The slot writes these files: never followed, bounded, and anything odd means the defaults.
    try {
      env = keepExports(readSlotFile(s.hostDir, "x.env", MAX_TERMINAL_ENV_BYTES, s.owner) ?? "");
    } catch (err) {
      this.service.logger.warn({ slot: slot.id, err: err instanceof Error ? err.message : String(err) }, "fork: the terminal's environment is not carried over");
    }
    try {
      const c = readSlotFile(s.hostDir, "x.cwd", MAX_TERMINAL_CWD_BYTES, s.owner);
      if (c !== undefined) cwd = s.holder ? c : c.startsWith(slot.workspaceDir) ? "/workspace" + c.slice(slot.workspaceDir.length) : "/workspace";
    } catch (err) {
      this.service.logger.warn({ slot: slot.id, err: err instanceof Error ? err.message : String(err) }, "fork: the terminal's directory is not carried over");
    }
    return { cwd, env };
  }

  /** The slot's next terminal starts from `state` (a fork's child); dropped by reset. */
  seed(slot: Slot, state: TerminalState): void {
    this.pendingSeeds.set(slot.index, state);
  }

  /** After a fork: the terminal's next call enters its working directory again (on the new mount). */
  reanchor(slot: Slot): void {
    const s = this.sessions.get(slot.index);
    if (!s) return;
    // Only its existence matters: whatever the slot put there already is left as it is.
    createSlotFile(s.hostDir, "recd", "", s.owner);
  }

  /** Registers a running attach process of the slot: killed (and waited for) by the slot's reset. */
  trackAttach(slot: Slot, child: ChildProcess): void {
    let set = this.attaches.get(slot.index);
    if (!set) this.attaches.set(slot.index, (set = new Set()));
    set.add(child);
    child.once("exit", () => set.delete(child));
  }

  /** Kills the slot's attach processes and waits until each one's sandbox is gone. */
  private async killAttaches(slot: Slot): Promise<void> {
    const set = this.attaches.get(slot.index);
    if (!set || set.size === 0) return;
    await Promise.all(
      [...set].map(async (child) => {
        if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) return;
        const init = firstChild(child.pid);
        const exited = new Promise<void>((r) => child.once("exit", () => r()));
        try {
          process.kill(-child.pid, "SIGKILL");
        } catch {
          child.kill("SIGKILL");
        }
        await Promise.all([exited, init ? killNamespaceInit(init) : undefined]);
      }),
    );
  }

  async stop(slot: Slot): Promise<void> {
    this.pendingSeeds.delete(slot.index);
    await this.killAttaches(slot);
    const s = this.sessions.get(slot.index);
    this.sessions.delete(slot.index);
    if (!s) return;
    if (s.holder) await s.holder.stop();
    else {
      const output = this.newOutput(slot);
      await this.exec(slot, s, `${this.prologue(s)}${this.tmuxCmd(s)} kill-server 2>/dev/null; true`, 10, output);
    }
    // A tree the slot may have left there: deleted by a child process (its name is never reused).
    this.service.removal.discard(s.hostDir);
  }

  async close(): Promise<void> {
    await Promise.all(this.service.slots.map((s) => this.stop(s)));
  }
}
