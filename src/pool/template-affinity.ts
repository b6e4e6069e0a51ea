import { templateHash } from "../protocol/template-hash.js";
import type { TemplateBuildRequest, TemplateBuildResponse } from "../protocol/sandbox.js";
import { PoolTemplateError } from "./errors.js";
import type { ContainerRecord } from "./records.js";
import type { SlotLease } from "./slot-lease.js";
import type { TemplateSpec } from "./types.js";

export type { TemplateSpec };

/**
 * Which containers of the pool hold which templates, so that:
 * - acquire prefers a free slot on a container that already holds the item's template
 *   (`preferred`), and
 * - a template is built once per container: concurrent trajectories on one container wait
 *   for the same build (`ensure`), later ones find it held and skip the request.
 * The sandbox server is idempotent too (same name + hash → no rebuild); this layer saves
 * the round trips and counts the builds.
 */
export class TemplateAffinity {
  /** container id → template name → content hash held there. */
  private readonly held = new Map<string, Map<string, string>>();
  /** `container id \0 name \0 hash` → the build request in flight. */
  private readonly building = new Map<string, Promise<void>>();
  /** Builds this pool asked for that the server ran (its answer said `built: true`). */
  builds = 0;
  /** Template preparations that found the template already on the container. */
  hits = 0;

  /** Of the ready containers with a free slot, the first (packing order) holding `name`. */
  preferred(containers: readonly ContainerRecord[], name: string): ContainerRecord | undefined {
    for (const c of containers) {
      if (c.state === "ready" && c.free.length > 0 && this.held.get(c.info.id)?.has(name)) return c;
    }
    return undefined;
  }

  /** Makes sure the lease's container holds `spec` (building it there if not). */
  async ensure(lease: SlotLease, spec: TemplateSpec, signal?: AbortSignal): Promise<void> {
    const request = toRequest(spec);
    const hash = templateHash(request.setup, request.files ?? {}, request.image);
    const containerId = lease.container.id;
    if (this.held.get(containerId)?.get(spec.name) === hash) {
      this.hits++;
      return;
    }
    const key = `${containerId}\0${spec.name}\0${hash}`;
    let pending = this.building.get(key);
    if (!pending) {
      const build: Promise<void> = lease
        .buildTemplate(request, signal ? { signal } : {})
        .then((res: TemplateBuildResponse) => {
          if (!res.success) throw new PoolTemplateError(`template '${spec.name}' could not be built on container ${containerId}: ${res.error}${res.output ? `\n${tail(res.output)}` : ""}`);
          if (res.built) this.builds++;
          let m = this.held.get(containerId);
          if (!m) this.held.set(containerId, (m = new Map()));
          m.set(spec.name, hash);
        })
        .finally(() => this.building.delete(key));
      this.building.set(key, build);
      pending = build;
    } else this.hits++;
    await pending;
  }

  /** The container holds `name` though this pool did not build it (a template captured from a slot: E2B's snapshots); `hash` tells its versions apart. */
  record(containerId: string, name: string, hash: string): void {
    let m = this.held.get(containerId);
    if (!m) this.held.set(containerId, (m = new Map()));
    m.set(name, hash);
  }

  /** The container is gone (nothing is held there any more), or it dropped `name`. */
  forget(containerId: string, name?: string): void {
    if (name === undefined) this.held.delete(containerId);
    else this.held.get(containerId)?.delete(name);
  }

  /** Containers holding `name` (status, tests). */
  holders(name: string): string[] {
    return [...this.held].filter(([, m]) => m.has(name)).map(([id]) => id);
  }
}

function toRequest(spec: TemplateSpec): TemplateBuildRequest {
  return {
    name: spec.name,
    setup: spec.setup ?? [],
    ...(spec.image !== undefined ? { image: spec.image } : {}),
    ...(spec.files ? { files: spec.files } : {}),
    ...(spec.timeoutS !== undefined ? { timeout: spec.timeoutS } : {}),
  };
}

function tail(text: string, max = 2000): string {
  return text.length > max ? `…${text.slice(-max)}` : text;
}
