import { createHash } from "node:crypto";
import { processesOfUid } from "../run/process-barrier.js";

/**
 * Slot uids of a server inside a Nomad allocation. Per-uid limits (RLIMIT_NPROC above all,
 * often the only process bound in a container whose cgroups are read-only) count every
 * process of a uid on the node, so two allocations whose slots share uids share those
 * limits. Without `--slot-uid-base`, a server that sees `NOMAD_ALLOC_ID` takes a block of
 * its own: block k of `ALLOC_BLOCK` uids in [2^29, 2^30), k derived from the allocation
 * id (below the local provisioner's [2^30, 2^31) range, above system and subuid ranges),
 * moving on to the next block while any process runs as a uid of the chosen one (another
 * allocation on the node holds it).
 */
export const ALLOC_UID_RANGE_START = 2 ** 29;
/** Uids per allocation: the most slots one server may have. */
export const ALLOC_BLOCK = 4096;
const BLOCKS = 2 ** 29 / ALLOC_BLOCK;
/** The server's default base without Nomad (slot i runs as 20000 + i). */
export const DEFAULT_SLOT_UID_BASE = 20_000;

export function allocationUidBase(allocId: string, inUse: (first: number, count: number) => boolean = (f, c) => processesOfUid(f, c).length > 0): number {
  const start = createHash("sha256").update(allocId).digest().readUInt32BE(0) % BLOCKS;
  for (let i = 0; i < BLOCKS; i++) {
    const first = ALLOC_UID_RANGE_START + ((start + i) % BLOCKS) * ALLOC_BLOCK;
    if (!inUse(first, ALLOC_BLOCK)) return first;
  }
  throw new Error("no free slot uid block: every block of [2^29, 2^30) has a running process");
}

/** `--slot-uid-base` when given, else the allocation's block inside Nomad, else 20000. */
export function slotUidBase(flag: number | undefined, allocId: string | undefined): number {
  if (flag !== undefined) return flag;
  return allocId ? allocationUidBase(allocId) : DEFAULT_SLOT_UID_BASE;
}
