import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { ExecutorServer } from "../../src/executor/executor-server.js";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { SlotForkError } from "../../src/pool/errors.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import type { LeasedSlot } from "../../src/pool/types.js";

/**
 * `lease.fork(n)` and the executor's POST /fork (issue 23) on real sandbox servers started
 * by the LocalProvisioner: sibling leases in the same container, all or nothing.
 */
let baseDir: string;
const pools: SlotPool[] = [];

beforeAll(async () => {
  baseDir = await mkdtemp(join(tmpdir(), "slotpool-forkpool-"));
  await chmod(baseDir, 0o711);
});
afterEach(async () => {
  for (const p of pools.splice(0)) await p.stop({ purge: true });
});
afterAll(async () => {
  await rm(baseDir, { recursive: true, force: true });
});

async function localPool(slotsPerContainer: number): Promise<SlotPool> {
  const provisioner = new LocalProvisioner({ slotsPerContainer, baseDir: join(baseDir, `p${pools.length}`), extraArgs: ["--slot-uid-base", "22800"] });
  const pool = new SlotPool({ slotsPerContainer, minContainers: 1, maxContainers: 1, tickMs: 50, provisioner });
  pools.push(pool);
  await pool.start();
  return pool;
}

const bash = async (slot: LeasedSlot, command: string) => (await slot.execute({ tool: "bash", args: { command } })).output.trim();

describe("lease.fork(n)", () => {
  it("hands back n sibling leases of the same container, each holding the parent's workspace as it was", async () => {
    const pool = await localPool(4);
    const parent = await pool.acquire({ trajectoryId: "p" });
    await bash(parent, "echo base > f && mkdir d && echo x > d/y");
    const kids = await parent.fork!(2);
    expect(kids.map((k) => k.trajectoryId)).toEqual(["p/fork-0", "p/fork-1"]);
    expect(new Set([parent.slotId, ...kids.map((k) => k.slotId)]).size).toBe(3);
    expect(kids.every((k) => k.container.id === parent.container.id)).toBe(true);
    expect(pool.stats().slots.held).toBe(3);
    for (const k of kids) expect(await bash(k, "cat f d/y")).toBe("base\nx");
    await bash(kids[0]!, "echo k0 > f");
    await bash(parent, "echo later > late");
    expect(await bash(kids[1]!, "cat f; ls late 2>&1 >/dev/null | wc -l")).toBe("base\n1");
    expect(await bash(parent, "cat f")).toBe("base");
    for (const k of kids) await pool.release(k);
    expect(pool.stats().slots.held).toBe(1);
  });

  it("fails at once when the container can never hold n siblings, after the timeout when too few come free; nothing is held either way", async () => {
    const pool = await localPool(3);
    const parent = await pool.acquire({ trajectoryId: "p" });
    await bash(parent, "echo base > f");
    const never = await parent.fork!(3).catch((e: unknown) => e);
    expect(never).toBeInstanceOf(SlotForkError);
    expect((never as SlotForkError).reason).toBe("capacity");
    expect((never as SlotForkError).code).toBe("SLOT_FORK");
    expect((never as Error).message).toMatch(/at most 2 siblings/);
    const other = await pool.acquire({ trajectoryId: "other" });
    const late = await parent.fork!(2, { timeoutMs: 300 }).catch((e: unknown) => e);
    expect((late as SlotForkError).reason).toBe("timeout");
    expect(pool.stats().slots.held).toBe(2);
    // Waiting: the fork gets both slots once the other one comes back.
    const waiting = parent.fork!(2, { timeoutMs: 20_000 });
    // wait: the fork reaching the pool's waiters before the release (either order must give it both slots)
    await new Promise((r) => setTimeout(r, 200));
    await pool.release(other);
    const kids = await waiting;
    expect(kids).toHaveLength(2);
    for (const k of kids) expect(await bash(k, "cat f")).toBe("base");
    await expect(parent.fork!(0)).rejects.toThrow(/positive integer/);
  });
});

describe("executor POST /fork", () => {
  it("forks a trajectory into new trajectories; a bad request changes nothing", async () => {
    const pool = await localPool(4);
    const executor = new ToolExecutor({ pool });
    await executor.start();
    const server = new ExecutorServer({ executor, pool });
    const url = await server.listen(0, "127.0.0.1");
    const post = async (path: string, body: unknown) => (await fetch(url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })).json() as Promise<any>;
    const run = async (traj: string, command: string) => (await post("/execute", { trajectory_id: traj, tool: { name: "bash", arguments: { command } } })).output.trim();
    try {
      await run("a", "echo from-a > note");
      const f = await post("/fork", { trajectory_id: "a", into: ["a1", "a2"] });
      expect(f).toEqual({ success: true, error: "", into: ["a1", "a2"] });
      expect(await run("a1", "cat note")).toBe("from-a");
      expect(await run("a2", "cat note && echo a2 > note")).toBe("from-a");
      expect(await run("a", "cat note")).toBe("from-a");
      const again = await post("/fork", { trajectory_id: "a", into: ["a1"] });
      expect(again.success).toBe(false);
      expect(again.error).toMatch(/already in use/);
      const none = await post("/fork", { trajectory_id: "nobody", into: ["z"] });
      expect(none.error).toMatch(/holds no slot/);
      expect(await run("a1", "cat note")).toBe("from-a");
      const bad = await fetch(url + "/fork", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ trajectory_id: "a", into: [] }) });
      expect(bad.status).toBe(400);
      expect(pool.stats().slots.held).toBe(3);
    } finally {
      await server.close();
      await executor.close();
    }
  });
});
