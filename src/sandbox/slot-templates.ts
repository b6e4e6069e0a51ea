import { join } from "node:path";
import type { TemplateBuildRequest, TemplateBuildResponse, TemplateListResponse } from "../protocol/sandbox.js";
import type { SlotHost } from "./slot-host.js";
import type { Slot } from "./slot.js";
import { sandboxedTemplateBuilder } from "./template-build.js";
import { TemplateStore, type Template } from "./templates.js";
import { WorkspaceViews } from "./workspace-overlay.js";

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

  constructor(svc: SlotHost, budgetBytes: number) {
    // Builds run as slot_0's uid (when slots have their own uids): a uid of this server's
    // block, never root; every slot sees the files as its own through the id-mapped view.
    const buildOwner = svc.slots[0]?.owner;
    this.views = new WorkspaceViews(join(svc.stateDir, "views"), svc.slots, svc.logger, (slot) => svc.disks.viewsDir(slot));
    for (const slot of svc.slots) slot.wipeWorkspace();
    this.store = new TemplateStore({
      dir: join(svc.stateDir, "templates"),
      budgetBytes,
      buildOwner,
      build: sandboxedTemplateBuilder(svc, buildOwner),
      defaultTimeoutSec: Math.max(svc.limits.defaultTimeoutSec, 600),
      maxTimeoutSec: svc.limits.maxTimeoutSec,
      logger: svc.logger,
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

  /**
   * The reset's workspace step (the slot's processes are dead by now): drops the slot's
   * view and changes, empties the workspace, then attaches `next` if given (its reference
   * was taken by `take`; it is handed back if attaching fails).
   */
  async resetWorkspace(slot: Slot, next: Template | undefined): Promise<void> {
    try {
      await this.views.switch(slot, next, (t) => this.store.release(t));
    } catch (err) {
      if (next) this.store.release(next);
      slot.wipeWorkspace();
      throw err;
    }
  }

  close(): void {
    this.views.closeAll();
    this.store.close();
  }
}
