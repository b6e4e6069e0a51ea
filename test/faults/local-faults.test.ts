/**
 * Faults with the local provisioner: a container (sandbox server child process) killed
 * mid-trajectory fails its calls with SlotLostError, a replacement serves new trajectories, and
 * after stop() no server process is left.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { SlotLostError } from "../../src/pool/errors.js";
import { eventually, outcome, processesWithMarker, within } from "./support.js";

const base = mkdtempSync(join(tmpdir(), "slotpool-faults-local-"));
chmodSync(base, 0o755);
afterAll(() => rmSync(base, { recursive: true, force: true }));

describe("local provisioner: a container killed mid-trajectory", () => {
  it("the in-flight call fails with SlotLostError, later calls too; a replacement serves others; stop() leaves no process", async () => {
    const provisioner = new LocalProvisioner({ slotsPerContainer: 2, baseDir: base });
    const pool = new SlotPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 1, tickMs: 50, healthIntervalMs: 300, provisioner });
    const executor = new ToolExecutor({ pool });
    let n = 0;
    const bash = (t: string, command: string) => executor.execute(t, { name: "bash", arguments: { command }, uniq_id: `u${++n}` }, { timeoutMs: 30_000 });
    try {
      await within(30_000, "start", pool.start());
      expect((await bash("victim", "echo hi > f; cat f")).output).toBe("hi");
      const [proc] = provisioner.processes();
      const inFlight = bash("victim", "sleep 20");
      // wait: the call reaching its slot before the container dies; lost before it, the answer is the same loss
      await new Promise((r) => setTimeout(r, 500));
      const t0 = Date.now();
      process.kill(proc!.pid, "SIGKILL");
      const lost = await within(10_000, "in-flight call", outcome(inFlight));
      console.log(`local: in-flight call answered ${Date.now() - t0} ms after its server was killed`);
      expect(lost, JSON.stringify(lost)).toBeInstanceOf(SlotLostError);
      expect((lost as SlotLostError).message).toContain(proc!.id);
      expect(await within(20_000, "later call", outcome(bash("victim", "cat f")))).toBeInstanceOf(SlotLostError);
      await executor.release("victim");
      const other = await within(30_000, "replacement", bash("other", "echo ok"));
      expect(other.output).toBe("ok");
      await executor.release("other");
      expect(pool.stats().slots.held).toBe(0);
    } finally {
      await executor.close();
      await pool.stop({ purge: true });
    }
    expect(await eventually(() => processesWithMarker(base).length === 0, 10_000), JSON.stringify(processesWithMarker(base))).toBe(true);
  }, 60_000);
});
