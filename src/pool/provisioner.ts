import type { ContainerInfo } from "./types.js";
import { SlotpoolError } from "../protocol/errors.js";

/**
 * A provisioner runs containers (sandbox servers) and reports them. It keeps the number of
 * containers at the target it was given, replacing ones that die, and names each with a
 * Nomad-style index (scale-up fills the lowest free index, scale-down stops the highest).
 * Every pool decision (packing, draining, loss, leases) lives in the pool, not here.
 */
export interface Provisioner {
  /** Short name for logs and errors: "local", "nomad". */
  readonly kind: string;
  /**
   * Slots per container it starts, when it decides that (local, Nomad): the pool takes it from
   * here, so it is given once; a pool told a different number refuses to be built.
   */
  readonly slotsPerContainer?: number;
  /**
   * The network setting its servers are prepared for (local: pre-warmed namespaces), when it
   * has one: the pool's calls default to it, so it is given once, like the slot count.
   */
  readonly allowNetwork?: boolean;
  /** Starts watching / launching with `initialCount` containers; reports through `events`. */
  start(events: ProvisionerEvents, initialCount: number): Promise<void>;
  /** Sets the number of containers. One call per change; the provisioner converges to it. */
  setTargetCount(count: number, reason: string): Promise<void>;
  /**
   * Asks for one container to be replaced (it failed its health checks). Optional: the
   * pool stops using the container either way.
   */
  replaceContainer?(id: string, reason: string): Promise<void>;
  /**
   * Keeps new placements off these nodes (all others allowed again): the pool lost its
   * containers there. Optional; it must not replace containers on other nodes.
   */
  avoidNodes?(nodes: readonly string[]): Promise<void>;
  /** A human-readable account of what is starting and why not, for start-up errors. */
  describe?(): Promise<string>;
  /** Stops every container; `purge` also removes the job / data for good. */
  stop(options: { purge: boolean }): Promise<void>;
}

export interface ContainerGone {
  id: string;
  index: number;
  /** Why: exit code and stderr tail, allocation task events, "scaled down", ... */
  reason: string;
  /** True when the provisioner removed it on purpose (scale-down, stop). */
  expected: boolean;
}

/** Problems the pool cannot wait out; during `start()` the pool fails with them. */
export class ProvisionerError extends SlotpoolError {
  override name = "ProvisionerError";
  constructor(
    message: string,
    /** crash-loop | image-pull | placement | unreachable | acl | other */
    readonly kind: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface ProvisionerEvents {
  /** A container was placed and is starting (not reachable yet). */
  containerStarting(id: string, index: number): void;
  /** A container's server is listening at `info.url`; the pool checks its health next. */
  containerUp(info: ContainerInfo): void;
  /** A container stopped, died or was removed. */
  containerGone(gone: ContainerGone): void;
  /** Something keeps containers from coming up (crash loop, image pull, placement, API). */
  problem(error: ProvisionerError): void;
}
