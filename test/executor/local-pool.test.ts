import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { SlotLostError } from "../../src/pool/errors.js";

/** The executor on the real pool: SlotPool + LocalProvisioner (sandbox-server child processes). */

let provisioner: LocalProvisioner;
let pool: SlotPool;
let executor: ToolExecutor;
const bash = (command: string) => ({ name: "bash", arguments: { command } });

beforeAll(async () => {
  provisioner = new LocalProvisioner({ slotsPerContainer: 3 });
  pool = new SlotPool({ provisioner, slotsPerContainer: 3, minContainers: 1, maxContainers: 1, acquireTimeoutMs: 1500, healthIntervalMs: 1000 });
  await pool.start();
  executor = new ToolExecutor({ pool, config: { batchWindowMs: 2 } });
  await executor.start();
});

afterAll(async () => {
  await executor?.close();
  await pool?.stop();
});

describe("ToolExecutor on SlotPool + LocalProvisioner", () => {
  it("keeps order within a trajectory and never makes another trajectory wait", async () => {
    await Promise.all([executor.execute("lp-a", bash("true")), executor.execute("lp-b", bash("true"))]);
    let a1Done = false;
    const a1 = executor.execute("lp-a", bash("sleep 4; echo one >> seq")).finally(() => (a1Done = true));
    const a2 = executor.execute("lp-a", bash("echo two >> seq; cat seq"));
    // wait: lets a1 reach its slot first (no event says so); b must not wait for it either way.
    await new Promise((r) => setTimeout(r, 30));
    const b = await executor.execute("lp-b", bash("echo quick"));
    expect(b.output).toBe("quick");
    // b came back while lp-a's first call still ran (the event, not a bound on b's time).
    expect(a1Done).toBe(false);
    expect((await a2).output.split("\n")).toEqual(["one", "two"]);
    expect((await a1).success).toBe(true);
    expect(pool.stats().slots.held).toBe(2);
    await Promise.all([executor.release("lp-a"), executor.release("lp-b")]);
    expect(pool.stats().slots.held).toBe(0);
  });

  it("hands a released slot back reset, so the next trajectory starts clean", async () => {
    await executor.execute("lp-c", bash("echo private > mine.txt"));
    const key = executor.slotOf("lp-c")!.key;
    await executor.release("lp-c");
    // every slot is free now; packing gives the lowest-index container's slots again
    const seen: string[] = [];
    for (const id of ["lp-d", "lp-e", "lp-f"]) {
      const r = await executor.execute(id, bash("ls"));
      expect(r.output).not.toContain("mine.txt");
      seen.push(executor.slotOf(id)!.key);
    }
    expect(seen).toContain(key);
    await Promise.all(["lp-d", "lp-e", "lp-f"].map((id) => executor.release(id)));
  });

  it("answers with an error result when no slot frees up in time", async () => {
    const ids = ["lp-h1", "lp-h2", "lp-h3"];
    await Promise.all(ids.map((id) => executor.execute(id, bash("true"))));
    const r = await executor.execute("lp-h4", bash("true"));
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/could not get a sandbox slot for trajectory lp-h4: no slot became free within 1500 ms/);
    expect(r.metadata["acquire_failed"]).toBe(true);
    await Promise.all([...ids, "lp-h4"].map((id) => executor.release(id)));
  });

  it("fails the running call and the next ones with SlotLostError when the container is lost", async () => {
    await executor.execute("lp-lost", bash("echo hi > f"));
    const slot = executor.slotOf("lp-lost")!;
    const proc = provisioner.processes().find((p) => p.id === slot.container.id)!;
    const running = executor.execute("lp-lost", bash("sleep 20"));
    // wait: lets the call reach the server before the container dies; dead before it, the call fails the same way (the assertion below holds for both).
    await new Promise((r) => setTimeout(r, 300));
    process.kill(proc.pid, "SIGKILL");
    const err = await running.then((r) => r, (e: unknown) => e);
    expect(err).toBeInstanceOf(SlotLostError);
    expect((err as SlotLostError).message).toMatch(/workspace is gone/);
    expect(`${(err as SlotLostError).containerId}/${(err as SlotLostError).slotId}`).toBe(slot.key);
    await expect(executor.execute("lp-lost", bash("cat f"))).rejects.toBeInstanceOf(SlotLostError);
    await executor.release("lp-lost");
    // the pool replaces the container; a new trajectory works again once it is up (acquires
    // here time out after 1.5 s, less than a replacement may take on a busy machine)
    let fresh = await executor.execute("lp-after", bash("echo back"));
    for (let i = 0; i < 20 && !fresh.success; i++) {
      expect(fresh.error).toMatch(/could not get a sandbox slot/);
      fresh = await executor.execute("lp-after", bash("echo back"));
    }
    expect(fresh.output).toBe("back");
    await executor.release("lp-after");
  }, 45_000);
});
