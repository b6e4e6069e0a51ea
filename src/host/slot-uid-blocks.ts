import { createHash, randomInt } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";

/**
 * The one owner of slot uid blocks: which host uids the slots of a sandbox server run as, so
 * that servers sharing a host (or a Nomad node) never share a slot uid. Both sides use it:
 * the pool's provisioners hand a block to each container they start (`SlotUidAllocator`,
 * passed as `--slot-uid-base`), and a server started without that flag picks its own
 * (`slotUidBase`: its allocation's block inside Nomad, else 20000). The two ranges do not
 * overlap: provisioner blocks in [2^30, 2^31), allocation blocks in [2^29, 2^30).
 *
 * Host uid ranges for the slots of sandbox servers that share one host.
 *
 * A root sandbox server runs slot i as host uid `--slot-uid-base` + i. Per-uid limits —
 * RLIMIT_NPROC above all — count every process of a uid on the host, so two servers whose
 * slot_0 share a uid share that limit: a fork bomb in one eats the other's. Each container
 * of a provisioner therefore gets a block of its own:
 *
 *   uid of slot i in block k = base + k × stride + i
 *
 * - `base`: random per allocator (one per LocalProvisioner / Nomad emulator), a multiple of
 *   1000 in [2^30, 2^31): above the usual system, user and /etc/subuid ranges, below the
 *   2^31 limit of Node's `spawn({ uid })`. Two pools on one host (parallel test files) land
 *   on different ranges with overwhelming odds, and a block with any live process of its
 *   uids is skipped (see `inUse`), so they never share a block in practice.
 * - `stride`: slots per container rounded up to a multiple of 100 (≥ slots per container:
 *   blocks never overlap).
 * - `k`: the lowest block no live container of this allocator holds; released when the
 *   container has exited (its slot processes are gone with it).
 */
export const UID_RANGE_START = 2 ** 30;
export const UID_RANGE_END = 2 ** 31 - 1;
/** Blocks one allocator may hand out at once (containers alive at the same time). */
const MAX_BLOCKS = 4096;

export class SlotUidAllocator {
  readonly base: number;
  readonly stride: number;
  private readonly held = new Set<number>();

  constructor(
    slotsPerContainer: number,
    private readonly inUse: (first: number, count: number) => boolean = uidsInUse,
  ) {
    this.stride = Math.max(100, Math.ceil(slotsPerContainer / 100) * 100);
    const span = this.stride * MAX_BLOCKS;
    const positions = Math.floor((UID_RANGE_END - UID_RANGE_START - span) / 1000);
    this.base = Math.ceil(UID_RANGE_START / 1000) * 1000 + randomInt(0, positions) * 1000;
  }

  /** Takes a free block and returns its first uid (`--slot-uid-base` of one container). */
  acquire(): number {
    for (let k = 0; k < MAX_BLOCKS; k++) {
      if (this.held.has(k)) continue;
      const first = this.base + k * this.stride;
      // Some process (another pool's container, a leftover) runs as a uid of this block.
      if (this.inUse(first, this.stride)) continue;
      this.held.add(k);
      return first;
    }
    throw new Error(`no free slot uid range: ${MAX_BLOCKS} containers of ${this.stride} uids each are in use`);
  }

  /** Gives back the block that starts at `first` (its container has exited). */
  release(first: number): void {
    this.held.delete((first - this.base) / this.stride);
  }

  /** The blocks now held, as [first uid, last uid] (for status output and tests). */
  ranges(): Array<[number, number]> {
    return [...this.held].sort((a, b) => a - b).map((k) => [this.base + k * this.stride, this.base + (k + 1) * this.stride - 1]);
  }
}

/** Whether any live process on this host has a real uid in [first, first + count). */
export function uidsInUse(first: number, count: number): boolean {
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return false;
  }
  for (const name of names) {
    if (name.charCodeAt(0) < 48 || name.charCodeAt(0) > 57) continue;
    try {
      const m = /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${name}/status`, "utf8"));
      const uid = m ? Number(m[1]) : -1;
      if (uid >= first && uid < first + count) return true;
    } catch {
      /* exited meanwhile */
    }
  }
  return false;
}

/** Whether `args` already sets `--slot-uid-base` (the caller chose the uids itself). */
export function hasSlotUidBase(args: readonly string[] | undefined): boolean {
  return (args ?? []).some((a) => a === "--slot-uid-base" || a.startsWith("--slot-uid-base="));
}

/**
 * Slot uids of a server inside a Nomad allocation. Per-uid limits (RLIMIT_NPROC above all,
 * often the only process bound in a container whose cgroups are read-only) count every
 * process of a uid on the node, so two allocations whose slots share uids share those
 * limits. Without `--slot-uid-base`, a server that sees `NOMAD_ALLOC_ID` takes a block of
 * its own: block k of `ALLOC_BLOCK` uids in [2^29, 2^30), k derived from the allocation
 * id (below the provisioners' [2^30, 2^31) range, above system and subuid ranges),
 * moving on to the next block while any process runs as a uid of the chosen one (another
 * allocation on the node holds it).
 */
export const ALLOC_UID_RANGE_START = 2 ** 29;
/** Uids per allocation: the most slots one server may have. */
export const ALLOC_BLOCK = 4096;
const ALLOC_BLOCKS = 2 ** 29 / ALLOC_BLOCK;
/** The server's default base without Nomad (slot i runs as 20000 + i). */
export const DEFAULT_SLOT_UID_BASE = 20_000;

export function allocationUidBase(allocId: string, inUse: (first: number, count: number) => boolean = uidsInUse): number {
  const start = createHash("sha256").update(allocId).digest().readUInt32BE(0) % ALLOC_BLOCKS;
  for (let i = 0; i < ALLOC_BLOCKS; i++) {
    const first = ALLOC_UID_RANGE_START + ((start + i) % ALLOC_BLOCKS) * ALLOC_BLOCK;
    if (!inUse(first, ALLOC_BLOCK)) return first;
  }
  throw new Error("no free slot uid block: every block of [2^29, 2^30) has a running process");
}

/** `--slot-uid-base` when given, else the allocation's block inside Nomad, else 20000. */
export function slotUidBase(flag: number | undefined, allocId: string | undefined): number {
  if (flag !== undefined) return flag;
  return allocId ? allocationUidBase(allocId) : DEFAULT_SLOT_UID_BASE;
}

/**
 * Image uid blocks. A slot whose root is an image (src/sandbox/images/) runs in a user
 * namespace of its own that maps the image's users: inside uid 0 is the slot's host uid
 * (above: per-uid limits, cgroups and kill-by-uid keep working for root, the usual user),
 * and inside uids 1 … IMAGE_UID_SPAN-1 are a block of host uids that slot alone owns, so
 * an image's other users (www-data, 1000, nobody) are real, distinct users inside and
 * nobody's outside. Those blocks live in [2^31, 2^32 − 1): above every range in use on a
 * Linux host (system, user and /etc/subuid ranges, our slot uids), and above Node's
 * `spawn({ uid })` limit, which is fine since nothing is spawned as them: only the
 * kernel's maps name them.
 *
 * A root server claims one block for all its slots, slots × IMAGE_UID_SPAN uids, at its
 * first image: the first free position from one derived from its slot uid base, held by a
 * `flock` on `/run/slotpool/image-uids/<position>.lock` for as long as the server lives
 * (released by the kernel even when the server is killed). Servers sharing a host's /run
 * (the local provisioner's, those started by hand) never share a block; servers in
 * containers of their own (Nomad's docker driver) each see their own /run, and take the
 * position their slot uid base gives, skipping any block with a live process.
 */
export const IMAGE_UID_SPAN = 65536;
export const IMAGE_UID_RANGE_START = 2 ** 31;
/** 2^32 − 1 is the kernel's "no uid". */
export const IMAGE_UID_RANGE_END = 2 ** 32 - 1;

/** Block positions for a server of `slots` slots, and the first position to try for `slotUidBase`. */
export function imageUidPositions(slotUidBase: number, slots: number): { count: number; first: number; size: number } {
  const size = Math.max(1, slots) * IMAGE_UID_SPAN;
  const count = Math.floor((IMAGE_UID_RANGE_END - IMAGE_UID_RANGE_START) / size);
  if (count < 1) throw new Error(`${slots} slots need ${size} image uids each block: more than [2^31, 2^32) holds`);
  const first = createHash("sha256").update(String(slotUidBase)).digest().readUInt32BE(0) % count;
  return { count, first, size };
}

/** Slot `index`'s uid map for its image namespace: inside 0 → its host uid, 1 … SPAN-1 → its block. "in:out:count,…" */
export function imageUidMap(hostUid: number, blockBase: number, index: number): string {
  const first = blockBase + index * IMAGE_UID_SPAN;
  return `0:${hostUid}:1,1:${first + 1}:${IMAGE_UID_SPAN - 1}`;
}

/** The host uid an image's inside uid `inside` is, for slot `index` (`hostUid` for root). */
export function imageHostUid(hostUid: number, blockBase: number, index: number, inside: number): number {
  return inside === 0 ? hostUid : blockBase + index * IMAGE_UID_SPAN + inside;
}
