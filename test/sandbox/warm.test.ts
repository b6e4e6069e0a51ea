/**
 * Warm slots: every slot's namespace (bubblewrap holder + spawner) is started in the
 * background when the server starts, and again right after a reset, so the first command
 * of the next trajectory does not pay for building it. A call that arrives while the
 * namespace is still starting waits for it instead of starting a second one. The
 * re-created namespace holds nothing of the previous trajectory.
 */
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, startServer, type TestServer } from "./helpers.js";
import { serverView } from "../support/server-view.js";

const UID_BASE = 21_700;
let s: TestServer;

/** The spawner processes under the server (one per live slot namespace), with their uid. */
function spawners(serverPid: number): Array<{ pid: number; uid: number }> {
  const parent = new Map<number, number>();
  const info = new Map<number, { comm: string; uid: number }>();
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, "utf8");
      const close = stat.lastIndexOf(")");
      const comm = stat.slice(stat.indexOf("(") + 1, close);
      parent.set(Number(name), Number(stat.slice(close + 2).split(" ")[1]));
      const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${name}/status`, "utf8"))?.[1] ?? -1);
      info.set(Number(name), { comm, uid });
    } catch {
      /* exited meanwhile */
    }
  }
  const under = (pid: number): boolean => {
    for (let p = parent.get(pid), n = 0; p !== undefined && p > 1 && n < 64; p = parent.get(p), n++) if (p === serverPid) return true;
    return false;
  };
  // A spawner's own children are "spawner" too between their fork and their exec of bash
  // (the next command's bash is pre-forked right after each call): not a namespace.
  const forkedBySpawner = (pid: number): boolean => info.get(parent.get(pid) ?? -1)?.comm === "spawner";
  return [...info.entries()].filter(([pid, i]) => i.comm === "spawner" && !forkedBySpawner(pid) && under(pid)).map(([pid, i]) => ({ pid, uid: i.uid }));
}

/**
 * Spawners of one slot: by its uid when root; otherwise (every slot runs as the server's
 * uid) by the workspace its namespace shows at /workspace, which is the slot's directory.
 */
function slotSpawners(slot: number): number[] {
  // Device and inode: every slot's disk (a tmpfs each) numbers its inodes from the start.
  const workspace = statSync(serverView(s.proc.pid, join(s.dataDir, `slot_${slot}`)));
  const seesWorkspace = (pid: number): boolean => {
    try {
      const seen = statSync(`/proc/${pid}/root/workspace`);
      return seen.ino === workspace.ino && seen.dev === workspace.dev;
    } catch {
      return false;
    }
  };
  return spawners(s.proc.pid)
    .filter((p) => (isRoot ? p.uid === UID_BASE + slot : seesWorkspace(p.pid)))
    .map((p) => p.pid);
}

async function until(what: string, ok: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

beforeAll(async () => {
  s = await startServer({ slots: 3, extraArgs: ["--slot-uid-base", String(UID_BASE)] });
}, 60_000);
afterAll(async () => {
  await s?.stop();
});

/** Why the warm-namespace tests cannot run: the server found no per-slot spawner. */
const NO_FAST_PATH = "no fast path here (the per-slot spawner needs a C compiler: scripts/setup.sh installs one), so nothing is pre-warmed";

describe("warm slots", () => {
  it.skipIf(!existsSync("/bin/bash-static"))(
    "runs each call's bash from Debian's static build when the image has one (skipped without bash-static): UTF-8, $0 and exit codes as with /bin/bash",
    async (ctx) => {
      const health = await s.get("/health");
      if (!health.json.fast_path) ctx.skip(NO_FAST_PATH);
      const r = await s.bash(2, 'readlink /proc/$$/exe; x="héllo"; echo ${#x} "${x^^}" "$0"; (exit 3); echo $?');
      expect(r.output).toBe("/usr/bin/bash-static\n5 HÉLLO bash\n3");
      expect((await s.bash(2, "exit 7")).metadata.exit_code).toBe(7);
    },
    30_000,
  );

  it("pre-warms every slot's namespace at start, before any call", async (ctx) => {
    const health = await s.get("/health");
    if (!health.json.fast_path) ctx.skip(NO_FAST_PATH);
    await until("one spawner per slot", () => spawners(s.proc.pid).length === 3);
    for (let i = 0; i < 3; i++) expect(slotSpawners(i)).toHaveLength(1);
    // /slots says when the warm-up is done (benchmarks wait for it: "a warm pool").
    const deadline = Date.now() + 15_000;
    let slots = (await s.get("/slots")).json.slots as Array<{ warm: boolean }>;
    while (slots.some((x) => x.warm !== true) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
      slots = (await s.get("/slots")).json.slots as Array<{ warm: boolean }>;
    }
    expect(slots.map((x) => x.warm)).toEqual([true, true, true]);
    // The first call uses that namespace: no new one appears.
    const before = slotSpawners(1);
    expect((await s.bash(1, "echo hi")).output).toBe("hi");
    expect(slotSpawners(1)).toEqual(before);
  }, 30_000);

  it("after a reset the slot gets a fresh namespace for its last network setting, with nothing of the previous trajectory", async (ctx) => {
    const health = await s.get("/health");
    if (!health.json.fast_path) ctx.skip(NO_FAST_PATH);
    const off = { allow_network: false };
    const r = await s.bash(0, "echo secret > /tmp/prev-tmp; echo secret > /workspace/prev-file; (sleep 300 &) ; echo ok", off);
    expect(r.output).toBe("ok");
    expect(r.metadata.network_isolated).toBe(true);
    const old = new Set(slotSpawners(0));
    expect(old.size).toBeGreaterThanOrEqual(1);
    const reset = await s.post("/reset", { slot_id: "slot_0" });
    expect(reset.json.success).toBe(true);
    // Warm again without any call: a new spawner, none of the old ones.
    await until("slot_0 re-warmed", () => {
      const now = slotSpawners(0);
      return now.length === 1 && now.every((p) => !old.has(p));
    });
    const warmed = slotSpawners(0);
    // The warmed namespace is the one the next no-network call uses (no second one started).
    const next = await s.bash(0, "ls -A /tmp /workspace | grep -c prev- ; pgrep -c sleep || true", off);
    expect(next.success, JSON.stringify(next)).toBe(true);
    expect(next.metadata.network_isolated).toBe(true);
    expect(next.output.split("\n")[0]).toBe("0");
    expect(slotSpawners(0)).toEqual(warmed);
  }, 30_000);

  it("a call arriving while the namespace is being re-created waits for it instead of starting a second one", async (ctx) => {
    const health = await s.get("/health");
    if (!health.json.fast_path) ctx.skip(NO_FAST_PATH);
    for (let round = 0; round < 5; round++) {
      expect((await s.bash(2, "echo x > /tmp/x; echo ok")).output).toBe("ok");
      // Reset and the next call back to back: the call lands while the holder starts.
      const [reset, call] = await Promise.all([s.post("/reset", { slot_id: "slot_2" }), s.bash(2, "ls -A /tmp | wc -l")]);
      expect(reset.json.success).toBe(true);
      expect(call.success, JSON.stringify(call)).toBe(true);
      expect(call.output).toBe("0");
      // Give a stray second start-up time to show, then count.
      await new Promise((r) => setTimeout(r, 150));
      expect(slotSpawners(2), `round ${round}`).toHaveLength(1);
    }
  }, 45_000);

  it("shutdown leaves no namespace behind, warm or starting", async () => {
    const t = await startServer({ slots: 8, extraArgs: ["--slot-uid-base", String(UID_BASE + 10)] });
    const pid = t.proc.pid;
    // Stop while pre-warming is (likely) still in progress.
    await t.bash(0, "true");
    await t.post("/reset", { slot_id: "slot_0" });
    await t.stop();
    expect(spawners(pid)).toEqual([]);
    if (isRoot) {
      const left = () => readdirSync("/proc").filter((n) => {
        if (!/^\d+$/.test(n)) return false;
        try {
          const uid = Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${n}/status`, "utf8"))?.[1]);
          return uid >= UID_BASE + 10 && uid < UID_BASE + 18;
        } catch {
          return false;
        }
      });
      // The server is gone; what it killed may take a moment to be reaped.
      await until("no process of the stopped server's slot uids", () => left().length === 0, 30_000).catch(() => undefined);
      expect(left().map((p) => { try { return readFileSync(`/proc/${p}/cmdline`, "utf8"); } catch { return p; } })).toEqual([]);
    }
  }, 30_000);
});
