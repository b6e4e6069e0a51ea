import type { ResetImage } from "../protocol/images.js";
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
  initSlots(count: number, generations?: readonly number[]): void {
    for (let i = 0; i < count; i++) {
      const slot = new SlotRecord(this, `slot_${i}`);
      slot.generation = generations?.[i];
      this.slots.push(slot);
    }
    for (let i = count - 1; i >= 0; i--) this.free.push(this.slots[i]!);
  }
}

export class SlotRecord {
  state: SlotState = "free";
  readonly key: string;
  /** Why the slot was taken out of service (container lost, reset failed). */
  lostReason: string | undefined;
  /**
   * The slot's generation as of its last reset or fork (from the server's answers): sent with
   * every call of its lease, so a reset from outside makes them infra failures, not results on
   * an emptied workspace. Undefined with a server that does not report it (then not sent).
   */
  generation: number | undefined;
  /**
   * The task image the slot's root is after its last reset (undefined: the server's own
   * system, or a template). A released slot is reset back into it, so the next trajectory of
   * that image finds its slot ready (image-affinity.ts); `key` is the image's routing key.
   */
  root: { key: string; image: string; reset: ResetImage } | undefined;
  /** Reset and not used since: a trajectory wanting exactly `root` needs no reset of its own. */
  fresh = true;

  constructor(
    readonly container: ContainerRecord,
    readonly slotId: string,
  ) {
    this.key = `${container.info.id}/${slotId}`;
  }
}
