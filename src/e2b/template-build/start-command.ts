import { SlotpoolError } from "../../protocol/errors.js";
import type { ProcessStartRequest } from "../../protocol/process-session.js";
import type { ProcessStream } from "../slot-processes.js";

/**
 * A built template's start command (E2B's `setStartCmd(start, ready)`): started in the
 * background when a sandbox of the template is created, then its ready command is run again
 * and again until it exits 0; the sandbox is handed out then. E2B runs both once, at build
 * time, and snapshots the running VM; a slot has no memory snapshot, so each sandbox runs them
 * (the server it starts is the sandbox's own, reachable on its ports at once).
 *
 * The sandbox is not handed out when the start command ends with a failure before the ready
 * check passed (`START_COMMAND_FAILED`), or the check does not pass in time
 * (`START_COMMAND_NOT_READY`): `StartCommandError` carries the start command's output (and the
 * last check's), and the caller ends the sandbox.
 */

export interface StartProcesses {
  start(req: Omit<ProcessStartRequest, "slot_id">, signal?: AbortSignal): Promise<ProcessStream>;
}

/** Why a sandbox of a built template did not start, by its stable code (E2B's answer carries it as `errorCode`). */
export type StartCommandFailure = "START_COMMAND_FAILED" | "START_COMMAND_NOT_READY";

export class StartCommandError extends SlotpoolError {
  override name = "StartCommandError";
  declare readonly code: StartCommandFailure;
  constructor(code: StartCommandFailure, message: string) {
    super(message, { code });
  }
}

/** How often the ready command is tried (E2B's builder: every 2 s; a slot's command starts in milliseconds). */
const READY_INTERVAL_MS = 250;
/** Output kept of the start command, for the failure's message. */
const MAX_OUTPUT = 16 * 1024;

export interface StartOptions {
  startCmd: string | undefined;
  readyCmd: string | undefined;
  envs: Record<string, string>;
  cwd: string | undefined;
  allowNetwork: boolean;
  /** Longest wait for the ready command to pass. */
  timeoutMs: number;
}

export async function runStartCommand(processes: StartProcesses, o: StartOptions): Promise<void> {
  let output = "";
  const base = { envs: o.envs, ...(o.cwd ? { cwd: o.cwd } : {}), stdin: false, allow_network: o.allowNetwork } as const;
  const ready = o.readyCmd || (o.startCmd ? undefined : "true");
  // Rejects as soon as the start command ends with a failure: the ready check is not waited out then.
  let failed: Promise<never> = new Promise<never>(() => undefined);
  if (o.startCmd) {
    const stream = await processes.start({ ...base, cmd: "/bin/bash", args: ["-l", "-c", o.startCmd], tag: "start-cmd" });
    failed = (async (): Promise<never> => {
      // The stream ends when the start command does (a server never does).
      for await (const ev of stream.events) {
        if (ev.type === "stdout" || ev.type === "stderr") output = (output + Buffer.from(ev.data, "base64").toString("utf8")).slice(-MAX_OUTPUT);
        else if (ev.type === "end" && ev.exit_code !== 0) {
          throw new StartCommandError("START_COMMAND_FAILED", `the template's start command '${o.startCmd}' exited ${ev.exit_code === -1 ? (ev.signal ?? "by a signal") : ev.exit_code}${ready ? ` before its ready command '${ready}' passed` : ""}. Its output:\n${output.trim() || "(none)"}`);
        }
      }
      return new Promise<never>(() => undefined);
    })();
    failed.catch(() => undefined);
  }
  if (ready === undefined) return;
  const deadline = Date.now() + o.timeoutMs;
  const check = async (): Promise<void> => {
    for (;;) {
      const r = await runOnce(processes, { ...base, cmd: "/bin/bash", args: ["-l", "-c", ready] });
      if (r.code === 0) return;
      // A start command that ended well (a daemon that forked away) leaves the ready command to decide.
      if (Date.now() > deadline) throw new StartCommandError("START_COMMAND_NOT_READY", `the template's ready command '${ready}' did not pass within ${Math.round(o.timeoutMs / 1000)} s (last output: ${r.output.trim().slice(-2000) || "none"}). The start command's output:\n${output.trim() || "(none)"}`);
      await new Promise((res) => setTimeout(res, READY_INTERVAL_MS));
    }
  };
  await Promise.race([check(), failed]);
}

async function runOnce(processes: StartProcesses, req: Omit<ProcessStartRequest, "slot_id">): Promise<{ code: number; output: string }> {
  const stream = await processes.start(req);
  let output = "";
  let code = -1;
  for await (const ev of stream.events) {
    if (ev.type === "stdout" || ev.type === "stderr") output = (output + Buffer.from(ev.data, "base64").toString("utf8")).slice(-MAX_OUTPUT);
    else if (ev.type === "end") code = ev.exit_code;
  }
  return { code, output };
}
