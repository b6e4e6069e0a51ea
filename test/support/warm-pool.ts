/**
 * Waits until every slot of every ready container of `pool` has its namespace up and past
 * its warm-up (the sandbox server's GET /slots `warm`): the benchmarks that claim "with a
 * warm pool" measure after this, not while the servers are still pre-warming (their
 * start-ups compete for the CPU and a slot's first call would wait for its own).
 */
import type { SlotPool } from "../../src/pool/slot-pool.js";

export async function waitForWarmPool(pool: SlotPool, timeoutMs = 60_000): Promise<number> {
  const started = performance.now();
  for (;;) {
    const containers = pool.containerList().filter((c) => c.state === "ready");
    const cold = await Promise.all(
      containers.map(async (c) => {
        const res = await fetch(`${c.url}/slots`, { headers: c.token ? { authorization: `Bearer ${c.token}` } : {} });
        const body = (await res.json()) as { slots: Array<{ warm?: boolean }> };
        return body.slots.filter((s) => s.warm !== true).length;
      }),
    );
    const waiting = cold.reduce((a, b) => a + b, 0);
    if (containers.length > 0 && waiting === 0) return performance.now() - started;
    if (performance.now() - started > timeoutMs) throw new Error(`the pool was not warm within ${timeoutMs} ms (${waiting} slots still starting)`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
