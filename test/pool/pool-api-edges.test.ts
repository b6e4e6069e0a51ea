/**
 * The pool's API edges and shutdown (issues 29, 32 item 9): the slot count given once, a
 * lease that can always fork (typed so, no `!`), and a stop that leaves no admission polling
 * behind (a container still being admitted at shutdown kept the process alive up to 60 s and
 * ended in a misleading "container lost" warning).
 */
import { afterEach, describe, expect, it } from "vitest";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { NomadProvisioner } from "../../src/pool/nomad-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import type { ForkableSlot } from "../../src/pool/types.js";
import { MemoryProvisioner } from "./support/memory-provisioner.js";

const pools: SlotPool[] = [];
afterEach(async () => {
  for (const p of pools.splice(0)) await p.stop();
});

describe("the pool's API edges", () => {
  it("slotsPerContainer is given once: the pool takes the provisioner's, and a different one is refused naming both", () => {
    const local = new LocalProvisioner({ slotsPerContainer: 3 });
    expect(new SlotPool({ provisioner: local }).config.slotsPerContainer).toBe(3);
    expect(() => new SlotPool({ provisioner: local, slotsPerContainer: 10 })).toThrow(/slotsPerContainer disagrees: the local provisioner starts containers of 3 slots, the pool was told 10/);
    const nomad = new NomadProvisioner({ slotsPerContainer: 4, job: { jobId: "edges" } });
    expect(new SlotPool({ provisioner: nomad }).config.slotsPerContainer).toBe(4);
    expect(() => new SlotPool({ provisioner: nomad, slotsPerContainer: 2 })).toThrow(/nomad provisioner starts containers of 4 slots/);
  });

  it("a SlotPool lease is a ForkableSlot: fork is always a function", async () => {
    const provisioner = new MemoryProvisioner({ slots: 2 });
    const pool = new SlotPool({ provisioner, slotsPerContainer: 2, createClient: provisioner.clientFactory });
    pools.push(pool);
    await pool.start();
    const slot: ForkableSlot = await pool.acquire({ trajectoryId: "t" });
    // Compiles without `slot.fork!`: the type says fork is there.
    const fork: (n: number) => Promise<ForkableSlot[]> = (n) => slot.fork(n);
    expect(typeof fork).toBe("function");
    expect(typeof slot.fork).toBe("function");
  });

  it("stop() while a container is still being admitted: its admission ends at once, no 'container lost' after stop", async () => {
    const provisioner = new MemoryProvisioner({ slots: 2 });
    let healthCalls = 0;
    const pool = new SlotPool({
      provisioner,
      slotsPerContainer: 2,
      minContainers: 1,
      maxContainers: 2,
      tickMs: 20,
      createClient: (info, hooks) => {
        const client = provisioner.clientFactory(info, hooks);
        if (info.index === 0) return client;
        // The second container never answers /health (still starting when the run ends).
        return Object.assign(Object.create(client) as typeof client, {
          health: () => {
            healthCalls++;
            return Promise.reject(new Error("connect ECONNREFUSED (not listening yet)"));
          },
        });
      },
    });
    pools.push(pool);
    await pool.start();
    const lost: string[] = [];
    pool.on("container-lost", (e) => lost.push(e.container.id));
    await Promise.all([0, 1].map((i) => pool.acquire({ trajectoryId: `t${i}` })));
    const third = pool.acquire({ trajectoryId: "t2", timeoutMs: 60_000 }).catch(() => undefined);
    const deadline = Date.now() + 5_000;
    while (healthCalls < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    expect(healthCalls).toBeGreaterThanOrEqual(2);
    // Like Nomad's provisioner, whose watcher is stopped before the allocations are seen go.
    provisioner.stop = async () => undefined;
    await pool.stop();
    await third;
    const atStop = healthCalls;
    // wait: a window of more than two health intervals in which no check may run after stop (a loaded box can only show fewer)
    await new Promise((r) => setTimeout(r, 2_500));
    expect(healthCalls - atStop).toBeLessThanOrEqual(1);
    expect(lost).toEqual([]);
  });
});
