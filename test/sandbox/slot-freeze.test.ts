import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, startServer, type TestServer, readEvents } from "./helpers.js";

/**
 * Pause/resume of a slot on the sandbox server (`POST /processes/freeze`, `/processes/thaw`;
 * isolation/slot-freezer.ts): output stops while frozen and goes on after, a start in a
 * frozen slot is refused, and a kill-all of a frozen slot ends its processes (a task frozen
 * by a v1 freezer cannot die until thawed: the kill thaws first). Both mechanisms.
 */

interface Ev {
  type: string;
  data?: string;
  signal?: string | null;
}

async function open(s: TestServer, body: unknown) {
  const res = await fetch(s.url + "/processes/start", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  expect(res.status).toBe(200);
  const events: Ev[] = [];
  const done = readEvents(res, events);
  const lines = () => events.filter((e) => e.type === "stdout").map((e) => Buffer.from(e.data!, "base64").toString("utf8")).join("").split("\n").filter(Boolean);
  return { events, done, lines };
}

async function until(cond: () => boolean, timeoutMs = 15_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

const COUNT = { slot_id: "slot_0", cmd: "/bin/bash", args: ["-c", "i=0; while :; do i=$((i+1)); echo $i; sleep 0.05; done"] };

describe.each([
  { name: isRoot ? "freezer cgroup" : "signals (non-root)", args: [] as string[], mechanism: isRoot ? "cgroup-freezer" : "signals" },
  { name: "signals (--no-cgroups)", args: ["--no-cgroups"], mechanism: "signals" },
])("slot freeze: $name", ({ args, mechanism }) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 1, extraArgs: args });
  }, 90_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("a frozen slot's output stops, a start is refused (409), thaw continues the same process", async () => {
    const p = await open(s, COUNT);
    await until(() => p.lines().length >= 3);
    const frozen = await s.post("/processes/freeze", { slot_id: "slot_0" });
    expect(frozen.status).toBe(200);
    expect(frozen.json.mechanism).toBe(mechanism);
    expect(frozen.json.processes).toBeGreaterThan(0);
    const at = p.lines().length;
    // wait: a frozen process shows nothing; 800 ms is 16 of its 50 ms lines that must not come (a loaded box can only make fewer come: never a false failure).
    await new Promise((r) => setTimeout(r, 800));
    expect(p.lines().length).toBeLessThanOrEqual(at + 1);
    const refused = await s.post("/processes/start", { slot_id: "slot_0", cmd: "/bin/true", args: [] });
    expect(refused.status).toBe(409);
    expect(refused.json.error).toMatch(/paused/);
    expect((await s.post("/processes/thaw", { slot_id: "slot_0" })).status).toBe(200);
    await until(() => p.lines().length >= at + 5);
    const ns = p.lines().map(Number);
    expect(ns).toEqual(ns.map((_, i) => i + 1));
    expect((await s.post("/processes/kill-all", { slot_id: "slot_0" })).status).toBe(200);
    await p.done;
  });

  it("kill-all of a frozen slot ends its processes; the slot runs commands again", async () => {
    const p = await open(s, COUNT);
    await until(() => p.lines().length >= 2);
    expect((await s.post("/processes/freeze", { slot_id: "slot_0" })).status).toBe(200);
    expect((await s.post("/processes/kill-all", { slot_id: "slot_0" })).status).toBe(200);
    await p.done;
    expect(p.events.at(-1)).toMatchObject({ type: "end", signal: "SIGKILL" });
    const next = await open(s, { slot_id: "slot_0", cmd: "/bin/echo", args: ["again"] });
    await next.done;
    expect(next.lines()).toEqual(["again"]);
  });
});
