import type { ResetResponse } from "../protocol/sandbox.js";
import { ImageUnavailableError, PoolTemplateError, SandboxRequestError } from "./errors.js";
import type { ImageAffinity } from "./image-affinity.js";
import { imageKey } from "./image-key.js";
import type { SlotLease } from "./slot-lease.js";
import type { TemplateAffinity } from "./template-affinity.js";
import type { TemplateSpec } from "./types.js";

/**
 * What a trajectory's slot becomes before its first call (`SlotPool.useTemplate`), from the
 * env's TemplateSpec:
 * - an image and nothing to build (no files, no setup): the slot is reset into the image
 *   (ImageAffinity records where it is now; the container fetches it if it lacks it), unless
 *   its release reset left it in that image and nothing ran since (then it is ready as it is);
 * - a template (on an image or not): built on the container unless held there (once per
 *   container, TemplateAffinity), then the slot is reset into it; a template the server
 *   evicted since is built again, once.
 */
export class WorkspacePreparation {
  constructor(
    private readonly templates: TemplateAffinity,
    private readonly images: ImageAffinity,
    /**
     * The container's image store is full of images that only idle slots hold (kept in their
     * image at release): those slots are reset to plain so the server may evict the images.
     * Answers how many it freed.
     */
    private readonly unpin: (containerId: string) => Promise<number> = async () => 0,
  ) {}

  /** The reset's answer (with `image`: which image, its digest, its runtime). */
  async prepare(slot: SlotLease, spec: TemplateSpec, signal?: AbortSignal): Promise<ResetResponse> {
    if (spec.image !== undefined && (spec.setup ?? []).length === 0 && Object.keys(spec.files ?? {}).length === 0) {
      const root = slot.record.root;
      if (root?.key === imageKey(spec.image) && slot.record.fresh) {
        // Reset into this image when it was released and not used since: it is as a reset would leave it.
        const { fetched: _fetched, ...image } = root.reset;
        const ready: ResetResponse = { success: true, output: "", error: "", ...(slot.record.generation !== undefined ? { generation: slot.record.generation } : {}), image };
        this.images.resetInto(slot.container.id, spec.image, ready);
        return ready;
      }
      const res = await this.withRoom(slot, () => this.images.reset(slot, spec.image!, signal));
      if (!res.success) throw new PoolTemplateError(`slot ${slot.key} could not be reset into image ${spec.image}: ${res.error}`);
      return res;
    }
    const reset = () => slot.reset({ template: spec.name, ...(signal ? { signal } : {}) });
    await this.withRoom(slot, () => this.templates.ensure(slot, spec, signal));
    let res;
    try {
      res = await reset();
    } catch (err) {
      // The server evicted it (budget) since it was built here: build it again, once.
      if (!(err instanceof SandboxRequestError) || err.status !== 404) throw err;
      this.templates.forget(slot.container.id, spec.name);
      await this.templates.ensure(slot, spec, signal);
      res = await reset();
    }
    if (!res.success) throw new PoolTemplateError(`slot ${slot.key} could not be reset into template '${spec.name}': ${res.error}`);
    // A template on an image: its build fetched the image there, and the slot's root is it now.
    if (spec.image !== undefined) this.images.resetInto(slot.container.id, spec.image, res);
    return res;
  }

  /** `fetch`, once more after the idle slots' images were let go when the store had no room for a new image. */
  private async withRoom<T>(slot: SlotLease, fetch: () => Promise<T>): Promise<T> {
    try {
      return await fetch();
    } catch (err) {
      if (!(err instanceof ImageUnavailableError) || err.reason !== "store_full" || (await this.unpin(slot.container.id)) === 0) throw err;
      return fetch();
    }
  }
}
