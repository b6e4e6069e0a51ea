import type { SandboxClientLike } from "./sandbox-client.js";
import type { ContainerInfo } from "./types.js";

/**
 * The pool's bookkeeping records: one per container and one per slot. Kept apart from the
 * handles given to trajectories (`SlotLease`) so that a stale handle can never reach a slot
 * that has been handed to someone else.
 */

export type ContainerState = "checking" | "ready" | "draining" | "lost";
export type SlotState = "free" | "held" | "resetting" | "lost";

export class ContainerRecord {
  state: ContainerState = "checking";
  readonly slots: SlotRecord[] = [];
  /** Free slots, lowest slot number on top. */
  readonly free: SlotRecord[] = [];
  /** Slots held or being reset. */
  busy = 0;
  healthFailures = 0;
  healthCheckRunning = false;
  /** Above the count last asked of the provisioner: being stopped, never lent out again. */
  retiring = false;
  lostReason: string | undefined;

  constructor(
    readonly info: ContainerInfo,
    readonly client: SandboxClientLike,
  ) {}

  get index(): number {
    return this.info.index;
  }

  get live(): boolean {
    return this.state === "ready" || this.state === "draining";
  }

  /** Creates the slot records once the container's health says how many it has. */
  initSlots(count: number): void {
    for (let i = 0; i < count; i++) this.slots.push(new SlotRecord(this, `slot_${i}`));
    for (let i = count - 1; i >= 0; i--) this.free.push(this.slots[i]!);
  }
}

export class SlotRecord {
  state: SlotState = "free";
  readonly key: string;
  /** Why the slot was taken out of service (container lost, reset failed). */
  lostReason: string | undefined;

  constructor(
    readonly container: ContainerRecord,
    readonly slotId: string,
  ) {
    this.key = `${container.info.id}/${slotId}`;
  }
}
