import { join } from "node:path";
import type { TemplateBuildRequest, TemplateBuildResponse, TemplateListResponse } from "../../protocol/sandbox.js";
import type { SlotHost } from "../workspace/slot-host.js";
import type { Slot } from "../core/slot.js";
import { sandboxedTemplateBuilder } from "./template-build.js";
import { buildOnImage } from "./image-template-build.js";
import type { SlotImages } from "../images/slot-images.js";
import type { TemplateLayer } from "../images/slot-roots.js";
import { TemplateStore, type Template } from "./templates.js";
import { WorkspaceViews } from "./workspace-overlay.js";
import { mountHelperError } from "../workspace/mount-helper.js";

/** Default `--template-budget-mb`. */
export const DEFAULT_TEMPLATE_BUDGET_BYTES = 4096 * 1024 * 1024;

/**
 * Templates as the sandbox service uses them: the store (build, list, evict) plus each
 * slot's view of one. The service calls `resetWorkspace` from its reset path and nothing
 * else; the routes call `build` and `list`.
 */
export class SlotTemplates {
  readonly store: TemplateStore;
  readonly views: WorkspaceViews;

  /** Slots whose root is a template on an image (their template's reference, released at their next reset). */
  private readonly onImage = new Map<number, Template>();
  /** The slot whose ids an image template's files have (its build runs as slot_0). */
  private readonly buildSlot: Slot | undefined;
  private readonly slots: readonly Slot[];

  constructor(svc: SlotHost, budgetBytes: number, images?: SlotImages) {
    // Builds run as slot_0's uid (when slots have their own uids): a uid of this server's
    // block, never root; every slot sees the files as its own through the id-mapped view.
    const buildOwner = svc.slots[0]?.owner;
    this.buildSlot = svc.slots[0];
    this.slots = svc.slots;
    // SLOTPOOL_TEMPLATE_VIEWS=copy forces copy mode (what a server that may not mount gets; tests).
    const forceCopy = process.env["SLOTPOOL_TEMPLATE_VIEWS"] === "copy";
    if (svc.mayMount && !forceCopy && !svc.mountHelper) svc.logger.warn({ reason: mountHelperError() }, "template views fall back to copying (no mount helper)");
    this.views = new WorkspaceViews(join(svc.stateDir, "views"), svc.slots, svc.logger, svc.mayMount && !forceCopy ? svc.mountHelper : null, svc.removal, (slot) => svc.disks.viewsDir(slot));
    this.store = new TemplateStore({
      dir: join(svc.stateDir, "templates"),
      budgetBytes,
      buildOwner,
      build: sandboxedTemplateBuilder(svc, buildOwner),
      imageBuild:
        images?.store && svc.slots[0]
          ? {
              take: async (ref) => (await images.take(ref)).image,
              give: (image) => images.give(image),
              build: (image, work, req, timeoutS) => buildOnImage(svc, images, image, work, req, timeoutS),
            }
          : undefined,
      defaultTimeoutS: Math.max(svc.limits.defaultTimeoutS, 600),
      maxTimeoutS: svc.limits.maxTimeoutS,
      logger: svc.logger,
      removal: svc.removal,
    });
  }

  build(req: TemplateBuildRequest): Promise<TemplateBuildResponse> {
    return this.store.build(req);
  }

  list(): TemplateListResponse {
    return { templates: this.store.list(), budget_bytes: this.store.budgetBytes, mode: this.views.mode };
  }

  /** Takes a reference on the named template for a reset to come (404 when unknown). */
  take(name: string): Template {
    const t = this.store.get(name);
    this.store.acquire(t);
    return t;
  }

  /** The reset's first workspace step (the slot's processes are dead): ends its view, if any, and releases its template. */
  async detach(slot: Slot): Promise<void> {
    const prev = (await this.views.detach(slot)) ?? this.onImage.get(slot.index);
    this.onImage.delete(slot.index);
    if (prev) this.store.release(prev);
  }

  /** The slot's root is `t`, a template on an image (mounted by the image room with the template's layer): released at its next reset. */
  adoptOnImage(slot: Slot, t: Template): void {
    this.onImage.set(slot.index, t);
  }

  /** A template on an image as a layer of a slot's root: its tree, with the uids of the slot that built it (slot_0) or whose changes it captured. */
  layerOf(t: Template): TemplateLayer {
    return { dir: t.treeDir, builtBy: (t.builtBy !== undefined ? this.slots[t.builtBy] : undefined) ?? this.buildSlot! };
  }

  /** The template on an image the slot's root is, if any. */
  imageTemplateOf(slot: Slot): Template | undefined {
    return this.onImage.get(slot.index);
  }

  /**
   * The reset's last step, on the fresh empty workspace: makes it a view of `next` (its
   * reference was taken by `take`; it is handed back if attaching fails).
   */
  async attach(slot: Slot, next: Template): Promise<void> {
    try {
      await this.views.attach(slot, next);
    } catch (err) {
      this.store.release(next);
      throw err;
    }
  }

  /** A fork child reads `next` (referenced by `take`) through its fork view's `lower`: see WorkspaceViews.adopt. */
  adopt(slot: Slot, next: Template, lower: string, drop: () => void): void {
    this.views.adopt(slot, next, lower, drop);
  }

  /** Hands back a reference from `take` that was not used (a fork that failed). */
  give(t: Template): void {
    this.store.release(t);
  }

  close(): void {
    this.views.closeAll();
    this.store.close();
  }
}
