import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { HttpError } from "../../http/errors.js";
import type { TemplateCaptureResponse } from "../../protocol/template-capture.js";
import type { Slot } from "../core/slot.js";
import type { SlotCgroups } from "../isolation/cgroups.js";
import type { BwrapProbe } from "../isolation/isolation.js";
import { SlotFreezer } from "../isolation/slot-freezer.js";
import type { SlotImages } from "../images/slot-images.js";
import type { SlotTemplates } from "../templates/slot-templates.js";
import { copyInSandbox } from "../fork/sandboxed-copy.js";
import type { BashRunner } from "../tools/bash.js";
import type { ProcessSessions } from "../tools/process-sessions.js";
import type { StatefulSessions } from "../tools/stateful.js";

const run = promisify(execFile);
/** A capture's copy gives up after this (nothing is stored, the slot goes on). */
const COPY_TIMEOUT_MS = 10 * 60_000;

/** What a capture needs of the service (SandboxService wires it). */
export interface CaptureHost {
  cgroups: SlotCgroups;
  bwrap: BwrapProbe;
  templates: SlotTemplates;
  images: SlotImages;
  processes: ProcessSessions;
  stateful: StatefulSessions;
  bash: BashRunner;
  identity(slot: Slot): { passwd: string; group: string };
}

/**
 * POST /templates/capture (protocol/template-capture.ts): a template named `name` made of the
 * slot's files as they are now. The slot's processes are frozen for the copy (as a fork of an
 * image slot freezes its parent: a consistent capture, nothing swapped under the copy) and
 * go on after; a slot its client paused stays paused. Runs in the slot's queue, so no call,
 * reset or fork of the slot lands in the middle.
 * - the server's system as root: the workspace is copied inside a sandbox like the slot's own,
 *   as the slot's uid (fork/sandboxed-copy.ts), into a tree the template store keeps; a reset
 *   into the template gives a slot a copy-on-write view of it (the slot's uid mapped to the
 *   new slot's), as for any template;
 * - an image root: what the slot changed (its upper layer, whiteouts and all) is copied as the
 *   layer of a template on that image (its uids the slot's, mapped like a fork's).
 */
export async function captureSlot(h: CaptureHost, slot: Slot, name: string): Promise<TemplateCaptureResponse> {
  if (slot.outOfService) throw new HttpError(409, `${slot.id} is out of service until a reset succeeds: ${slot.outOfService}`, "slot_id");
  const image = h.images.imageOf(slot);
  if (image && h.templates.imageTemplateOf(slot)) {
    throw new HttpError(409, `${slot.id}'s root is a template on image ${image.reference}: capturing a root of more than one layer over its image is not supported (capture a slot reset straight into the image)`, "slot_id");
  }
  return slot.enqueue(async () => {
    const pausedByClient = h.processes.freezer.isFrozen(slot.index);
    let roots: number[] = [];
    const freezer = new SlotFreezer(h.cgroups, () => roots);
    if (!pausedByClient) {
      const terminal = h.stateful.terminalPid(slot);
      roots = [...h.processes.processRoots(slot.index), ...(terminal === undefined ? [] : [terminal]), ...(await h.bash.namespacePids(slot))];
      await freezer.freeze(slot.index, slot.id);
    }
    try {
      const template = image
        ? await h.templates.store.capture(name, slot.owner, (tree) => copyUpper(h.images, slot, tree), { image: acquired(h.images, image), builtBy: slot.index })
        : await h.templates.store.capture(name, slot.owner, (tree) =>
            copyInSandbox({ bwrapPath: h.bwrap.available ? h.bwrap.path : null, from: slot.workspaceDir, to: tree, owner: slot.owner, identity: h.bwrap.available ? h.identity(slot) : undefined, filter: h.bwrap.filter, timeoutMs: COPY_TIMEOUT_MS }),
          );
      return { template };
    } finally {
      roots = [];
      if (!pausedByClient) await freezer.thaw(slot.index);
    }
  });
}

/** A reference on `image` for the template about to hold it (the store hands it back if the capture fails). */
function acquired<T>(images: { acquire(image: T): void }, image: T): T {
  images.acquire(image);
  return image;
}

/** The frozen slot's upper layer into `tree` (cp -a: modes, owners, links, whiteouts, xattrs such as an opaque directory's). */
async function copyUpper(images: SlotImages, slot: Slot, tree: string): Promise<void> {
  const upper = images.upperOf(slot);
  if (!upper) throw new HttpError(409, `${slot.id}'s root is no longer an image`, "slot_id");
  try {
    await run("cp", ["-a", "--preserve=all", "--", `${upper}/.`, tree], { maxBuffer: 1 << 20, timeout: COPY_TIMEOUT_MS });
  } catch (err) {
    throw new Error(`copying ${slot.id}'s changes: ${((err as { stderr?: string }).stderr ?? String(err)).trim().split("\n").slice(-2).join(" ")}`);
  }
}
