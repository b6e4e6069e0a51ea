/**
 * A slot's generation (real server, real bubblewrap): each reset, and each fork into the slot,
 * begins a new one. A call or artifact request that names the generation its trajectory got
 * runs only in that generation: after a reset from outside it is refused as an infra failure
 * (`command_killed`) and does not run, so a trajectory's later calls, or its reward's reads,
 * never run on an emptied workspace as if it were theirs. A request that names none is
 * served as before.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer, untilSlot } from "./helpers.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("slot generations", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 4 });
  }, 90_000);
  afterAll(async () => {
    await s?.stop();
  });

  const reset = async (slot: number): Promise<number> => {
    const r = await s.post("/reset", { slot_id: `slot_${slot}` });
    expect(r.status, r.text).toBe(200);
    expect(r.json.success).toBe(true);
    return r.json.generation as number;
  };

  it("are reported by /health and /slots, and each reset answers the next one", async () => {
    const health = await s.get("/health");
    expect(health.json.slot_generations).toHaveLength(4);
    const before = health.json.slot_generations[0] as number;
    const g = await reset(0);
    expect(g).toBe(before + 1);
    expect(await reset(0)).toBe(g + 1);
    const slots = await s.get("/slots");
    expect(slots.json.slots[0]).toMatchObject({ slot_id: "slot_0", generation: g + 1 });
  }, 60_000);

  it("a call of the current generation runs; one of an older generation is refused as command_killed and does not run", async () => {
    const g = await reset(1);
    const ok = await s.bash(1, "echo here > mine.txt && echo ok", {}, { generation: g });
    expect(ok.success, ok.error).toBe(true);
    const g2 = await reset(1); // from outside: the trajectory still holds g
    const stale = await s.bash(1, "echo late > late.txt", {}, { generation: g });
    expect(stale).toMatchObject({ success: false, metadata: { infra: "command_killed" } });
    expect(stale.error).toMatch(/reset from outside/);
    // Not run: nothing was written. A call naming no generation is served as before.
    const check = await s.bash(1, "ls -A");
    expect(check.output.trim()).toBe("");
    const current = await s.bash(1, "echo fine", {}, { generation: g2 });
    expect(current.output.trim()).toBe("fine");
  }, 60_000);

  it("a call queued behind a running one when a reset from outside begins does not run on the emptied slot", async () => {
    const g = await reset(2);
    const running = s.bash(2, "sleep 30", { timeout: 60 }, { generation: g });
    await untilSlot(s, 2, (e) => e.queued >= 1, "the long call running");
    const queued = s.bash(2, "touch queued.txt && echo ran", {}, { generation: g });
    await untilSlot(s, 2, (e) => e.queued >= 2, "the second call queued behind it");
    const outside = reset(2);
    const [r, q] = await Promise.all([running, queued]);
    await outside;
    expect(r).toMatchObject({ success: false, metadata: { infra: "command_killed" } });
    expect(q).toMatchObject({ success: false, metadata: { infra: "command_killed" } });
    expect(q.output).not.toContain("ran");
    expect((await s.bash(2, "ls -A")).output.trim()).toBe("");
  }, 90_000);

  it("an artifact read of an older generation is refused the same way; of the current one it reads", async () => {
    const g = await reset(3);
    await s.bash(3, "echo reward-input > answer.txt", {}, { generation: g });
    const fresh = await s.post("/artifacts/read", { slot_id: "slot_3", path: "answer.txt", generation: g });
    expect(fresh.json.content).toBe("reward-input\n");
    await reset(3);
    const stale = await s.post("/artifacts/read", { slot_id: "slot_3", path: "answer.txt", generation: g });
    expect(stale.status).toBe(200);
    expect(stale.json).toMatchObject({ success: false, metadata: { infra: "command_killed" } });
    for (const route of ["/artifacts/list", "/artifacts/archive"]) {
      const r = await s.post(route, { slot_id: "slot_3", path: ".", generation: g });
      expect(r.json, route).toMatchObject({ success: false, metadata: { infra: "command_killed" } });
    }
  }, 60_000);

  it("a fork begins a new generation in each child (answered in into's order); the parent keeps its own", async () => {
    const parentGen = await reset(0);
    const before = (await s.get("/health")).json.slot_generations as number[];
    await s.bash(0, "echo parent > p.txt", {}, { generation: parentGen });
    const f = await s.post("/fork", { slot_id: "slot_0", into: ["slot_3", "slot_1"] });
    expect(f.status, f.text).toBe(200);
    expect(f.json.generations).toEqual([before[3]! + 1, before[1]! + 1]);
    const child = await s.bash(3, "cat p.txt", {}, { generation: f.json.generations[0] });
    expect(child.output.trim()).toBe("parent");
    // A call made for what slot_1 held before the fork is refused.
    const old = await s.bash(1, "true", {}, { generation: before[1] });
    expect(old.metadata.infra).toBe("command_killed");
    const parent = await s.bash(0, "cat p.txt", {}, { generation: parentGen });
    expect(parent.output.trim()).toBe("parent");
  }, 60_000);
});
