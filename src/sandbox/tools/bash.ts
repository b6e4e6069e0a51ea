import { bwrapArgs, IMAGE_TOOLS_MOUNT, rootTail, SANDBOX_PATH, sandboxBash } from "../isolation/isolation.js";
import { filterArgs } from "../isolation/seccomp.js";
import { ulimitPrologue } from "../isolation/limits.js";
import { CappedOutput } from "../run/output.js";
import { RUN_EXTRA_FD, RUN_INPUT_FD, runProcess, type RunResult } from "../run/runner.js";
import { SlotNamespace, USERNS_FD } from "../isolation/spawner.js";
import { firstChild } from "../run/process-barrier.js";
import type { SlotHost } from "../workspace/slot-host.js";
import type { Slot } from "../core/slot.js";
import type { OnChunk, ToolOutcome } from "../core/tool-outcome.js";
import type { ToolInfraCause } from "../../protocol/infra.js";
import { takeInjectedFault } from "./test-faults.js";

export interface BashArgs {
  command: string;
  timeout?: number;
  allow_network?: boolean;
  require_sandbox?: boolean;
}

/** How long after a reset the slot's namespace is started again (see warmSoon). */
const WARM_AFTER_RESET_MS = 40;

/**
 * The stateless `bash` tool: one command, fully isolated, nothing survives the call.
 * Fast path: the slot's long-lived namespace with the spawner inside (`spawner.ts`);
 * fallback: a new bubblewrap per call; last resort (no bubblewrap): plain bash.
 */
export class BashRunner {
  /** Per slot index: holder with network ("net") and without ("nonet"). */
  private readonly holders = new Map<number, { net?: SlotNamespace; nonet?: SlotNamespace }>();
  /** Per slot index: the network setting of its last `bash` call (what a reset re-warms). */
  private readonly lastNetwork = new Map<number, boolean>();
  /** Holders running their warm-up command: a real call waits for it (one command at a time). */
  private readonly warming = new Map<SlotNamespace, Promise<void>>();
  /** Holders whose next command must enter /workspace again (see `reanchor`). */
  private readonly reanchored = new WeakSet<SlotNamespace>();
  private closed = false;

  constructor(private readonly service: SlotHost) {}

  timeoutS(args: { timeout?: number }, envelopeTimeout: number | undefined): number {
    const l = this.service.limits;
    const t = args.timeout ?? envelopeTimeout ?? l.defaultTimeoutS;
    return Math.min(t, l.maxTimeoutS);
  }

  private holder(slot: Slot, allowNetwork: boolean, background = false): SlotNamespace {
    let h = this.holders.get(slot.index);
    if (!h) this.holders.set(slot.index, (h = {}));
    const key = allowNetwork ? "net" : "nonet";
    let holder = h[key];
    if (!holder || !holder.alive) {
      const svc = this.service;
      const image = svc.imageRoots.rootFor(slot, USERNS_FD);
      holder = new SlotNamespace({
        bwrapPath: svc.bwrap.path!,
        spawnerPath: svc.spawnerPath!,
        filter: svc.bwrap.filter,
        workspaceDir: slot.workspaceDir,
        allowNetwork,
        internet: svc.internetAccess,
        writableArgs: svc.disks.writableArgs(slot, image !== undefined),
        bootId: svc.bootIds.file(slot),
        identity: svc.identity(slot),
        uid: slot.owner?.uid,
        gid: slot.owner?.gid,
        onSpawn: (pid) => svc.cgroups.place(slot.index, pid),
        background,
        image,
        // An image root with network on joins the slot's network namespace, made inside its user namespace.
        netns: image && allowNetwork ? svc.slotNetworks.holder(slot.index, svc.internetAccess, slot.owner, (pid) => svc.cgroups.place(slot.index, pid), image.parentFd) : undefined,
      });
      h[key] = holder;
    }
    return holder;
  }

  async run(slot: Slot, args: BashArgs, envelopeTimeout: number | undefined, onChunk?: OnChunk): Promise<ToolOutcome> {
    const svc = this.service;
    const timeoutS = this.timeoutS(args, envelopeTimeout);
    const image = svc.imageRoots.rootFor(slot, RUN_EXTRA_FD);
    // The per-call fallback (no spawner) has no network-on in an image root: loopback only, and the answer says so.
    const allowNetwork = svc.effectiveNetwork(args.allow_network ?? svc.defaultAllowNetwork) && !(image && !svc.spawnerPath);
    this.lastNetwork.set(slot.index, allowNetwork);
    const sandboxed = svc.bwrap.available;
    if (!sandboxed && args.require_sandbox) {
      return {
        success: false,
        output: "",
        error: `sandbox required but unavailable: ${svc.bwrap.reason ?? "bubblewrap cannot be used"}; refusing to run the command unsandboxed (require_sandbox is set)`,
        metadata: { exit_code: null, sandboxed: false, network_isolated: false },
      };
    }
    const outputName = svc.newOutputName();
    const output = new CappedOutput({ cap: svc.limits.outputCap, workspaceDir: outputDir(slot, image?.root.workingDir), fileName: outputName, owner: image ? image.owner : slot.owner });
    const limits = svc.limits;
    const cpu = Math.max(1, Math.min(limits.cpuSeconds, Math.ceil(timeoutS) + 1));
    // Captured now: a reset replaces the slot's controller, and the answer must read why this one fired.
    const abortSignal = slot.abortSignal;
    const fault = takeInjectedFault(args.command);
    if (fault === "reset") setTimeout(() => slot.killRunning("reset"), 300).unref();
    if (fault === "shutdown") setTimeout(() => process.kill(process.pid, "SIGINT"), 300).unref();
    let res: RunResult;
    if (fault === "sandbox_start") {
      res = { exitCode: null, signal: null, timedOut: false, aborted: false, durationMs: 0, spawnError: "slot sandbox did not start within 10 s (injected by SLOTPOOL_TEST_FAULTS_DIR)" };
    } else if (sandboxed && svc.spawnerPath) {
      let holder = this.holder(slot, allowNetwork);
      try {
        const warming = this.warming.get(holder);
        if (warming) {
          // Started in the background (server start, after a reset): wait for it, no second
          // one, and at full priority from now on.
          holder.boost();
          await warming;
          holder = this.holder(slot, allowNetwork);
        }
        holder.boost();
        const again = this.reanchored.delete(holder);
        res = await holder.run({
          // Same line: the command's line numbers stay as they were.
          command: again ? `cd /workspace 2>/dev/null; unset OLDPWD; ${args.command}` : args.command,
          cpuSeconds: cpu,
          maxProcesses: limits.maxProcesses,
          maxFileBytes: limits.maxFileBytes,
          addressSpaceBytes: svc.addressSpaceBytes,
          outputCap: limits.outputCap,
          outputFileName: outputName,
          timeoutMs: timeoutS * 1000,
          output,
          onChunk,
          signal: abortSignal,
        });
      } catch (err) {
        holder.kill();
        res = { exitCode: null, signal: null, timedOut: false, aborted: false, durationMs: 0, spawnError: err instanceof Error ? err.message : String(err) };
      }
    } else {
      const script = ulimitPrologue(limits, timeoutS) + (image ? `cd -- ${shellQuote(image.root.workingDir)} 2>/dev/null || cd /; ` : "") + args.command;
      const ns = { workspaceDir: slot.workspaceDir, allowNetwork, identity: svc.identity(slot), writableArgs: svc.disks.writableArgs(slot, image !== undefined), bootId: svc.bootIds.file(slot), image: image?.root };
      const spec = sandboxed
        ? { file: svc.bwrap.path!, args: [...bwrapArgs(ns), ...filterArgs(svc.bwrap.filter, RUN_INPUT_FD), ...rootTail(ns), "--", ...asImageUser(image?.root), sandboxBash(ns), "-c", script], input: svc.bwrap.filter?.program, ...(image?.parentFd !== undefined ? { extraFds: [image.parentFd] } : {}) }
        : { file: "/bin/bash", args: ["-c", script], cwd: slot.workspaceDir, env: { HOME: slot.workspaceDir, PATH: SANDBOX_PATH, LANG: "C.UTF-8", SHELL: "/bin/bash" } };
      res = await runProcess({
        ...spec,
        ...(slot.owner ? { uid: slot.owner.uid, gid: slot.owner.gid } : {}),
        timeoutMs: timeoutS * 1000,
        output,
        onChunk,
        signal: abortSignal,
      });
    }
    const outcome = this.outcome(res, output, { sandboxed, networkIsolated: sandboxed && !allowNetwork, timeoutS, abortReason: abortSignal.reason });
    // Asked for network where there is none (e.g. a container without /dev/net/tun): it ran
    // loopback-only at once, and the result says why.
    if (args.allow_network === true && sandboxed && !allowNetwork) outcome.metadata["network_unavailable"] = svc.internetReason ?? (image ? "network on in an image root needs the per-slot spawner: it ran loopback-only" : "network on is unavailable here");
    return outcome;
  }

  outcome(
    res: { exitCode: number | null; signal: NodeJS.Signals | null; timedOut: boolean; aborted: boolean; durationMs: number; spawnError?: string },
    output: CappedOutput,
    ctx: { sandboxed: boolean; networkIsolated: boolean; timeoutS: number; abortReason?: unknown },
  ): ToolOutcome {
    const text = output.text();
    const exitCode = res.exitCode ?? (res.signal ? 128 + signalNumber(res.signal) : -1);
    const metadata: ToolOutcome["metadata"] = {
      exit_code: exitCode,
      sandboxed: ctx.sandboxed,
      network_isolated: ctx.networkIsolated,
      duration_ms: Math.round(res.durationMs * 10) / 10,
    };
    if (output.truncated) {
      metadata.truncated = true;
      const file = output.outputFile;
      if (file) metadata.output_file = file;
      else if (output.outputFileCut) {
        metadata.output_file = output.fileName;
        metadata.output_file_cut = true;
      }
    }
    // The infra marker (protocol/infra.ts): these answers are the infrastructure's doing, not the command's.
    const infra = (cause: ToolInfraCause) => ({ ...metadata, infra: cause });
    if (res.spawnError) return { success: false, output: text, error: `could not start the command: ${res.spawnError}`, metadata: infra("sandbox_start") };
    if (res.timedOut) {
      metadata.timeout = true;
      return { success: false, output: text, error: `Command timed out after ${ctx.timeoutS} seconds`, metadata };
    }
    if (res.aborted) {
      const shutdown = ctx.abortReason === "shutdown";
      const error = shutdown ? "command killed: the sandbox server is shutting down" : "command killed: the slot was reset from outside the call";
      return { success: false, output: text, error, metadata: infra(shutdown ? "server_shutdown" : "command_killed") };
    }
    return { success: exitCode === 0, output: text, error: exitCode === 0 ? "" : `Exit code: ${exitCode}`, metadata };
  }

  /**
   * Starts the slot's namespace (holder) for `allowNetwork` if it has none, without waiting
   * for it: the holder is registered at once, so a call arriving while it starts finds it
   * and waits for the same start-up (`SlotNamespace.run` awaits `start()`) instead of building a
   * second one. Resolves when the holder is ready (or failed; a failed holder is replaced
   * by the next call). No-op without the fast path or after shutdown.
   */
  warm(slot: Slot, allowNetwork = this.lastNetwork.get(slot.index) ?? this.service.effectiveNetwork(this.service.prewarmNetwork)): Promise<void> {
    const svc = this.service;
    if (this.closed || !svc.bwrap.available || !svc.spawnerPath) return Promise.resolve();
    // Never while the slot is being reset: a namespace started then binds the workspace as it
    // is at that moment — the last trajectory's disk, an emptied one, or no template view yet —
    // and the slot's next calls would run in it (issue 39: an empty view after a template
    // rebuild; test/sandbox/template-view-race.test.ts). The warm timer of an earlier reset
    // can fire in the middle of this one; this reset warms the slot again when it ends.
    if (slot.state === "resetting") return Promise.resolve();
    const existing = this.holders.get(slot.index)?.[allowNetwork ? "net" : "nonet"];
    if (existing?.alive) return this.warming.get(existing) ?? Promise.resolve();
    const holder = this.holder(slot, allowNetwork, true);
    // Start the namespace, then run one empty command in it with the slot's limits: the
    // spawner pre-forks the next command's bash after each command, so the first real call
    // finds that bash waiting (≈ the cost of any later call, not a bash start-up).
    const limits = svc.limits;
    const done = holder
      .start()
      .then(() =>
        holder.run({
          command: ":",
          cpuSeconds: 1,
          maxProcesses: limits.maxProcesses,
          maxFileBytes: limits.maxFileBytes,
          addressSpaceBytes: svc.addressSpaceBytes,
          outputCap: limits.outputCap,
          outputFileName: svc.newOutputName(),
          timeoutMs: 10_000,
          output: new CappedOutput({ cap: limits.outputCap, workspaceDir: slot.workspaceDir, fileName: svc.newOutputName(), owner: slot.owner }),
        }),
      )
      .then(
        () => undefined,
        (err: unknown) => {
          svc.logger.warn({ err, slot: slot.id }, "could not pre-start the slot's sandbox (the next call retries)");
          holder.kill();
        },
      )
      .finally(() => this.warming.delete(holder));
    this.warming.set(holder, done);
    return done;
  }

  /**
   * warm(), a moment after a reset rather than at once. Starting a namespace spawns
   * bubblewrap, and Node's spawn forks this process: the event loop stands still for
   * several ms. Right after a release the pool's next trajectory often sends its first call
   * to this server (another slot: a just-reset one is handed out last); started at once the
   * spawn delayed that call (perf, issue 22: first call of a fresh trajectory 13-19 ms p50
   * back to back, 7 ms with a pause). A call for this slot before the timer starts its
   * namespace itself, and the timer then finds it up.
   */
  warmSoon(slot: Slot): void {
    if (this.closed) return;
    setTimeout(() => void this.warm(slot), WARM_AFTER_RESET_MS).unref();
  }

  /** Pre-warms every slot, at most `concurrency` namespaces starting at a time (server start). */
  async warmAll(concurrency = 4): Promise<void> {
    const slots = [...this.service.slots];
    const worker = async (): Promise<void> => {
      for (let slot = slots.shift(); slot && !this.closed; slot = slots.shift()) await this.warm(slot);
    };
    await Promise.all(Array.from({ length: Math.max(1, concurrency) }, worker));
  }

  /** Whether the slot has a live namespace for `allowNetwork` (tests, /slots). */
  isWarm(slot: Slot, allowNetwork = this.lastNetwork.get(slot.index) ?? this.service.effectiveNetwork(this.service.prewarmNetwork)): boolean {
    const h = this.holders.get(slot.index);
    return (allowNetwork ? h?.net : h?.nonet)?.alive ?? false;
  }

  /**
   * The network setting of the namespace the slot's next call finds ready: live and past its
   * warm-up, for the setting of its last call or the pre-warm one (undefined: none is).
   * /slots reports it, so a benchmark or an operator can tell a warm pool from one still
   * pre-warming.
   */
  readyNetwork(slot: Slot): boolean | undefined {
    const allowNetwork = this.lastNetwork.get(slot.index) ?? this.service.effectiveNetwork(this.service.prewarmNetwork);
    const holder = this.holders.get(slot.index)?.[allowNetwork ? "net" : "nonet"];
    return holder !== undefined && holder.alive && !this.warming.has(holder) ? allowNetwork : undefined;
  }

  /** A process inside each live command namespace of the slot (after its warm-up), for a fork to remount (fork.ts). */
  async namespacePids(slot: Slot): Promise<number[]> {
    const h = this.holders.get(slot.index);
    const live = [h?.net, h?.nonet].filter((x): x is SlotNamespace => x !== undefined && x.alive);
    await Promise.all(live.map((x) => this.warming.get(x)));
    return live.map((x) => (x.pid !== undefined ? firstChild(x.pid)?.pid : undefined)).filter((p): p is number => p !== undefined);
  }

  /**
   * After a fork: the next command of each namespace enters /workspace again first, since the
   * bash pre-started for it sits in the old, read-only mount (later ones start on the new).
   */
  reanchor(slot: Slot): void {
    const h = this.holders.get(slot.index);
    for (const x of [h?.net, h?.nonet]) if (x) this.reanchored.add(x);
  }

  /** Stops the slot's command namespaces only (the terminal's stays); the next call starts them again. */
  async stopNamespaces(slot: Slot): Promise<void> {
    const h = this.holders.get(slot.index);
    this.holders.delete(slot.index);
    await Promise.all([h?.net?.stop(), h?.nonet?.stop()]);
  }

  /** Tears down the slot's namespaces (every process in them dies). */
  async resetSlot(slot: Slot): Promise<void> {
    const h = this.holders.get(slot.index);
    this.holders.delete(slot.index);
    await Promise.all([h?.net?.stop(), h?.nonet?.stop()]);
    this.service.cgroups.killAll(slot.index);
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.service.slots.map((s) => this.resetSlot(s)));
  }
}

/**
 * Where a call's full output goes on the host: the workspace, or in an image root the image's
 * working directory (where the spawner writes it, as the slot's user; a workspace-relative
 * name there is what the file tools read back, relative paths starting at the working dir).
 */
export function outputDir(slot: Slot, imageWorkingDir: string | undefined): string {
  return imageWorkingDir === undefined ? slot.workspaceDir : `${slot.workspaceDir}${imageWorkingDir === "/" ? "" : imageWorkingDir}`;
}

/** In an image root whose User is not root: the command's argv starts with a switch to it (the static spawner's --exec-as; bubblewrap cannot switch users in a namespace it joins). */
export function asImageUser(root: { uid: number; gid: number } | undefined): string[] {
  return root && (root.uid !== 0 || root.gid !== 0) ? [`${IMAGE_TOOLS_MOUNT}/spawner`, "--exec-as", `${root.uid}:${root.gid}`, "--"] : [];
}

function shellQuote(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGILL: 4, SIGABRT: 6, SIGKILL: 9, SIGSEGV: 11, SIGPIPE: 13, SIGALRM: 14, SIGTERM: 15, SIGXCPU: 24, SIGXFSZ: 25 };
function signalNumber(sig: string): number {
  return SIGNALS[sig] ?? 0;
}
