import type { Logger } from "pino";
import type { ResetResponse } from "../../protocol/sandbox.js";
import type { ImageFetch } from "../../protocol/images.js";
import { ResetFailedError } from "../core/errors.js";
import type { Slot } from "../core/slot.js";
import { ImageUnavailableError } from "../images/image-errors.js";
import type { StoredImage } from "../images/image-store.js";
import type { SlotImages } from "../images/slot-images.js";
import type { MountedRoot, RootPlan } from "../images/slot-roots.js";
import type { SlotTemplates } from "../templates/slot-templates.js";
import type { Template } from "../templates/templates.js";
import type { BashRunner } from "../tools/bash.js";
import type { StatefulSessions } from "../tools/stateful.js";
import type { ProcessSessions } from "../tools/process-sessions.js";
import type { SlotBrowsers } from "../tools/browser/browser-tools.js";
import type { SlotForks } from "../fork/fork.js";
import type { SandboxMetrics } from "./metrics.js";
import type { SlotBootIds } from "../isolation/boot-id.js";

/** What a reset needs of the service (SandboxService wires it). */
export interface ResetHost {
  processes: ProcessSessions;
  browsers: SlotBrowsers;
  stateful: StatefulSessions;
  bash: BashRunner;
  forks: SlotForks;
  templates: SlotTemplates;
  images: SlotImages;
  metrics: SandboxMetrics;
  logger: Logger;
  bootIds: SlotBootIds;
  /** A fresh empty workspace (service.ts); with `root`, the image root over it in the same mount request where the slot has a disk of its own (then answers where its upper is). */
  emptyWorkspace(slot: Slot, root?: RootPlan): Promise<MountedRoot | undefined>;
}

/** POST /reset: the reset barrier, then an empty workspace, an image root or a template view. */
export class SlotResets {
  constructor(private readonly h: ResetHost) {}

  /**
   * Kills every process of the slot and empties its workspace, /tmp, /var/tmp and /dev/shm;
   * with `template`, the workspace then becomes a copy-on-write view of that template. A
   * barrier: when it resolves, no process of the slot runs any more (each namespace's
   * teardown is waited for, not only signalled) and only then is the workspace emptied, so
   * nothing of the previous trajectory can appear in it afterwards.
   *
   * Emptying costs the same whatever the slot wrote and runs off the event loop: a fresh
   * tmpfs replaces the slot's disk (slot-disk.ts), or, without one, the workspace is
   * renamed away and deleted by a child process (tree-removal.ts). When that fails the
   * reset rejects with ResetFailedError (HTTP 500) and the slot is out of service (its
   * calls are refused) until a reset succeeds: never an answer with the old files left.
   */
  async reset(slot: Slot, template?: string, image?: string, seed?: Slot): Promise<ResetResponse> {
    const h = this.h;
    // Fetched before anything of the slot changes: a pull that fails leaves the slot as it was.
    const taken = image === undefined ? undefined : await h.images.take(image);
    try {
      return await this.resetInto(slot, template, taken, seed);
    } catch (err) {
      if (taken && !h.images.imageOf(slot)) h.images.give(taken.image);
      throw err;
    }
  }

  private async resetInto(slot: Slot, template: string | undefined, taken: { image: StoredImage; fetched?: ImageFetch } | undefined, seed?: Slot): Promise<ResetResponse> {
    const h = this.h;
    const next = template === undefined ? undefined : h.templates.take(template);
    // A new generation from here: calls of the old one still queued or arriving are refused.
    const generation = ++slot.generation;
    slot.killRunning();
    return slot.enqueue(() =>
      slot.withResetting(async () => {
        slot.pristine = false;
        let mounted: MountedRoot | undefined;
        try {
          // Held until the reset is done: a process session started in between would outlive it.
          await h.processes.killSlot(slot, { hold: true });
          // The next trajectory starts with no egress rules of this one's (protocol/egress.ts).
          h.processes.networks.forgetEgress(slot.index);
          // Before the terminal: the browser lives on its network namespace.
          await h.browsers.close(slot);
          await h.stateful.stop(slot);
          await h.bash.resetSlot(slot);
          // No process of the slot is left: the next trajectory's is a new boot (isolation/boot-id.ts).
          h.bootIds.renew(slot);
          await h.forks.release(slot);
          await h.templates.detach(slot);
          await h.images.detach(slot);
          // Into an image on the slot's own disk: the fresh disk and the image root over it in one
          // mount request (images.md). A fork's child copies its parent's changes in between: no plan.
          const onImage = next?.image ?? taken?.image;
          const plan = onImage && !seed ? await h.images.plan(slot, onImage, next?.image ? h.templates.layerOf(next) : undefined).catch(() => undefined) : undefined;
          mounted = await h.emptyWorkspace(slot, plan);
        } catch (err) {
          h.processes.settle(slot);
          if (next) h.templates.store.release(next);
          const why = err instanceof Error ? err.message : String(err);
          slot.outOfService = `its last reset failed (${why})`;
          h.logger.error({ err, slot: slot.id }, "reset failed: the slot is out of service until a reset succeeds");
          throw new ResetFailedError(`${slot.id} could not be reset, so it is out of service until a reset succeeds (retry POST /reset): ${why}`);
        }
        slot.outOfService = undefined;
        h.metrics.resets.inc();
        if (next?.image) await this.attachTemplateOnImage(slot, next, seed, mounted);
        if (taken) {
          try {
            if (mounted) h.images.adopt(slot, taken.image, mounted);
            else await this.attachImage(slot, taken.image, seed);
          } catch (err) {
            // Reset, without its image: usable as a workspace slot, and the answer says the image could not be had.
            h.bash.warmSoon(slot);
            setImmediate(() => h.processes.afterReset(slot));
            throw err;
          }
        }
        if (next && !next.image) {
          try {
            await h.templates.attach(slot, next);
          } catch (err) {
            // The workspace is empty again (a copy may have failed half-way): usable, without the template.
            await h.emptyWorkspace(slot).catch((e: unknown) => {
              slot.outOfService = `emptying its workspace after a failed template view failed (${e instanceof Error ? e.message : String(e)})`;
            });
            setImmediate(() => void h.bash.warm(slot));
            setImmediate(() => h.processes.afterReset(slot));
            return { success: false, output: "", error: `${slot.id} reset to an empty workspace, but its view of template '${next.name}' failed: ${err instanceof Error ? err.message : String(err)}`, generation };
          }
        }
        // Leave the slot warm: a fresh namespace (new /tmp, nothing of the previous
        // trajectory: every process is dead and the workspace empty by now) for the network
        // setting the slot last used, built in the background. Its spawn (a fork of this
        // process: 5–15 ms of blocked event loop, measured) happens 40 ms after this answer
        // (warmSoon: not in the way of the next trajectory's first call). A call that arrives first
        // starts the namespace itself; one arriving during the start-up waits for it.
        slot.pristine = next === undefined && taken === undefined;
        // A slot that runs process sessions (E2B) warms a session sandbox instead: its bash
        // namespace would go unused, and each spawn blocks this event loop.
        if (!h.processes.runsSessions(slot)) h.bash.warmSoon(slot);
        setImmediate(() => h.processes.afterReset(slot));
        const into = [taken ? `image ${taken.image.reference}` : "", next ? `template ${next.name}${next.image ? ` (on image ${next.image.reference})` : ""}` : ""].filter(Boolean).join(" and ");
        const image = taken ? h.images.describe(taken.image, taken.fetched) : next?.image ? h.images.describe(next.image, undefined) : undefined;
        return { success: true, output: into ? `${slot.id} reset into ${into}` : `${slot.id} reset`, error: "", generation, ...(image ? { image } : {}) };
      }),
    );
  }

  /** A template on an image: the slot's root is the image with the template's layer on top (its references held until the next reset). */
  private async attachTemplateOnImage(slot: Slot, t: Template, seed: Slot | undefined, mounted: MountedRoot | undefined): Promise<void> {
    const h = this.h;
    const image = t.image!;
    h.images.acquire(image);
    try {
      if (mounted) h.images.adopt(slot, image, mounted);
      else await h.images.attach(slot, image, seed, h.templates.layerOf(t));
    } catch (err) {
      h.templates.store.release(t);
      h.bash.warmSoon(slot);
      setImmediate(() => h.processes.afterReset(slot));
      h.logger.error({ err, slot: slot.id, template: t.name }, "mounting a template's image root failed");
      throw new ImageUnavailableError("unsupported", image.reference, `${slot.id} was reset, but mounting template '${t.name}' on image ${image.reference} as its root failed: ${err instanceof Error ? err.message : String(err)}`, "template");
    }
    h.templates.adoptOnImage(slot, t);
  }

  /** The slot's root becomes `image` (on its fresh disk); a failure leaves it an empty workspace slot and answers image_unavailable. */
  private async attachImage(slot: Slot, image: StoredImage, seed?: Slot): Promise<void> {
    const h = this.h;
    try {
      await h.images.attach(slot, image, seed);
    } catch (err) {
      h.logger.error({ err, slot: slot.id, image: image.reference }, "mounting an image root failed");
      throw new ImageUnavailableError("unsupported", image.reference, `${slot.id} was reset, but mounting image ${image.reference} as its root failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

}
