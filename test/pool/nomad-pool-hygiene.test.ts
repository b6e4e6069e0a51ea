/**
 * What the pool does with Nomad when things go wrong (issue 11): an allocation that fails
 * its health checks is stopped through Nomad's API and replaced, not left running; and
 * when Nomad refuses to scale, an acquire that times out names Nomad's error instead of
 * advising to raise maxContainers. Against the Nomad API emulator, real sandbox servers.
 */
import { describe, expect, it } from "vitest";
import { SlotAcquireTimeoutError } from "../../src/pool/errors.js";
import { bash, until, useNomadHarness } from "./support/nomad-harness.js";

const h = useNomadHarness("pool-hygiene");

describe("the pool and Nomad, for slot hygiene (emulator, real sandbox processes)", () => {
  it("an allocation that fails its health checks is stopped (POST /v1/allocation/:id/stop) and Nomad's replacement joins", async () => {
    const { pool, jobId } = h.nomadPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1, healthIntervalMs: 200, healthFailuresBeforeLost: 2 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    const allocId = a.container.id;
    await pool.release(a);
    // Freeze the allocation's sandbox server: it stops answering /health but keeps running.
    void h.nomad.killAllocation(allocId, "SIGSTOP");
    await until(() => h.nomad.requests.some((r) => r.method === "POST" && r.path === `/v1/allocation/${allocId}/stop`), 15_000);
    const stopped = await h.nomad.waitForAllocations(jobId, (allocs) => allocs.some((x) => x["ID"] === allocId && x["DesiredStatus"] === "stop"), 10_000);
    expect(stopped.find((x) => x["ID"] === allocId)?.["DesiredStatus"]).toBe("stop");
    // Worded as a real 1.1.2 agent words a stop through the API: a migration.
    expect(stopped.find((x) => x["ID"] === allocId)?.["DesiredDescription"]).toBe("alloc is being migrated");
    const b = await pool.acquire({ trajectoryId: "b", timeoutMs: 20_000 });
    expect(b.container.id).not.toBe(allocId);
    expect((await bash(b, "echo fresh")).output.trim()).toBe("fresh");
    await pool.release(b);
  }, 60_000);

  it("Nomad refusing to scale: SlotAcquireTimeoutError names Nomad's error, not maxContainers", async () => {
    const { pool, jobId } = h.nomadPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 3 });
    await pool.start();
    const held = await pool.acquire({ trajectoryId: "held" });
    h.nomad.failNext(`POST /v1/job/${jobId}/scale`, 403, 1000, "Permission denied: token lacks scale-job");
    const err = await pool.acquire({ trajectoryId: "waits", timeoutMs: 2_000 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SlotAcquireTimeoutError);
    const message = (err as Error).message;
    expect(message).toMatch(/nomad provisioner refused to scale to 2 containers/);
    expect(message).toMatch(/Permission denied|denied/i);
    expect(message).not.toMatch(/Raise maxContainers/);
    expect((err as SlotAcquireTimeoutError).refusedScale).toBeDefined();
    await pool.release(held);
  }, 60_000);
});
