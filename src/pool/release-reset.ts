import type { SlotRecord } from "./records.js";
import { isConnectionFailure } from "./sandbox-client.js";

/** How a released slot's reset ended: clean, failed (why), or the slot or its container was lost meanwhile. */
export type ReleaseReset = { kind: "clean" } | { kind: "failed"; failure: string } | { kind: "gone" };

/**
 * The reset a released slot gets before it is handed out again, tried twice; a failure to
 * connect makes the pool check the container at once (`confirmLoss`: it may be gone). A slot
 * whose reset failed must not reach another trajectory: the caller takes it out of service.
 */
export async function resetReleasedSlot(record: SlotRecord, confirmLoss: (record: SlotRecord, err: unknown) => Promise<void>): Promise<ReleaseReset> {
  let failure = "reset reported failure";
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const res = await record.container.client.reset(record.slotId);
      record.generation = res.generation;
      if (res.success) return gone(record) ? { kind: "gone" } : { kind: "clean" };
      failure = res.error || res.output || "reset reported failure";
    } catch (err) {
      failure = err instanceof Error ? err.message : String(err);
      if (isConnectionFailure(err)) await confirmLoss(record, err);
    }
    if (gone(record)) return { kind: "gone" };
  }
  return { kind: "failed", failure };
}

/** State checks after an await (TypeScript keeps the narrowing from before it). */
export function gone(record: SlotRecord): boolean {
  return record.state === "lost" || record.container.state === "lost";
}
