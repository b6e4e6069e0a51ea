import type { ExecuteResponse } from "../protocol/sandbox.js";
import { bwrapArgs, SANDBOX_PATH } from "./isolation.js";
import { ulimitPrologue } from "./limits.js";
import { CappedOutput } from "./output.js";
import { runProcess } from "./runner.js";
import type { SandboxService } from "./service.js";
import type { Slot } from "./slot.js";

export type ToolOutcome = Omit<ExecuteResponse, "execution_id">;

export interface BashArgs {
  command: string;
  timeout?: number;
  allow_network?: boolean;
  require_sandbox?: boolean;
}

/** The stateless `bash` tool: one command, fully isolated, nothing survives the call. */
export class BashExecutor {
  constructor(private readonly service: SandboxService) {}

  timeoutSec(args: { timeout?: number }, envelopeTimeout: number | undefined): number {
    const l = this.service.limits;
    const t = args.timeout ?? envelopeTimeout ?? l.defaultTimeoutSec;
    return Math.min(t, l.maxTimeoutSec);
  }

  async run(slot: Slot, args: BashArgs, envelopeTimeout: number | undefined, onChunk?: (s: "stdout" | "stderr", c: string) => void): Promise<ToolOutcome> {
    const svc = this.service;
    const timeoutSec = this.timeoutSec(args, envelopeTimeout);
    const allowNetwork = args.allow_network ?? svc.defaultAllowNetwork;
    const sandboxed = svc.bwrap.available;
    if (!sandboxed && args.require_sandbox) {
      return {
        success: false,
        output: "",
        error: `sandbox required but unavailable: ${svc.bwrap.reason ?? "bubblewrap cannot be used"}; refusing to run the command unsandboxed (require_sandbox is set)`,
        metadata: { exit_code: null, sandboxed: false, network_isolated: false },
      };
    }
    const output = new CappedOutput({ cap: svc.limits.outputCap, workspaceDir: slot.workspaceDir, fileName: svc.newOutputName(), owner: slot.owner });
    const script = ulimitPrologue(svc.limits, timeoutSec) + args.command;
    const spec = sandboxed
      ? { file: svc.bwrap.path!, args: [...bwrapArgs({ workspaceDir: slot.workspaceDir, allowNetwork }), "--", "/bin/bash", "-c", script] }
      : { file: "/bin/bash", args: ["-c", script], cwd: slot.workspaceDir, env: { HOME: slot.workspaceDir, PATH: SANDBOX_PATH, LANG: "C.UTF-8" } };
    const res = await runProcess({
      ...spec,
      ...(slot.owner ? { uid: slot.owner.uid, gid: slot.owner.gid } : {}),
      timeoutMs: timeoutSec * 1000,
      output,
      onChunk,
      signal: slot.abortSignal,
    });
    return this.outcome(res, output, { sandboxed, networkIsolated: sandboxed && !allowNetwork, timeoutSec });
  }

  outcome(
    res: { exitCode: number | null; signal: NodeJS.Signals | null; timedOut: boolean; aborted: boolean; durationMs: number; spawnError?: string },
    output: CappedOutput,
    ctx: { sandboxed: boolean; networkIsolated: boolean; timeoutSec: number },
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
    }
    if (res.spawnError) return { success: false, output: text, error: `could not start the command: ${res.spawnError}`, metadata };
    if (res.timedOut) {
      metadata.timeout = true;
      return { success: false, output: text, error: `Command timed out after ${ctx.timeoutSec} seconds`, metadata };
    }
    if (res.aborted) return { success: false, output: text, error: "command killed: the slot was reset or the server is shutting down", metadata };
    return { success: exitCode === 0, output: text, error: exitCode === 0 ? "" : `Exit code: ${exitCode}`, metadata };
  }

  async resetSlot(_slot: Slot): Promise<void> {
    // Per-call sandboxes die with their call; nothing else to stop yet.
  }

  async close(): Promise<void> {}
}

const SIGNALS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGILL: 4, SIGABRT: 6, SIGKILL: 9, SIGSEGV: 11, SIGPIPE: 13, SIGALRM: 14, SIGTERM: 15, SIGXCPU: 24, SIGXFSZ: 25 };
function signalNumber(sig: string): number {
  return SIGNALS[sig] ?? 0;
}
