/**
 * A lease holds its slot's generation (records.ts, on real sandbox servers): when someone
 * resets the slot from outside the pool (an operator's POST /reset, another run's client),
 * the trajectory's later calls and its reward's reads come back as infra failures
 * (`command_killed`), never as results on an emptied workspace that a reward could score. The
 * pool's own resets and forks keep the lease's generation current, so ordinary use is untouched.
 */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import type { LeasedSlot } from "../../src/pool/types.js";

let baseDir: string;
let pool: SlotPool;

beforeAll(async () => {
  baseDir = await mkdtemp(join(tmpdir(), "slotpool-generation-"));
  await chmod(baseDir, 0o755);
  pool = new SlotPool({ provisioner: new LocalProvisioner({ slotsPerContainer: 3, baseDir }), minContainers: 1, maxContainers: 1 });
  await pool.start();
}, 120_000);
afterAll(async () => {
  await pool?.stop();
  await rm(baseDir, { recursive: true, force: true });
});

/** A reset of the slot by someone other than its holder, straight to its sandbox server. */
async function resetFromOutside(slot: LeasedSlot): Promise<void> {
  const res = await fetch(`${slot.container.url}/reset`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(slot.container.token ? { authorization: `Bearer ${slot.container.token}` } : {}) },
    body: JSON.stringify({ slot_id: slot.slotId }),
  });
  expect(res.status).toBe(200);
}

describe("a slot reset from outside its lease", () => {
  it("makes the holder's later calls and artifact reads infra failures, not results on the emptied workspace", async () => {
    const slot = await pool.acquire({ trajectoryId: "gen-1" });
    onTestFinished(() => pool.release(slot));
    const wrote = await slot.execute({ tool: "bash", args: { command: "echo 42 > answer.txt" } });
    expect(wrote.success, wrote.error).toBe(true);
    expect((await slot.readArtifact({ path: "answer.txt" })).content).toBe("42\n");

    await resetFromOutside(slot);
    const call = await slot.execute({ tool: "bash", args: { command: "cat answer.txt || echo missing" } });
    expect(call).toMatchObject({ success: false, metadata: { infra: "command_killed" } });
    expect(call.output).not.toContain("missing");
    const [batched] = await slot.executeBatch([{ tool: "read_file", args: { path: "answer.txt" } }]);
    expect(batched!.metadata.infra).toBe("command_killed");
    const read = await slot.readArtifact({ path: "answer.txt" });
    expect(read).toMatchObject({ success: false, metadata: { infra: "command_killed" } });
  }, 60_000);

  it("leaves ordinary use alone: a released and re-acquired slot, the holder's own reset, and fork children all run", async () => {
    const a = await pool.acquire({ trajectoryId: "gen-2" });
    expect((await a.execute({ tool: "bash", args: { command: "true" } })).success).toBe(true);
    await a.reset();
    expect((await a.execute({ tool: "bash", args: { command: "echo x > f.txt" } })).success).toBe(true);
    const [child] = await a.fork(1);
    const seen = await child!.execute({ tool: "bash", args: { command: "cat f.txt" } });
    expect(seen.output.trim()).toBe("x");
    const key = a.key;
    await pool.release(a);
    await pool.release(child!);
    // Every slot of the container again, after the pool's own release resets.
    const again = await Promise.all([0, 1, 2].map((i) => pool.acquire({ trajectoryId: `gen-3-${i}` })));
    expect(again.map((s) => s.key)).toContain(key);
    for (const s of again) {
      const r = await s.execute({ tool: "bash", args: { command: "ls -A | wc -l" } });
      expect(r.success, r.error).toBe(true);
      expect(r.output.trim()).toBe("0");
      await pool.release(s);
    }
  }, 90_000);

  it("a fork child reset from outside is refused the same way", async () => {
    const parent = await pool.acquire({ trajectoryId: "gen-4" });
    onTestFinished(() => pool.release(parent));
    const [child] = await parent.fork(1);
    onTestFinished(() => pool.release(child!));
    await resetFromOutside(child!);
    const r = await child!.execute({ tool: "bash", args: { command: "true" } });
    expect(r.metadata.infra).toBe("command_killed");
    expect((await parent.execute({ tool: "bash", args: { command: "true" } })).success).toBe(true);
  }, 60_000);
});
