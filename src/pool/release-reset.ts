import { ImageUnavailableError } from "./errors.js";
import type { SlotRecord } from "./records.js";
import { isConnectionFailure } from "./sandbox-client.js";

/** How a released slot's reset ended: clean, failed (why), or the slot or its container was lost meanwhile. */
export type ReleaseReset = { kind: "clean" } | { kind: "failed"; failure: string } | { kind: "gone" };

/**
 * The reset a released slot gets before it is handed out again, tried twice; a failure to
 * connect makes the pool check the container at once (`confirmLoss`: it may be gone). A slot
 * whose reset failed must not reach another trajectory: the caller takes it out of service.
 *
 * A slot whose root is a task image is reset back into that image (its upper layer dropped,
 * as any reset does): the next trajectory of the image takes it with no reset of its own
 * (slot-placement.ts), one of another kind resets it first (slot-lease.ts). When the server
 * can no longer give it the image (evicted and not fetched again), it becomes a plain slot.
 */
export async function resetReleasedSlot(record: SlotRecord, confirmLoss: (record: SlotRecord, err: unknown) => Promise<void>): Promise<ReleaseReset> {
  let failure = "reset reported failure";
  for (let attempt = 0; attempt < 2; attempt++) {
    const root = record.root;
    try {
      const res = await record.container.client.reset(record.slotId, root ? { image: root.image } : {});
      record.generation = res.generation;
      if (res.success) {
        record.root = root && res.image ? { ...root, reset: res.image } : undefined;
        record.fresh = true;
        return gone(record) ? { kind: "gone" } : { kind: "clean" };
      }
      failure = res.error || res.output || "reset reported failure";
    } catch (err) {
      failure = err instanceof Error ? err.message : String(err);
      if (isConnectionFailure(err)) await confirmLoss(record, err);
      // The image cannot be had any more (the slot was left as it was): a plain reset next.
      if (err instanceof ImageUnavailableError) {
        record.root = undefined;
        attempt--;
      }
    }
    if (gone(record)) return { kind: "gone" };
  }
  record.root = undefined;
  return { kind: "failed", failure };
}

/** State checks after an await (TypeScript keeps the narrowing from before it). */
export function gone(record: SlotRecord): boolean {
  return record.state === "lost" || record.container.state === "lost";
}
