import type { ResetResponse } from "../protocol/sandbox.js";
import { PoolTemplateError, SandboxRequestError } from "./errors.js";
import type { ImageAffinity } from "./image-affinity.js";
import type { SlotLease } from "./slot-lease.js";
import type { TemplateAffinity } from "./template-affinity.js";
import type { TemplateSpec } from "./types.js";

/**
 * What a trajectory's slot becomes before its first call (`SlotPool.useTemplate`), from the
 * env's TemplateSpec:
 * - an image and nothing to build (no files, no setup): the slot is reset into the image
 *   (ImageAffinity records where it is now; the container fetches it if it lacks it);
 * - a template (on an image or not): built on the container unless held there (once per
 *   container, TemplateAffinity), then the slot is reset into it; a template the server
 *   evicted since is built again, once.
 */
export class WorkspacePreparation {
  constructor(
    private readonly templates: TemplateAffinity,
    private readonly images: ImageAffinity,
  ) {}

  /** The reset's answer (with `image`: which image, its digest, its runtime). */
  async prepare(slot: SlotLease, spec: TemplateSpec, signal?: AbortSignal): Promise<ResetResponse> {
    if (spec.image !== undefined && (spec.setup ?? []).length === 0 && Object.keys(spec.files ?? {}).length === 0) {
      const res = await this.images.reset(slot, spec.image, signal);
      if (!res.success) throw new PoolTemplateError(`slot ${slot.key} could not be reset into image ${spec.image}: ${res.error}`);
      return res;
    }
    const reset = () => slot.reset({ template: spec.name, ...(signal ? { signal } : {}) });
    await this.templates.ensure(slot, spec, signal);
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
}
