import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * E2B's sandbox metrics (`getMetrics`) through the real SDK: each call samples the sandbox's
 * slot (its processes' memory and CPU time, its disk), keeps the sample, and answers those in
 * the asked interval.
 */
/** A root server gives each slot a cgroup; a non-root one has none (CPU of live processes only). */
const hasSlotCgroups = process.getuid?.() === 0;

describe("E2B sandbox metrics", () => {
  let h: E2bHarness;
  beforeAll(async () => {
    h = await startE2b({ slots: 2 });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("memory, CPU and disk of the sandbox's own processes; a time range before it existed is empty", async () => {
    const sbx = await Sandbox.create(h.opts);
    try {
      const start = new Date(Date.now() - 1000);
      // CPU spent and memory held by the sandbox's own commands, a file on its disk.
      await sbx.commands.run("head -c 8000000 /dev/urandom > /home/user/blob && timeout 1 sh -c 'while :; do :; done' || true");
      const hold = await sbx.commands.run("python3 -c 'import time; x = bytearray(64 * 1024 * 1024); time.sleep(60)'", { background: true });
      let metrics = await sbx.getMetrics({ start, end: new Date(Date.now() + 1000) });
      // The holder's 64 MB shows once it has allocated them (an event: polled, not waited for).
      for (let i = 0; i < 200 && !(metrics.at(-1)!.memUsed > 64 * 1024 * 1024); i++) {
        await new Promise((r) => setTimeout(r, 100));
        metrics = await sbx.getMetrics({ start, end: new Date(Date.now() + 1000) });
      }
      const m = metrics.at(-1)!;
      expect(m.memUsed).toBeGreaterThan(64 * 1024 * 1024);
      expect(m.memTotal).toBeGreaterThanOrEqual(m.memUsed);
      expect(m.diskUsed).toBeGreaterThanOrEqual(8_000_000);
      expect(m.diskTotal).toBeGreaterThan(m.diskUsed);
      expect(m.cpuCount).toBe(1);
      if (hasSlotCgroups) {
        // The slot's cgroup counts exited processes: the first sample's CPU share counts from the
        // sandbox's start, when it burned a second.
        expect(metrics[0]!.cpuUsedPct).toBeGreaterThan(0);
      } else {
        // Without cgroups only live processes are counted (the burst above has exited): a busy one
        // shows in a later sample (an event: polled, each sample at least a second after the last).
        const busy = await sbx.commands.run("while :; do :; done", { background: true });
        let pct = 0;
        for (let i = 0; i < 60 && !(pct > 0); i++) {
          await new Promise((r) => setTimeout(r, 500));
          pct = (await sbx.getMetrics({ start, end: new Date(Date.now() + 1000) })).at(-1)!.cpuUsedPct;
        }
        expect(pct).toBeGreaterThan(0);
        await busy.kill();
      }
      expect(m.timestamp).toBeInstanceOf(Date);
      expect(await sbx.getMetrics({ start: new Date(Date.now() - 3_600_000), end: new Date(Date.now() - 1_800_000) })).toEqual([]);
      await hold.kill();
    } finally {
      await sbx.kill();
    }
  }, 60_000);
});
