import { existsSync, readdirSync, readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serversMayMount } from "../support/server-view.js";
import { logLinesSince, startServer, type TestServer } from "./helpers.js";

/**
 * Forks into children that received a fork a moment earlier (a tree search forking
 * repeatedly, issue 30): such a child ran nothing since, so the next fork replaces its view in
 * place — its namespace stays up and is handed the new view, its disk stays — rather than
 * stopping it and giving it a new disk (and re-warming it on the next fork's path). Whatever
 * ran in a slot (a call, a process session) makes it "used" again: a fork then drops its
 * processes and its /tmp, as before.
 */
const UID_BASE = 23_700;

/** The spawner processes under the server (one per live slot namespace). */
function spawners(serverPid: number): number[] {
  const parent = new Map<number, number>();
  const comm = new Map<number, string>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const close = stat.lastIndexOf(")");
      comm.set(Number(name), stat.slice(stat.indexOf("(") + 1, close));
      parent.set(Number(name), Number(stat.slice(close + 2).split(" ")[1]));
    } catch {
      /* exited meanwhile */
    }
  }
  const under = (pid: number): boolean => {
    for (let p = parent.get(pid), n = 0; p !== undefined && p > 1 && n < 64; p = parent.get(p), n++) if (p === serverPid) return true;
    return false;
  };
  // A spawner's own children are "spawner" too between their fork and their exec of bash.
  return [...comm.entries()].filter(([pid, c]) => c === "spawner" && comm.get(parent.get(pid) ?? -1) !== "spawner" && under(pid)).map(([pid]) => pid);
}

/** Whether `name` exists in the /workspace the process `pid` sees (its own mount namespace). */
function sees(pid: number, name: string): boolean {
  try {
    return existsSync(`/proc/${pid}/root/workspace/${name}`);
  } catch {
    return false;
  }
}

/** Still running: a zombie (killed, not yet reaped by whoever inherits it) runs nothing. */
const alive = (pid: number): boolean => {
  try {
    return !/\nState:\s+[ZX]/.test(readFileSync(`/proc/${pid}/status`, "utf8"));
  } catch {
    return false;
  }
};

async function until(what: string, ok: () => boolean | Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await ok())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

async function ok(s: TestServer, slot: number, command: string): Promise<string> {
  const r = await s.bash(slot, command);
  expect(r.error, `${command}: ${r.output}`).toBe("");
  return r.output;
}

/** Runs a process session in the slot (as the E2B API does) and waits for its end. */
async function session(s: TestServer, slot: number, script: string): Promise<void> {
  const res = await fetch(s.url + "/processes/start", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: `slot_${slot}`, cmd: "/bin/bash", args: ["-c", script] }) });
  expect(res.status).toBe(200);
  const events = await res.text();
  expect(events).toContain('"exit_code":0');
}

describe.runIf(serversMayMount)("fork into children that received a fork a moment earlier", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 4, extraArgs: ["--slot-uid-base", String(UID_BASE)] });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  /** Resets the slots and waits until each one's namespace is up (as a free slot's is). */
  async function fresh(...slots: number[]): Promise<void> {
    for (const slot of slots) expect((await s.post("/reset", { slot_id: `slot_${slot}` })).json.success).toBe(true);
    await until("the reset slots' namespaces are warm", async () => {
      const r = await s.get("/slots");
      return slots.every((slot) => (r.json.slots as Array<{ slot_id: string; warm: boolean }>).find((x) => x.slot_id === `slot_${slot}`)?.warm === true);
    });
  }

  it("the next fork replaces such a child's view in place: its namespace is not stopped, it sees the new state, none of the old", async () => {
    await fresh(1);
    await ok(s, 0, "echo one > m1 && mkdir -p d && echo a > d/a");
    const f1 = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1"] });
    expect(f1.status, f1.text).toBe(200);
    expect(f1.json.mode).toBe("overlay");
    await ok(s, 0, "rm m1 && echo two > m2 && echo b > d/b");
    // slot_1's namespace: the only one that still sees m1 (the parent removed it).
    let before: number[] = [];
    await until("slot_1's namespace holds the first fork's view", () => (before = spawners(s.proc.pid).filter((p) => sees(p, "m1"))).length > 0);
    const logged = s.logs.length;
    const f2 = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1"] });
    expect(f2.status, f2.text).toBe(200);
    // The same processes, now on the new view: nothing was stopped or started again.
    for (const pid of before) {
      expect(alive(pid), `slot_1's namespace (pid ${pid}) was stopped by the fork`).toBe(true);
      expect(sees(pid, "m2") && !sees(pid, "m1")).toBe(true);
    }
    expect((await logLinesSince(s, logged, (l) => l.includes("received a fork and ran nothing since") && l.includes('"slot":"slot_1"'))).length).toBeGreaterThan(0);
    // What the child's commands see: exactly the parent's tree, and its own writes stay its own.
    expect(await ok(s, 1, "cat m2 d/a d/b && ! ls m1 2>/dev/null && echo mine > c && ls")).toBe("two\na\nb\nc\nd\nm2");
    expect(await ok(s, 0, "ls")).toBe("d\nm2");
  });

  it("a child that ran a command since is stopped and gets an empty /tmp, as before", async () => {
    await fresh(1);
    await ok(s, 0, "echo three > m3");
    expect((await s.post("/fork", { slot_id: "slot_0", into: ["slot_1"] })).status).toBe(200);
    await ok(s, 1, "echo used > /tmp/mark && cat m3");
    let before: number[] = [];
    await until("slot_1's namespace", () => (before = spawners(s.proc.pid).filter((p) => sees(p, "m3") && existsSync(`/proc/${p}/root/tmp/mark`))).length > 0);
    expect((await s.post("/fork", { slot_id: "slot_0", into: ["slot_1"] })).status).toBe(200);
    for (const pid of before) expect(alive(pid)).toBe(false);
    expect(await ok(s, 1, "ls /tmp; cat m3")).toBe("three");
  });

  it("a process session makes the slot used: a fork into it drops what the session left in /tmp", async () => {
    await fresh(2);
    await session(s, 2, "echo from-session > /tmp/sess && echo w > /workspace/w");
    await ok(s, 0, "echo four > m4");
    expect((await s.post("/fork", { slot_id: "slot_0", into: ["slot_2"] })).status).toBe(200);
    expect(await ok(s, 2, "ls -A /tmp; ls; cat m4")).toBe("d\nm2\nm3\nm4\nfour");
  });

  it("back-to-back forks into the same children many times: each sees the parent at its fork, the parent never sees theirs", async () => {
    await fresh(1, 3);
    for (let r = 0; r < 6; r++) {
      await ok(s, 0, `echo r${r} > round`);
      const f = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_3"] });
      expect(f.status, f.text).toBe(200);
    }
    for (const c of [1, 3]) expect(await ok(s, c, `cat round && echo c${c} > round && ls -A /tmp`)).toBe("r5");
    expect(await ok(s, 0, "cat round")).toBe("r5");
    // The layers each slot reads stay bounded by the chain (one per fork of the parent).
    const f = await s.post("/fork", { slot_id: "slot_1", into: ["slot_2"] });
    expect(f.status, f.text).toBe(200);
    expect(await ok(s, 2, "cat round")).toBe("c1");
  });
});
