import { dirname } from "node:path";
import { bwrapArgs, identityFiles, READ_ONLY_ROOT, SANDBOX_PATH } from "../isolation/isolation.js";
import { filterArgs } from "../isolation/seccomp.js";
import { ulimitPrologue } from "../isolation/limits.js";
import { CappedOutput } from "../run/output.js";
import { RUN_INPUT_FD, runProcess } from "../run/runner.js";
import { fallbackWritableArgs } from "../workspace/slot-disk.js";
import type { SlotHost } from "../workspace/slot-host.js";
import type { TemplateBuilder } from "./templates.js";

/**
 * Runs a template's setup commands like any `bash` call: in a fresh bubblewrap sandbox (the
 * per-call path: the slots' long-lived namespaces are not involved), as the build uid, with
 * the slot limits, the template tree at /workspace, the server's default network setting,
 * and one wall-clock deadline for the whole build. Commands run in order; the first that
 * fails ends the build and is named in the error.
 */
export function sandboxedTemplateBuilder(svc: SlotHost, owner: { uid: number; gid: number } | undefined): TemplateBuilder {
  return async (treeDir, setup, timeoutS) => {
    const deadline = performance.now() + timeoutS * 1000;
    const outputs: string[] = [];
    const sandboxed = svc.bwrap.available;
    const identity = identityFiles(svc.stateDir, owner?.uid ?? process.getuid?.() ?? 0, owner?.gid ?? process.getgid?.() ?? 0);
    for (const [i, command] of setup.entries()) {
      const leftSec = (deadline - performance.now()) / 1000;
      if (leftSec <= 0) return { success: false, output: outputs.join(""), error: `timed out after ${timeoutS} s before setup[${i}]` };
      const script = ulimitPrologue(svc.limits, leftSec) + command;
      // Output beyond the cap spills into the build's own dir (not the tree: it would end up in the template).
      const output = new CappedOutput({ cap: svc.limits.outputCap, workspaceDir: dirname(treeDir), fileName: svc.newOutputName() });
      const spec = sandboxed
        ? { file: svc.bwrap.path!, args: [...bwrapArgs({ workspaceDir: treeDir, allowNetwork: svc.defaultAllowNetwork, identity, writableArgs: fallbackWritableArgs(svc.disks.bytes) }), ...filterArgs(svc.bwrap.filter, RUN_INPUT_FD), ...READ_ONLY_ROOT, "--", "/bin/bash", "-c", script], input: svc.bwrap.filter?.program }
        : { file: "/bin/bash", args: ["-c", script], cwd: treeDir, env: { HOME: treeDir, PATH: SANDBOX_PATH, LANG: "C.UTF-8", SHELL: "/bin/bash" } };
      const res = await runProcess({ ...spec, ...(owner ? { uid: owner.uid, gid: owner.gid } : {}), timeoutMs: Math.max(1, leftSec * 1000), output });
      const text = output.text();
      outputs.push(`$ ${command}\n${text}${text.endsWith("\n") || text === "" ? "" : "\n"}`);
      const shown = command.length > 80 ? `${command.slice(0, 77)}...` : command;
      if (res.spawnError) return { success: false, output: outputs.join(""), error: `setup[${i}] \`${shown}\` could not start: ${res.spawnError}` };
      if (res.timedOut) return { success: false, output: outputs.join(""), error: `setup[${i}] \`${shown}\` timed out (the build's limit is ${timeoutS} s)` };
      if (res.exitCode !== 0) return { success: false, output: outputs.join(""), error: `setup[${i}] \`${shown}\` exited ${res.exitCode ?? res.signal}` };
    }
    return { success: true, output: outputs.join(""), error: "" };
  };
}
