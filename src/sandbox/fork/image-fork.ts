import type { Logger } from "pino";
import type { ForkResponse, ResetResponse } from "../../protocol/sandbox.js";
import type { Slot } from "../core/slot.js";
import type { SlotCgroups } from "../isolation/cgroups.js";
import { SlotFreezer } from "../isolation/slot-freezer.js";
import type { StoredImage } from "../images/image-store.js";
import type { StatefulSessions, TerminalState } from "../tools/stateful.js";
import type { SlotImages } from "../images/slot-images.js";
import type { ProcessSessions } from "../tools/process-sessions.js";
import type { BashRunner } from "../tools/bash.js";
import type { SlotTemplates } from "../templates/slot-templates.js";

/**
 * POST /fork of a slot whose root is an image: each child's root becomes the same image with a
 * copy of the parent's upper layer (everything the parent changed anywhere in its root), and
 * the parent's terminal directory and environment, while the parent keeps running.
 *
 * The parent is frozen for the copy (its freezer cgroup as root; SIGSTOP of its sessions,
 * terminal and command namespaces otherwise), so the copy is a consistent snapshot and
 * nothing can swap a path under it; it is thawed as soon as the children have their copies.
 * The copy costs what the parent changed (its upper layer), never the image. Each child is
 * reset first (its processes dead, its disk fresh), exactly as `POST /reset` with the image.
 */
export interface ImageForkHost {
  readonly logger: Logger;
  readonly cgroups: SlotCgroups;
  imageOf(slot: Slot): StoredImage | undefined;
  /** The pids whose trees are all of the slot's processes (freeze by signals). */
  processRoots(slot: Slot): Promise<number[]>;
  terminalState(slot: Slot): TerminalState | undefined;
  seedTerminal(slot: Slot, state: TerminalState): void;
  /** A reset of `child` into `image` whose upper starts as a copy of `from`'s. */
  resetFrom(child: Slot, image: string, from: Slot): Promise<ResetResponse>;
}

export async function forkImageSlot(h: ImageForkHost, parent: Slot, children: readonly Slot[]): Promise<Omit<ForkResponse, "generations">> {
  const image = h.imageOf(parent)!;
  let started = 0;
  await parent.enqueue(async () => {
    started = performance.now();
    let rootsNow = await h.processRoots(parent);
    const freezer = new SlotFreezer(h.cgroups, () => rootsNow);
    await freezer.freeze(parent.index, parent.id);
    try {
      const terminal = h.terminalState(parent);
      const results = await Promise.allSettled(children.map((c) => h.resetFrom(c, image.reference, parent)));
      const failed = results.findIndex((r) => r.status === "rejected");
      if (failed >= 0) {
        const err = (results[failed] as PromiseRejectedResult).reason;
        throw new Error(`fork of ${parent.id} into ${children[failed]!.id} failed (that child is reset, without the parent's changes): ${err instanceof Error ? err.message : String(err)}`);
      }
      if (terminal) for (const c of children) h.seedTerminal(c, terminal);
    } finally {
      rootsNow = [];
      await freezer.thaw(parent.index);
    }
  });
  return { success: true, slot_id: parent.id, into: children.map((c) => c.id), mode: "copy", duration_ms: Math.round((performance.now() - started) * 100) / 100 };
}

/** The host a fork of an image slot needs, from the service's parts; `reset` is the service's reset (template, or image, seeded from a slot). */
export function imageForkHost(
  parts: { logger: Logger; cgroups: SlotCgroups; images: SlotImages; processes: ProcessSessions; stateful: StatefulSessions; bash: BashRunner; templates: SlotTemplates },
  reset: (child: Slot, template: string | undefined, image: string | undefined, from: Slot) => Promise<ResetResponse>,
): ImageForkHost {
  const { images, processes, stateful, bash, templates } = parts;
  return {
    logger: parts.logger,
    cgroups: parts.cgroups,
    imageOf: (s) => images.imageOf(s),
    processRoots: async (s) => {
      const terminal = stateful.terminalPid(s);
      return [...processes.processRoots(s.index), ...(terminal === undefined ? [] : [terminal]), ...(await bash.namespacePids(s))];
    },
    terminalState: (s) => stateful.terminalState(s),
    seedTerminal: (s, t) => stateful.seed(s, t),
    // A template on an image: the children get the template (its layer) and the parent's changes on it.
    resetFrom: (child, image, from) => {
      const t = templates.imageTemplateOf(from);
      return t ? reset(child, t.name, undefined, from) : reset(child, undefined, image, from);
    },
  };
}
