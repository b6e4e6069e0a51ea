import { readdirSync, readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serversMayMount } from "../support/server-view.js";
import { startServer, type TestServer } from "./helpers.js";

/**
 * Long runs of forks (issue 23): every new slot namespace copies the server's mount table,
 * so the mounts a fork leaves behind there would slow every later namespace start. Over 200
 * forks and resets, with layer chains 20 deep and grandchildren, the server's mount table
 * and the layer handles the server holds stay bounded.
 */
const UID_BASE = 22_800;
const ROUNDS = 200;

/** The server's fork mount helpers (processes under the server named slotpool-fork-mount). */
function forkHelpers(serverPid: number): number[] {
  const parentOf = (pid: number): number => Number(readFileSync(`/proc/${pid}/stat`, "utf8").replace(/^.*\) /, "").split(" ")[1]);
  const under = (pid: number): boolean => {
    for (let p = pid, i = 0; p > 1 && i < 20; i++) {
      if (p === serverPid) return true;
      p = parentOf(p);
    }
    return false;
  };
  const found: number[] = [];
  for (const e of readdirSync("/proc")) {
    const pid = Number(e);
    if (!Number.isInteger(pid)) continue;
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, "utf8").includes("slotpool-fork-mount") && under(pid)) found.push(pid);
    } catch {
      /* gone meanwhile */
    }
  }
  return found;
}

describe.skipIf(!serversMayMount)("fork over a long run (overlay mode: the server mounts)", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 4, extraArgs: ["--slot-uid-base", String(UID_BASE)] });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("200 forks and resets leave the mount tables and the live layer handles bounded", async () => {
    const exec = async (slot: number, command: string, tool = "bash"): Promise<string> => {
      const r = await s.post("/execute", { slot_id: `slot_${slot}`, tool, args: { command } });
      expect(r.json.error, `${command}: ${r.json.output}`).toBe("");
      return (r.json.output as string).trim();
    };
    const fork = async (from: number, into: number[]): Promise<void> => {
      const r = await s.post("/fork", { slot_id: `slot_${from}`, into: into.map((i) => `slot_${i}`) });
      expect(r.status, r.text).toBe(200);
      expect(r.json.mode).toBe("overlay");
    };
    const serverMounts: number[] = [];
    const handles: number[] = [];
    await exec(0, "echo start > f && cd /workspace", "bash_stateful");
    for (let r = 0; r < ROUNDS; r++) {
      // The parent's chain restarts every 20 forks (a group's root is reset after its group).
      if (r % 20 === 0 && r > 0) {
        expect((await s.post("/reset", { slot_id: "slot_0" })).json.success).toBe(true);
        await exec(0, "mkdir -p d && cd d", "bash_stateful");
      }
      await exec(0, `echo ${r} > /workspace/f`);
      await fork(0, [1, 2]);
      expect(await exec(1, "cat f; echo child > own")).toBe(`${r}`);
      // Now and then a child forks on (a grandchild) before it is reset; else only one is
      // reset and the other is forked into used, which resets it in the fork.
      if (r % 10 === 5) {
        await fork(1, [3]);
        expect(await exec(3, "cat f own")).toBe(`${r}\nchild`);
        await s.post("/reset", { slot_id: "slot_3" });
      }
      await s.post("/reset", { slot_id: r % 2 === 0 ? "slot_1" : "slot_2" });
      if (r % 10 === 9) {
        const helpers = forkHelpers(s.proc.pid);
        expect(helpers.length).toBeGreaterThan(0);
        // The helpers live in the server's mount namespace: their table is the server's.
        serverMounts.push(readFileSync(`/proc/${helpers[0]}/mountinfo`, "utf8").trim().split("\n").length);
        handles.push(Math.max(...helpers.map((p) => readdirSync(`/proc/${p}/fd`).length)));
      }
    }
    const spread = (xs: number[]): number => Math.max(...xs) - Math.min(...xs);
    console.log(`every 10 rounds: server mounts ${serverMounts.join(" ")}; most descriptors of a fork helper ${handles.join(" ")}`);
    // Each of 20 samples saw 0-20 live layers (x3 handles as root): none of that in a mount table.
    expect(spread(serverMounts), `server mount table over the run: ${serverMounts.join(" ")}`).toBeLessThanOrEqual(8);
    // Handles: the parent's chain (<= 20 layers, each with a clone per child uid as root) and
    // the children's, never all layers ever made (200+).
    expect(Math.max(...handles), `most open descriptors of a fork helper: ${handles.join(" ")}`).toBeLessThanOrEqual(100);
    expect(await exec(1, "cat f")).toBe(`${ROUNDS - 1}`);
  }, 400_000);
});
