/**
 * Every container of a LocalProvisioner (and every LocalProvisioner) runs its slots under a
 * host uid range of its own. Per-uid limits (RLIMIT_NPROC) count a uid's processes on the
 * whole host: with a shared default base, slot_0 of every container was uid 20000, and a
 * process-count attack in one container's slot_0 starved slot_0 of all the others.
 */
import { readdirSync, readFileSync } from "node:fs";
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import type { LeasedSlot } from "../../src/pool/types.js";
import { SlotUidAllocator, UID_RANGE_END, UID_RANGE_START } from "../../src/host/slot-uid-blocks.js";

const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
let baseDir: string;

beforeAll(async () => {
  baseDir = await mkdtemp(join(tmpdir(), "slotpool-uids-"));
  // mkdtemp makes it 0700: a root server's slot uids must traverse it (else it refuses to start).
  await chmod(baseDir, 0o755);
});
afterAll(async () => {
  await rm(baseDir, { recursive: true, force: true });
});

function processesOfUid(uid: number): number {
  let n = 0;
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${name}/status`, "utf8"))?.[1]) === uid) n++;
    } catch {
      /* exited */
    }
  }
  return n;
}

async function within<T>(ms: number, what: string, p: Promise<T>): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([p, new Promise<never>((_, rej) => (timer = setTimeout(() => rej(new Error(`${what}: no answer within ${ms} ms`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

const bash = (slot: LeasedSlot, command: string, timeout = 10) => slot.execute({ tool: "bash", args: { command }, timeout });

describe("slot uid ranges", () => {
  it("the allocator hands out disjoint blocks in [2^30, 2^31), skips blocks in use, and reuses released ones", () => {
    const busy = new Set<number>();
    const a = new SlotUidAllocator(250, (first, count) => [...busy].some((u) => u >= first && u < first + count));
    expect(a.stride).toBe(300);
    expect(a.base % 1000).toBe(0);
    const b0 = a.acquire();
    const b1 = a.acquire();
    expect(b0).toBe(a.base);
    expect(b1).toBe(a.base + 300);
    busy.add(a.base + 2 * 300 + 299); // some other process runs as the last uid of block 2
    const b3 = a.acquire();
    expect(b3).toBe(a.base + 3 * 300);
    a.release(b0);
    expect(a.acquire()).toBe(b0);
    expect(a.ranges()).toEqual([[b0, b0 + 299], [b1, b1 + 299], [b3, b3 + 299]]);
    for (const first of [b0, b1, b3]) {
      expect(first).toBeGreaterThanOrEqual(UID_RANGE_START);
      expect(first + 299).toBeLessThan(UID_RANGE_END);
    }
    // Two allocators (two pools on one host) start at independent random bases.
    const bases = new Set(Array.from({ length: 20 }, () => new SlotUidAllocator(10, () => false).base));
    expect(bases.size).toBeGreaterThan(15);
  });

  it("two containers of one LocalProvisioner run slot_0 as different uids; a process-count attack in one does not stop the other", async () => {
    const provisioner = new LocalProvisioner({ slotsPerContainer: 1, baseDir: join(baseDir, "p"), extraArgs: ["--max-processes", "64"] });
    const pool = new SlotPool({ provisioner, slotsPerContainer: 1, minContainers: 2, maxContainers: 2, acquireTimeoutMs: 30_000 });
    try {
      await pool.start();
      const bases = provisioner.processes().map((p) => p.slotUidBase);
      expect(bases).toHaveLength(2);
      expect(bases[0]).not.toBe(bases[1]);
      expect(Math.abs(bases[0]! - bases[1]!)).toBeGreaterThanOrEqual(1);
      const attacker = await pool.acquire({ trajectoryId: "attacker" });
      const victim = await pool.acquire({ trajectoryId: "victim" });
      expect(attacker.container.index).not.toBe(victim.container.index);
      expect([attacker.slotId, victim.slotId]).toEqual(["slot_0", "slot_0"]);
      const uidA = Number((await bash(attacker, "id -u")).output.trim());
      const uidV = Number((await bash(victim, "id -u")).output.trim());
      if (isRoot) {
        const byIndex = new Map(provisioner.processes().map((p) => [p.index, p.slotUidBase]));
        expect(uidA).toBe(byIndex.get(attacker.container.index));
        expect(uidV).toBe(byIndex.get(victim.container.index));
        expect(uidA).not.toBe(uidV);
      }
      // Fill the attacker slot's process budget (fork until refused) and hold it.
      const attack = bash(attacker, "timeout 6 bash -c 'while :; do sleep 60 & done' 2>/dev/null; echo filled; sleep 6", 20);
      if (isRoot) {
        const deadline = Date.now() + 15_000;
        while (processesOfUid(uidA) < 48 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
        expect(processesOfUid(uidA)).toBeGreaterThanOrEqual(48);
      } else {
        // wait: not root, the slot's processes are not countable by uid here; this lets the fork loop fill its budget
        await new Promise((r) => setTimeout(r, 3_000));
      }
      // Meanwhile the other container's slot_0 still forks and runs commands.
      for (let i = 0; i < 3; i++) {
        const r = await within(10_000, "the other container's slot_0", bash(victim, "echo $(/bin/echo ok) | cat", 8));
        expect(r.success, JSON.stringify(r)).toBe(true);
        expect(r.output.trim()).toBe("ok");
      }
      const done = await within(30_000, "attack call", attack);
      expect(done.output).toContain("filled");
      await pool.release(attacker);
      await pool.release(victim);
    } finally {
      await pool.stop();
    }
    if (isRoot) {
      // Nothing of either container outlives the pool.
      for (const b of provisioner.processes().map((p) => p.slotUidBase)) expect(processesOfUid(b!)).toBe(0);
    }
  }, 60_000);
});
