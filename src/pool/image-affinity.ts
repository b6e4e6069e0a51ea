import { imageReferenceProblem, parseImageReference, type ImageFetch } from "../protocol/images.js";
import type { HealthResponse, ResetResponse } from "../protocol/sandbox.js";
import { ImageUnavailableError } from "./errors.js";
import { imageKey } from "./image-key.js";
import type { ContainerRecord } from "./records.js";
import type { SlotLease } from "./slot-lease.js";

/**
 * Image routing: which containers of the pool hold which task images, so that a trajectory
 * goes to a container that has its image when one has a free slot (a reset there costs what a
 * plain reset costs), else anywhere (that container fetches it at the reset, once: the
 * sandbox server's store makes concurrent requests for one image share one fetch).
 *
 * What a container holds is known two ways: the pool's own record (every reset into an image
 * that succeeded there, every fetch under way there) and each container's `/health`
 * (`images.cached`, the server's store as it is, which also tells when the server evicted an
 * image). Both are hints: a reset into an image the container lost since just fetches it again.
 *
 * Images are keyed by what skopeo would fetch (`python:3.12` and `docker.io/library/python:3.12`
 * are one image); usage is counted per reference as the env wrote it, for the run's summary.
 */
export class ImageAffinity {
  /** container id → image key → digest it had there (from a reset's answer or /health). */
  private readonly held = new Map<string, Map<string, string>>();
  /** container id → image key → resets into it under way there (a fetch may be running). */
  private readonly fetching = new Map<string, Map<string, number>>();
  /** Per reference as asked for: resets into it, and its digest. */
  private readonly usage = new Map<string, { resets: number; digest: string }>();
  /** Each fetch a reset of this pool caused (the first use of an image on a container): what it cost. */
  readonly fetches: Array<{ image: string; containerId: string } & ImageFetch> = [];
  /** Fetches (pull and unpack) the pool's resets caused: concurrent resets sharing one fetch count once. */
  pulls = 0;
  /** Resets into an image the container held already, or that shared another reset's fetch. */
  hits = 0;
  /** Resets refused because the container could not get the image, by reason. */
  readonly failures = new Map<string, number>();

  /** The routing key of a reference (image-key.ts); throws ImageReferenceError for one that cannot name an image. */
  static key(image: string): string {
    return imageKey(image);
  }

  /** Of the ready containers with a free slot, the first (packing order) holding `image` or fetching it now. */
  preferred(containers: readonly ContainerRecord[], image: string): ContainerRecord | undefined {
    const key = ImageAffinity.key(image);
    let fetchingThere: ContainerRecord | undefined;
    for (const c of containers) {
      if (c.state !== "ready" || c.free.length === 0) continue;
      if (this.held.get(c.info.id)?.has(key)) return c;
      if (!fetchingThere && (this.fetching.get(c.info.id)?.get(key) ?? 0) > 0) fetchingThere = c;
    }
    return fetchingThere;
  }

  /** Resets the lease's slot into `image`, recording what the container holds and what the reset cost. */
  async reset(lease: SlotLease, image: string, signal?: AbortSignal): Promise<ResetResponse> {
    const key = ImageAffinity.key(image);
    const containerId = lease.container.id;
    const inFlight = this.fetching.get(containerId) ?? new Map<string, number>();
    this.fetching.set(containerId, inFlight);
    inFlight.set(key, (inFlight.get(key) ?? 0) + 1);
    try {
      const res = await lease.reset({ image, ...(signal ? { signal } : {}) });
      if (res.success) this.resetInto(containerId, image, res);
      return res;
    } catch (err) {
      if (err instanceof ImageUnavailableError) {
        this.failures.set(err.reason, (this.failures.get(err.reason) ?? 0) + 1);
        this.forget(containerId, image);
      }
      throw err;
    } finally {
      const n = (inFlight.get(key) ?? 1) - 1;
      if (n > 0) inFlight.set(key, n);
      else inFlight.delete(key);
    }
  }

  /** A reset of a slot on `containerId` answered with its image (a plain image reset, or a template on an image). */
  resetInto(containerId: string, image: string, res: ResetResponse): void {
    const digest = res.image?.digest ?? "";
    this.hold(containerId, ImageAffinity.key(image), digest);
    const u = this.usage.get(image) ?? { resets: 0, digest };
    u.resets++;
    if (digest) u.digest = digest;
    this.usage.set(image, u);
    const fetched = res.image?.fetched;
    // Resets that waited for one fetch all answer its figures: one fetch, counted once.
    const same = fetched && this.fetches.some((f) => f.containerId === containerId && f.image === image && f.pull_ms === fetched.pull_ms && f.unpack_ms === fetched.unpack_ms && f.pulled_bytes === fetched.pulled_bytes);
    if (fetched && !same) {
      this.pulls++;
      this.fetches.push({ image, containerId, ...fetched });
    } else this.hits++;
  }

  /** The container answered /health: what its image store holds now (servers without images say nothing: the record stays). */
  observe(containerId: string, health: HealthResponse): void {
    const cached = health.images?.cached;
    if (!cached) return;
    const now = new Map<string, string>();
    for (const c of cached) {
      if (imageReferenceProblem(c.reference) === undefined) now.set(parseImageReference(c.reference).skopeo, c.digest);
    }
    this.held.set(containerId, now);
  }

  /** The container is gone (nothing is held there any more), or it could not get `image`. */
  forget(containerId: string, image?: string): void {
    if (image === undefined) {
      this.held.delete(containerId);
      this.fetching.delete(containerId);
    } else this.held.get(containerId)?.delete(ImageAffinity.key(image));
  }

  /** Containers holding `image` (status, tests). */
  holders(image: string): string[] {
    const key = ImageAffinity.key(image);
    return [...this.held].filter(([, m]) => m.has(key)).map(([id]) => id);
  }

  /** Every image this pool's slots were reset into, with how many resets and its digest (the run summary's isolation line). */
  used(): Array<{ image: string; resets: number; digest: string }> {
    return [...this.usage].map(([image, u]) => ({ image, ...u }));
  }

  private hold(containerId: string, key: string, digest: string): void {
    let m = this.held.get(containerId);
    if (!m) this.held.set(containerId, (m = new Map()));
    m.set(key, digest);
  }
}
