/**
 * A node is one failure domain, and a node that vanishes without closing its sockets is
 * noticed by the pool itself (issue 29): on the Nomad API emulator with real sandbox servers,
 * a frozen server (SIGSTOP: connections accepted, nothing answered, Nomad not told) is given
 * up within seconds under the default health settings and its in-flight call fails as a lost
 * slot; a loss on a node makes the pool check the node's other containers at once; and slots
 * of a node that just lost a container are handed out last.
 */
import { describe, expect, it } from "vitest";
import { SlotLostError } from "../../src/pool/errors.js";
import { bash, until, useNomadHarness } from "./support/nomad-harness.js";

const h = useNomadHarness("node-test");

/** The first value `probe` gives, re-asked every 100 ms. */
async function found<T>(probe: () => T | undefined, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`not found within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The call's outcome and how long it took to settle. */
async function settle(p: Promise<unknown>): Promise<{ error: unknown; ms: number }> {
  const t0 = Date.now();
  const error = await p.then(() => undefined, (e: unknown) => e);
  return { error, ms: Date.now() - t0 };
}

describe("node failures (emulator, real sandbox servers)", () => {
  it("a silent container (frozen, sockets open) is given up within seconds with the default health settings; its in-flight call fails as a lost slot", async () => {
    const { pool, jobId } = h.nomadPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 1 });
    await pool.start();
    const slot = await pool.acquire({ trajectoryId: "in-flight" });
    const running = settle(bash(slot, "sleep 60"));
    // wait: the call reaching its slot before the container freezes (frozen before, it fails the same way)
    await new Promise((r) => setTimeout(r, 300));
    const alloc = h.nomad.allocations(jobId).find((a) => a["ID"] === slot.container.id)!;
    h.nomad.freezeAllocation(String(alloc["ID"]));
    const { error, ms } = await running;
    expect(error).toBeInstanceOf(SlotLostError);
    expect((error as Error).message).toMatch(/health/);
    // Defaults: 2 failed checks 2 s apart, each bounded by 2 s (about 6 s); Nomad itself would
    // wait ~25 s, and the emulator never declares the node down: the pool noticed it on its own.
    // bound: it leaves a loaded box room while staying short of Nomad's 25 s.
    expect(ms).toBeLessThan(20_000);
    expect(pool.stats().containers.lost).toBe(1);
    // The pool asked Nomad for a replacement; a new trajectory runs there.
    const next = await pool.acquire({ trajectoryId: "after", timeoutMs: 30_000 });
    expect(next.container.id).not.toBe(slot.container.id);
    expect((await bash(next, "echo fresh")).output.trim()).toBe("fresh");
  });

  it("a container lost on a node makes the pool check that node's other containers at once", async () => {
    // Periodic checks a minute apart: only the suspicion can find the frozen sibling in time.
    const { pool, jobId } = h.nomadPool({ slotsPerContainer: 1, minContainers: 2, maxContainers: 2, healthIntervalMs: 60_000 });
    await pool.start();
    const [a, b] = await Promise.all([pool.acquire({ trajectoryId: "a" }), pool.acquire({ trajectoryId: "b" })]);
    expect(a!.container.node).toBeDefined();
    expect(a!.container.node).toBe(b!.container.node);
    const onB = settle(bash(b!, "sleep 60"));
    // wait: as above
    await new Promise((r) => setTimeout(r, 300));
    h.nomad.freezeAllocation(b!.container.id);
    const t0 = Date.now();
    await h.nomad.killAllocation(a!.container.id); // a crash that closes its sockets: seen at once
    const { error } = await onB;
    expect(error).toBeInstanceOf(SlotLostError);
    expect((error as Error).message).toMatch(/another container of its node .* was lost/);
    // bound: found through the suspicion at once, not the minute-apart periodic checks: 20 s is far from both.
    expect(Date.now() - t0).toBeLessThan(20_000);
    expect(h.nomad.allocations(jobId).length).toBeGreaterThan(2); // replacements asked for
  });

  it("slots of a node that just lost a container go last: a retried trajectory lands on another node", async () => {
    const { pool } = h.nomadPool({ slotsPerContainer: 1, minContainers: 2, maxContainers: 3, idleTimeoutMs: 60_000, healthIntervalMs: 60_000 });
    await pool.start();
    const [a0, a1] = await Promise.all([pool.acquire({ trajectoryId: "a0" }), pool.acquire({ trajectoryId: "a1" })]);
    const oldNode = a0!.container.node;
    const newNode = h.nomad.placeOnNewNode();
    const b = await pool.acquire({ trajectoryId: "b", timeoutMs: 30_000 }); // scales up: index 2 on the new node
    expect(b.container.node).toBe(newNode);
    await pool.release(a1!);
    await pool.release(b);
    // Packing alone would hand out a1's slot (lowest index) next; a0's crash makes its node suspect.
    await h.nomad.killAllocation(a0!.container.id);
    await until(() => a0!.lost, 10_000);
    const retried = await pool.acquire({ trajectoryId: "a0-retry" });
    expect(retried.container.node).toBe(newNode);
    expect(retried.container.node).not.toBe(oldNode);
    expect((await bash(retried, "echo elsewhere")).output.trim()).toBe("elsewhere");
  });

  it("a node that lost all the pool's containers is kept out of placements: the replacement goes elsewhere, containers on other nodes are not replaced", async () => {
    const { pool, jobId } = h.nomadPool({ slotsPerContainer: 1, minContainers: 2, maxContainers: 2, idleTimeoutMs: 60_000, healthIntervalMs: 60_000 });
    await pool.start();
    const first = await pool.acquire({ trajectoryId: "a" });
    const nodeA = first.container.node!;
    // The second container on node B: the pool has two failure domains.
    await pool.release(first);
    const nodeB = h.nomad.placeOnNewNode();
    const onA = h.nomad.allocations(jobId).find((a) => a["NodeID"] === nodeA && a["DesiredStatus"] === "run")!;
    const other = h.nomad.allocations(jobId).find((a) => a["ID"] !== onA["ID"] && a["DesiredStatus"] === "run")!;
    if (other["NodeID"] === nodeA) {
      // Both landed on A at start: move the second one to B.
      await h.client().stopAllocation(String(other["ID"]));
      await until(() => h.nomad.allocations(jobId).some((a) => a["NodeID"] === nodeB && a["ClientStatus"] === "running"), 20_000);
    }
    const onB = await found(() => h.nomad.allocations(jobId).find((a) => a["NodeID"] === nodeB && a["ClientStatus"] === "running" && a["DesiredStatus"] === "run"), 20_000);
    await until(() => pool.stats().containers.ready === 2, 20_000);
    // Nomad would place the replacement back on A (it does not know A is in trouble yet).
    h.nomad.placeOnNode(nodeA);
    await h.nomad.killAllocation(String(onA["ID"]));
    const replacement = await found(
      () => h.nomad.allocations(jobId).find((a) => a["ID"] !== onA["ID"] && a["ID"] !== onB["ID"] && a["DesiredStatus"] === "run" && a["ClientStatus"] === "running"),
      30_000,
    );
    expect(replacement["NodeID"]).not.toBe(nodeA);
    expect(replacement["NodeID"]).not.toBe(nodeB); // B was not where placements went: a fresh node
    // The container on B is the same allocation, still running: updated in place, not replaced.
    const b = h.nomad.allocations(jobId).find((a) => a["ID"] === onB["ID"])!;
    expect([b["DesiredStatus"], b["ClientStatus"]]).toEqual(["run", "running"]);
    // The job asks Nomad to keep off A.
    const job = await h.client().readJob(jobId);
    expect((job?.TaskGroups?.[0] as { Constraints?: unknown } | undefined)?.Constraints).toEqual([{ LTarget: "${node.unique.id}", Operand: "!=", RTarget: nodeA }]);
    // Capacity is made up: two containers serve again.
    await until(() => pool.stats().containers.ready === 2, 30_000);
    const [x, y] = await Promise.all([pool.acquire({ trajectoryId: "x" }), pool.acquire({ trajectoryId: "y" })]);
    expect([x!.container.node, y!.container.node]).not.toContain(nodeA);
  });
});
