import { SlotpoolError } from "../protocol/errors.js";
import type { ImageFailureReason } from "../protocol/images.js";

/** Errors of the pool room. Each message says what happened and what the caller can do. */

export class PoolError extends SlotpoolError {
  override name = "PoolError";
}

/** The slot's container died or was removed: its workspace and everything in it are gone. */
export class SlotLostError extends PoolError {
  override name = "SlotLostError";
  constructor(
    readonly slotId: string,
    /** The container's id: its Nomad allocation id, or the local container's name. */
    readonly containerId: string,
    /** Why it was lost, e.g. the allocation's latest task events. */
    readonly reason: string,
    readonly trajectoryId?: string,
  ) {
    super(
      `slot ${slotId} on container ${containerId} was lost: ${reason}. ` +
        `The workspace is gone; start the trajectory again on a new slot.`,
    );
  }
}

export class SlotAcquireTimeoutError extends PoolError {
  override name = "SlotAcquireTimeoutError";
  constructor(
    readonly timeoutMs: number,
    readonly counts: { slots: number; held: number; waiting: number; containers: number; maxContainers: number },
    /** What else the pool knows, e.g. the provisioner's last problem (no capacity, image pull). */
    readonly hint?: string,
    /** The provisioner refused the last scale call (e.g. Nomad's error): that, not maxContainers, is the cause. */
    readonly refusedScale?: string,
  ) {
    super(
      `no slot became free within ${timeoutMs} ms: ${counts.slots} slots exist, ${counts.held} are held, ` +
        `${counts.waiting} acquires are waiting (${counts.containers}/${counts.maxContainers} containers). ` +
        (refusedScale ? `${refusedScale}; fix that (raising maxContainers does not help).` : `Raise maxContainers or slotsPerContainer, or release slots sooner.`) +
        (hint ? ` ${hint}` : ""),
    );
  }
}

/**
 * "The <kind> provisioner refused to scale to N containers: <error>" when the last scale
 * call of `log` (the pool's scale log, oldest first) failed within the last 10 minutes.
 */
export function refusedScale(log: readonly { at: number; to: number; ok: boolean; error?: string }[], kind: string): string | undefined {
  const last = log[log.length - 1];
  if (!last || last.ok || Date.now() - last.at > 10 * 60_000) return undefined;
  return `The ${kind} provisioner refused to scale to ${last.to} containers: ${last.error ?? "unknown error"}`;
}

/** The pool is not running (not started yet, or stopped). */
export class PoolNotRunningError extends PoolError {
  override name = "PoolNotRunningError";
}

/** A call to a sandbox server failed (connection refused, timeout, HTTP error). */
export class SandboxRequestError extends PoolError {
  override name = "SandboxRequestError";
  constructor(
    message: string,
    readonly containerId: string,
    readonly status?: number,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * A slot could not get its task image: the sandbox server could not fetch or unpack it, or
 * had no room for it (`reason`, as the server's `image_unavailable` answer names it:
 * protocol/images.ts). The infrastructure's failure, never the trajectory's: the env counts
 * it by cause and never scores it. The slot is left as it was. Code IMAGE_UNAVAILABLE.
 */
export class ImageUnavailableError extends SandboxRequestError {
  override name = "ImageUnavailableError";
  constructor(
    message: string,
    containerId: string,
    status: number,
    readonly reason: ImageFailureReason,
    /** The reference as asked for. */
    readonly image: string | undefined,
  ) {
    super(message, containerId, status);
  }
}

/**
 * A reference that cannot name an image (protocol/images.ts's grammar): refused before any
 * slot is asked for it, naming the reference and the problem. The caller's mistake (an env
 * item's image, a config), not the infrastructure's. Code IMAGE_REFERENCE.
 */
export class ImageReferenceError extends PoolError {
  override name = "ImageReferenceError";
  constructor(
    readonly image: string,
    readonly problem: string,
  ) {
    super(`image reference ${JSON.stringify(image.slice(0, 200))} ${problem}`);
  }
}

/** The slot was already released (or reclaimed) by this trajectory: acquire a new one. */
export class SlotReleasedError extends PoolError {
  override name = "SlotReleasedError";
  constructor(
    readonly slotKey: string,
    readonly trajectoryId: string,
  ) {
    super(`slot ${slotKey} was already released by trajectory ${trajectoryId}; acquire a new slot to run more calls`);
  }
}

/** A workspace template could not be built on the slot's container (its setup failed, or the server refused it). */
export class PoolTemplateError extends PoolError {
  override name = "PoolTemplateError";
}

/**
 * `lease.fork(n)` failed; nothing is held and the parent is unchanged. `reason`: "capacity"
 * (the container has fewer than n other slots, waiting cannot help), "timeout" (too few
 * became free in time), "refused" (the server refused or failed the fork), "unsupported"
 * (the container's client cannot fork), "invalid" (a bad argument). Code SLOT_FORK.
 */
export class SlotForkError extends PoolError {
  override name = "SlotForkError";
  constructor(
    readonly reason: "capacity" | "timeout" | "refused" | "unsupported" | "invalid",
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * The one check for a lost slot: the pool's SlotLostError, also when it comes from another
 * copy of the module (two installs of slotpool in one process), recognised by name or code.
 */
export function isSlotLostError(err: unknown): err is SlotLostError {
  if (err instanceof SlotLostError) return true;
  return err instanceof Error && (err.name === "SlotLostError" || (err as { code?: unknown }).code === "SLOT_LOST");
}
