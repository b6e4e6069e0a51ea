import { readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startServer, type TestServer } from "./helpers.js";

/**
 * A failed fork changes nothing (issue 23): each child's new workspace is prepared beside its
 * old one (its handles of the parent's layers; a used child's fresh disk; the view, mounted
 * detached) before any child drops its contents, so a child failing at any of those steps
 * leaves the parent and every child as they were, what the others prepared undone. The
 * failure is injected into slot_3's preparation (SLOTPOOL_TEST_FORK_FAIL, read by fork.ts
 * for tests only): at its start, once its new disk is mounted, once its view is mounted.
 */
const UID_BASE = 22_900;

/** Checksum of the workspace from inside the slot: paths, types, modes, mtimes and contents. */
const TREE_SUM =
  "cd /workspace && (find . -mindepth 1 -not -name '.slotpool-output-*' -printf '%p %y %m %T@\\n' | LC_ALL=C sort; find . -type f -not -name '.slotpool-output-*' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum) | sha256sum | cut -c1-64";

describe.each(["slot_3", "slot_3@disk", "slot_3@view"])("a fork that fails for one child (%s)", (failpoint) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 5, extraArgs: ["--slot-uid-base", String(UID_BASE)], env: { SLOTPOOL_TEST_FORK_FAIL: failpoint } });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  const exec = async (slot: number, command: string, tool = "bash"): Promise<string> => {
    const r = await s.post("/execute", { slot_id: `slot_${slot}`, tool, args: { command } });
    expect(r.json.error, `${command}: ${r.json.output}`).toBe("");
    return (r.json.output as string).trim();
  };

  it("leaves the parent and every child as they were: contents, processes, terminals", async () => {
    // The parent: a view already (forked once), its terminal in a sub-directory.
    await exec(0, "mkdir -p a/b && for i in $(seq 1 50); do echo $i > a/b/f$i; done && chmod 600 a/b/f1 && ln -s a/b/f2 link");
    expect((await s.post("/fork", { slot_id: "slot_0", into: ["slot_2"] })).status).toBe(200);
    await exec(0, "echo later > later && rm a/b/f3 && cd a && export PVAR=p", "bash_stateful");
    // slot_1: used, with a running background job; slot_2: a fork view of its own, changed;
    // slot_3: used (the one whose preparation fails); slot_4: fresh from a reset (no call since).
    await exec(1, "echo mine > c1 && mkdir d1");
    await exec(1, "sleep 300 & echo $! > /tmp/job.pid", "bash_stateful");
    await exec(2, "echo two >> a/b/f4 && rm a/b/f5");
    await exec(3, "echo three > c3");
    const sums = await Promise.all([0, 1, 2, 3].map((i) => exec(i, TREE_SUM)));
    expect(new Set(sums).size).toBe(4);
    await s.post("/reset", { slot_id: "slot_4" });
    await new Promise((res) => setTimeout(res, 300));

    // The slots' disks (a fork's new disk is a dir beside them until it is switched to or dropped).
    const disks = (): string[] => readdirSync(join(s.dataDir, ".slotpool")).filter((d) => d.startsWith("disk_")).sort();
    const disksBefore = disks();
    expect(disksBefore.length).toBe(5);
    const r = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_2", "slot_4", "slot_3"] });
    expect(r.status, r.text).toBeGreaterThanOrEqual(500);
    expect(r.json.error).toMatch(/failed before any child changed.*slot_3.*injected.*as they were/);
    expect(r.json.error).toContain(`injected for ${failpoint} `);
    // What the children prepared (new disks, views) was dropped, none left mounted.
    expect(disks()).toEqual(disksBefore);

    expect(await Promise.all([0, 1, 2, 3].map((i) => exec(i, TREE_SUM)))).toEqual(sums);
    // slot_1's job was not killed, and its terminal and the parent's keep their state.
    expect(await exec(1, "kill -0 $(cat /tmp/job.pid) && echo alive", "bash_stateful")).toBe("alive");
    expect(await exec(0, "pwd; echo $PVAR", "bash_stateful")).toBe("/workspace/a\np");
    // Each slot still writes to its own copy only.
    await exec(0, "echo p2 > /workspace/p2");
    expect(await exec(2, "ls p2 later 2>/dev/null || echo none")).toBe("none");

    // Without the failing child the same fork goes through; slot_4 is still fresh (no reset needed).
    const before = await exec(0, TREE_SUM);
    const logged = s.logs.length;
    const ok = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_2", "slot_4"] });
    expect(ok.status, ok.text).toBe(200);
    expect(s.logs.slice(logged).filter((l) => l.includes("fresh from a reset") && l.includes("slot_4")).length).toBe(1);
    for (const c of [1, 2, 4]) expect(await exec(c, TREE_SUM)).toBe(before);
    expect(await exec(3, TREE_SUM)).toBe(sums[3]);
  }, 120_000);
});
