import type { Logger } from "pino";
import type { BashRunner } from "../tools/bash.js";
import type { ForkHost } from "./fork.js";
import type { SlotCgroups } from "../isolation/cgroups.js";
import type { SlotDisks } from "../workspace/slot-disk.js";
import type { SlotTemplates } from "../templates/slot-templates.js";
import type { Slot } from "../core/slot.js";
import type { StatefulSessions } from "../tools/stateful.js";
import type { BwrapProbe } from "../isolation/isolation.js";
import { copyInSandbox } from "./sandboxed-copy.js";

/** A copy-mode fork's copy of one workspace gives up after this (the fork fails, no child changes). */
const COPY_TIMEOUT_MS = 10 * 60_000;

/**
 * What a fork needs of the sandbox service, wired to the service's parts (fork.ts takes
 * this narrow interface, not the service: the service constructs the forks).
 */
export function forkHost(
  svc: {
    slots: readonly Slot[];
    disks: SlotDisks;
    templates: SlotTemplates;
    logger: Logger;
    stateDir: string;
    cgroups: SlotCgroups;
    bwrap: BwrapProbe;
    identity(slot: Slot): { passwd: string; group: string };
  },
  parts: { bash: BashRunner; stateful: StatefulSessions; emptyWorkspace: (slot: Slot) => Promise<void>; discard: (path: string) => void; runsSessions: (slot: Slot) => boolean },
): ForkHost {
  const { bash, stateful } = parts;
  return {
    slots: svc.slots,
    disks: svc.disks,
    templates: svc.templates,
    logger: svc.logger,
    stateDir: svc.stateDir,
    async stopSlot(slot) {
      slot.killRunning();
      // Both waited for (a barrier, as in reset), in parallel: each namespace's teardown costs milliseconds.
      await Promise.all([stateful.stop(slot), bash.resetSlot(slot)]);
      svc.cgroups.killAll(slot.index);
    },
    async resetWorkspace(slot, template) {
      await svc.templates.detach(slot);
      await parts.emptyWorkspace(slot);
      if (template !== undefined) await svc.templates.attach(slot, svc.templates.take(template));
    },
    discard: parts.discard,
    copyWorkspace: (slot, to) =>
      copyInSandbox({
        bwrapPath: svc.bwrap.available ? svc.bwrap.path : null,
        from: slot.workspaceDir,
        to,
        owner: slot.owner,
        identity: svc.bwrap.available ? svc.identity(slot) : undefined,
        filter: svc.bwrap.filter,
        onSpawn: (pid) => svc.cgroups.place(slot.index, pid),
        timeoutMs: COPY_TIMEOUT_MS,
      }),
    stopCommandNamespaces: (slot) => bash.stopNamespaces(slot),
    commandNamespacePids: (slot) => bash.namespacePids(slot),
    reanchorCommands: (slot) => bash.reanchor(slot),
    // As after a reset: a moment after the answer (a spawn stands the event loop still for
    // milliseconds; a fork sent right after would wait for it), and not for a slot that runs
    // process sessions (E2B: its bash namespace goes unused; ProcessSessions re-warms its own).
    warm: (slot) => {
      if (!parts.runsSessions(slot)) bash.warmSoon(slot);
    },
    terminalPid: (slot) => stateful.terminalPid(slot),
    terminalState: (slot) => stateful.terminalState(slot),
    seedTerminal: (slot, state) => stateful.seed(slot, state),
    reanchorTerminal: (slot) => stateful.reanchor(slot),
  };
}
