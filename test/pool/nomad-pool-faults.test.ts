/**
 * The pool on the NomadProvisioner under faults, against the Nomad API emulator (real
 * sandbox-server processes): killed allocations, a lost node, Nomad 500s while scaling,
 * image pull failures, an unreachable or denying Nomad, and the event-stream watch.
 */
import { describe, expect, it } from "vitest";
import { NomadClient } from "../../src/nomad/client.js";
import { SlotLostError } from "../../src/pool/errors.js";
import { NomadProvisioner } from "../../src/pool/nomad-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { startNomadEmulator } from "../support/nomad-emulator.js";
import { bash, until, useNomadHarness } from "./support/nomad-harness.js";

const h = useNomadHarness("pool-fault");

describe("SlotPool on the NomadProvisioner under faults (emulator, real sandbox processes)", () => {
  it("an allocation killed mid-trajectory: SlotLostError naming it, noticed within 2 s; the replacement joins", async () => {
    const { pool } = h.nomadPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 1 });
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    await bash(a, "echo keep > f");
    const lostAt = new Promise<number>((resolve) => pool.once("slot-lost", () => resolve(Date.now())));
    const t0 = Date.now();
    await h.nomad.killAllocation(a.container.id);
    expect((await lostAt) - t0).toBeLessThan(2_000);
    const err = await bash(a, "cat f").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SlotLostError);
    expect((err as SlotLostError).containerId).toBe(a.container.id);
    expect((err as Error).message).toContain(a.container.id);
    expect((err as Error).message).toMatch(/failed|Terminated|exit code/i);
    await pool.release(a);
    const b = await pool.acquire({ trajectoryId: "b", timeoutMs: 15_000 });
    expect(b.container.id).not.toBe(a.container.id);
    expect(b.container.index).toBe(0);
    expect((await bash(b, "ls -A")).output.trim()).toBe("");
  });

  it("keeps serving when Nomad answers 500 during scaling", async () => {
    const { pool, jobId } = h.nomadPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 3 });
    await pool.start();
    // Three 500s in a row: the client's own retries (3 attempts) give up once, the pool retries.
    h.nomad.failNext(`POST /v1/job/${jobId}/scale`, 500, 4, "rpc error: leader unavailable");
    const slots = await Promise.all([0, 1, 2].map((i) => pool.acquire({ trajectoryId: `t${i}`, timeoutMs: 20_000 })));
    expect(slots).toHaveLength(3);
    expect(pool.scaleLog().some((e) => !e.ok && /leader unavailable/.test(e.error ?? ""))).toBe(true);
    expect(pool.scaleLog().at(-1)).toMatchObject({ ok: true, to: 3 });
    expect(h.scaleCalls(jobId)).toBeGreaterThanOrEqual(5);
  });

  it("fails start() fast on an image pull failure, with the allocation's task events", async () => {
    const { pool, jobId } = h.nomadPool({ minContainers: 1 });
    h.nomad.failImagePull(jobId);
    const t0 = Date.now();
    const err = await pool.start().catch((e: unknown) => e);
    h.nomad.clearImagePullFailures();
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/could not be pulled/);
    expect((err as Error).message).toMatch(/Failed to pull/);
    expect((err as Error).message).toMatch(/docker login|registry/);
    // bound: from the first failed pull, not the pool's 120 s start timeout: 10 s is far from both on a loaded box.
    expect(Date.now() - t0).toBeLessThan(10_000);
  });

  it("fails start() with an actionable error when Nomad is unreachable or denies access", async () => {
    const unreachable = new NomadProvisioner({ slotsPerContainer: 1, client: new NomadClient({ address: "http://127.0.0.1:9", retry: { attempts: 1, baseMs: 1, maxMs: 1 } }), job: { jobId: "nowhere" } });
    const p1 = new SlotPool({ slotsPerContainer: 1, minContainers: 1, provisioner: unreachable });
    await expect(p1.start()).rejects.toThrow(/cannot reach Nomad at http:\/\/127\.0\.0\.1:9.*NOMAD_ADDR/);

    const guarded = await startNomadEmulator({ token: "secret-acl-token" });
    try {
      const denied = new NomadProvisioner({ slotsPerContainer: 1, client: h.client(guarded.address, "wrong-token"), job: { jobId: "denied" } });
      const p2 = new SlotPool({ slotsPerContainer: 1, minContainers: 1, provisioner: denied });
      await expect(p2.start()).rejects.toThrow(/denied.*NOMAD_TOKEN/);
    } finally {
      await guarded.stop();
    }
  });

  it("a lost node: every held slot is lost with the reason, replacements on the new node join", async () => {
    const { pool } = h.nomadPool({ slotsPerContainer: 1, minContainers: 2, maxContainers: 2 });
    await pool.start();
    const held = [await pool.acquire({ trajectoryId: "x" }), await pool.acquire({ trajectoryId: "y" })];
    await h.nomad.loseNode();
    await until(() => held.every((s) => s.lost), 30_000);
    for (const s of held) {
      const err = await bash(s, "true").catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SlotLostError);
      expect((err as Error).message).toMatch(/is lost/);
      await pool.release(s);
    }
    const fresh = await Promise.all([pool.acquire({ trajectoryId: "z1", timeoutMs: 15_000 }), pool.acquire({ trajectoryId: "z2", timeoutMs: 15_000 })]);
    expect(fresh.map((s) => s.container.id).sort()).not.toEqual(held.map((s) => s.container.id).sort());
    expect((await bash(fresh[0]!, "echo back")).output.trim()).toBe("back");
  });

  it("with watch: events, follows the event stream: a killed allocation is noticed within 2 s, scaling works", async () => {
    const { pool, jobId } = h.nomadPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 2 }, { watch: "events" });
    await pool.start();
    const [a, b] = await Promise.all([pool.acquire({ trajectoryId: "a" }), pool.acquire({ trajectoryId: "b" })]);
    expect(h.scaleCalls(jobId)).toBe(1);
    expect(h.nomad.requests.some((r) => r.path === "/v1/event/stream" && (r.query["topic"] ?? []).includes(`Allocation:${jobId}`))).toBe(true);
    const lostAt = new Promise<number>((resolve) => pool.once("slot-lost", () => resolve(Date.now())));
    const t0 = Date.now();
    await h.nomad.killAllocation(b!.container.id);
    expect((await lostAt) - t0).toBeLessThan(2_000);
    await expect(bash(b!, "true")).rejects.toBeInstanceOf(SlotLostError);
    expect((await bash(a!, "echo still")).output.trim()).toBe("still");
    await pool.release(b!);
    const c = await pool.acquire({ trajectoryId: "c", timeoutMs: 15_000 });
    expect(c.container.index).toBe(1);
    expect(c.container.id).not.toBe(b!.container.id);
  });

  it("a start that takes too long fails with what each allocation is doing", async () => {
    const { pool, jobId } = h.nomadPool({ minContainers: 1, startTimeoutMs: 1_000 });
    h.nomad.delayAllocationStartMs = 10_000;
    try {
      const err = await pool.start().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Error);
      expect((err as Error).message).toMatch(/brought up 0 of 1 healthy containers within 1000 ms/);
      expect((err as Error).message).toContain(`Nomad job '${jobId}'`);
      expect((err as Error).message).toMatch(/sandbox\[0\] .*: pending\/run/);
    } finally {
      h.nomad.delayAllocationStartMs = 0;
    }
  });
});
