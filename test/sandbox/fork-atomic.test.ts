import { readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { logLinesSince, startServer, type TestServer } from "./helpers.js";

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

/** Runs `command` in a slot of `server` and returns its trimmed output; any error fails the test. */
async function execIn(server: TestServer, slot: number, command: string, tool = "bash"): Promise<string> {
  const r = await server.post("/execute", { slot_id: `slot_${slot}`, tool, args: { command } });
  expect(r.json.error, `${command}: ${r.json.output}`).toBe("");
  return (r.json.output as string).trim();
}

describe.each(["slot_3", "slot_3@disk", "slot_3@view"])("a fork that fails for one child (%s)", (failpoint) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 5, extraArgs: ["--slot-uid-base", String(UID_BASE)], env: { SLOTPOOL_TEST_FORK_FAIL: failpoint } });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  const exec = (slot: number, command: string, tool = "bash") => execIn(s, slot, command, tool);

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
    expect((await logLinesSince(s, logged, (l) => l.includes("fresh from a reset") && l.includes("slot_4"))).length).toBe(1);
    for (const c of [1, 2, 4]) expect(await exec(c, TREE_SUM)).toBe(before);
    expect(await exec(3, TREE_SUM)).toBe(sums[3]);
  }, 120_000);
});

/**
 * Copy mode (SLOTPOOL_TEMPLATE_VIEWS=copy: no overlayfs, as on a server that may not mount):
 * each child's copy of the parent's tree is staged beside its workspace, on its own disk
 * where it has one, and swapped in only once every child's copy is complete. A failure at
 * the start of slot_3's preparation or in the middle of its copy (`slot_3@copy`: the tree
 * copied, not yet given to its uid) leaves every slot as it was, the staged copies removed.
 */
describe.each([
  ["slot_3", true],
  ["slot_3@copy", true],
  // No disk of its own per slot: the stage lies in the state dir and the workspace dir itself is renamed.
  ["slot_3@copy", false],
])("a copy-mode fork that fails for one child (%s, slot disks: %s)", (failpoint, disks) => {
  let s: TestServer;
  beforeAll(async () => {
    const extraArgs = ["--slot-uid-base", String(UID_BASE + 200), ...(disks ? [] : ["--no-disk-workspace"])];
    s = await startServer({ slots: 5, extraArgs, env: { SLOTPOOL_TEMPLATE_VIEWS: "copy", SLOTPOOL_TEST_FORK_FAIL: failpoint } });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  const exec = (slot: number, command: string, tool = "bash") => execIn(s, slot, command, tool);
  /** KiB used on the filesystem of the slot's workspace (its own disk, where it has one). */
  const used = async (slot: number): Promise<number> => Number(await exec(slot, "df -k --output=used /workspace | tail -1"));
  const staged = (): string[] => readdirSync(join(s.dataDir, ".slotpool", "fork-copies"));

  it("leaves the parent and every child as they were, the staged copies removed; without the failing child it copies", async () => {
    // The parent: 4 MiB and a tree with modes and a link, its terminal in a sub-directory.
    await exec(0, "mkdir -p a/b && for i in $(seq 1 50); do echo $i > a/b/f$i; done && chmod 600 a/b/f1 && ln -s a/b/f2 link && head -c 4M /dev/urandom > big");
    await exec(0, "cd a && export PVAR=p", "bash_stateful");
    // slot_1: used, a background job and a file in /tmp; slot_2 and slot_3: used; slot_4: fresh.
    await exec(1, "echo mine > c1 && mkdir d1");
    await exec(1, "sleep 300 & echo $! > /tmp/job.pid; echo t > /tmp/t1", "bash_stateful");
    await exec(2, "echo two > c2 && chmod 500 .");
    await exec(3, "echo three > c3");
    await s.post("/reset", { slot_id: "slot_4" });
    const sums = await Promise.all([0, 1, 2, 3, 4].map((i) => exec(i, TREE_SUM)));
    expect(new Set(sums).size).toBe(5);
    const usedBefore = await Promise.all([1, 2, 3, 4].map(used));

    const r = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_2", "slot_4", "slot_3"] });
    expect(r.status, r.text).toBeGreaterThanOrEqual(500);
    expect(r.json.error).toMatch(/failed before any child changed.*slot_3.*injected.*as they were/);
    expect(r.json.error).toContain(`injected for ${failpoint} `);
    expect(await Promise.all([0, 1, 2, 3, 4].map((i) => exec(i, TREE_SUM)))).toEqual(sums);
    expect(await exec(1, "kill -0 $(cat /tmp/job.pid) && echo alive && cat /tmp/t1", "bash_stateful")).toBe("alive\nt");
    expect(await exec(0, "pwd; echo $PVAR", "bash_stateful")).toBe("/workspace/a\np");
    // The staged copies (4 MiB each) are gone: none left beside a workspace or on a child's disk.
    expect(staged()).toEqual([]);
    // On a slot's own disk a staged copy left behind would show in its usage (without one the
    // workspace shares the host's filesystem, whose usage others change).
    const usedAfter = await Promise.all([1, 2, 3, 4].map(used));
    if (disks) usedAfter.forEach((u, i) => expect(u, `slot_${[1, 2, 3, 4][i]} KiB used`).toBeLessThan(usedBefore[i]! + 1024));

    // Without the failing child the fork goes through: each child holds the parent's tree (its
    // previous files and /tmp dropped, as by a reset), its terminal in the parent's directory.
    const ok = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_2", "slot_4"] });
    expect(ok.status, ok.text).toBe(200);
    expect(ok.json.mode).toBe("copy");
    for (const c of [1, 2, 4]) expect(await exec(c, TREE_SUM)).toBe(sums[0]);
    expect(await exec(3, TREE_SUM)).toBe(sums[3]);
    expect(await exec(1, "ls c1 2>/dev/null || echo none")).toBe("none");
    expect(await exec(1, "pwd; echo $PVAR; ls /tmp/t1 2>/dev/null || echo none", "bash_stateful")).toBe("/workspace/a\np\nnone");
    expect(staged()).toEqual([]);
    // Each child's files are its own: writes and deletes stay where they were made.
    await exec(1, "rm a/b/f2 && echo c > c && chmod 644 a/b/f1");
    expect(await exec(2, "ls a/b/f2 && ls -l a/b/f1 | cut -c1-10 && (ls c 2>/dev/null || echo none)")).toBe("a/b/f2\n-rw-------\nnone");
    expect(await exec(0, TREE_SUM)).toBe(sums[0]);
  }, 120_000);
});

/** Built by the template tests' way (POST /templates): files, a setup run in a sandbox, a read-only file. */
const REPO = {
  name: "atomrepo",
  files: { "README.md": "# demo\n", "src/app.py": "def add(a, b):\n    return a + b\n" },
  setup: ["mkdir -p data && for i in $(seq 1 20); do echo $i > data/f$i.txt; done && chmod 444 data/f1.txt"],
};
const OTHER = { name: "atomother", files: { "other.txt": "other\n" }, setup: [] as string[] };

/**
 * The same with a parent whose workspace is a template view: each child's view reads the
 * parent's template as its lowest layer (as root through an id-mapped handle for the
 * child's uid), prepared beside like the rest, so a failure at any step, the template handle
 * included, leaves every child as it was, its own template view too, and every template's
 * use count as it was.
 */
describe.each(["slot_3", "slot_3@disk", "slot_3@template", "slot_3@view"])("a fork of a template view that fails for one child (%s)", (failpoint) => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 5, extraArgs: ["--slot-uid-base", String(UID_BASE + 100)], env: { SLOTPOOL_TEST_FORK_FAIL: failpoint } });
    for (const t of [REPO, OTHER]) expect((await s.post("/templates", t)).json.success).toBe(true);
  }, 180_000);
  afterAll(async () => {
    await s?.stop();
  });

  const exec = (slot: number, command: string, tool = "bash") => execIn(s, slot, command, tool);
  const inUse = async (): Promise<Record<string, number>> => {
    const l = await s.get("/templates");
    return Object.fromEntries((l.json.templates as Array<{ name: string; in_use: number }>).map((t) => [t.name, t.in_use]));
  };
  const reset = async (slot: number, template?: string): Promise<void> => {
    const r = await s.post("/reset", { slot_id: `slot_${slot}`, ...(template ? { template } : {}) });
    expect(r.json.success, r.text).toBe(true);
  };

  it("leaves the parent, every child (its template view too) and the templates' use counts as they were", async () => {
    // The parent: a view of atomrepo, changed (a template file edited, one deleted, a new one), terminal in src/.
    await reset(0, "atomrepo");
    await exec(0, "echo more >> README.md && rm data/f2.txt && echo new > new.txt && chmod 600 src/app.py");
    await exec(0, "cd src && export PVAR=p", "bash_stateful");
    // slot_1: used plain, a background job; slot_2: a view of another template, changed;
    // slot_3: a view of atomrepo, changed (the one whose preparation fails); slot_4: fresh.
    await exec(1, "echo mine > c1");
    await exec(1, "sleep 300 & echo $! > /tmp/job.pid", "bash_stateful");
    await reset(2, "atomother");
    await exec(2, "echo two >> other.txt");
    await reset(3, "atomrepo");
    await exec(3, "rm README.md && echo three > c3");
    await reset(4);
    const sums = await Promise.all([0, 1, 2, 3].map((i) => exec(i, TREE_SUM)));
    expect(new Set(sums).size).toBe(4);
    const used = await inUse();
    expect(used).toEqual({ atomrepo: 2, atomother: 1 });
    await new Promise((res) => setTimeout(res, 300));

    const disks = (): string[] => readdirSync(join(s.dataDir, ".slotpool")).filter((d) => d.startsWith("disk_")).sort();
    const disksBefore = disks();
    const r = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_2", "slot_4", "slot_3"] });
    expect(r.status, r.text).toBeGreaterThanOrEqual(500);
    expect(r.json.error).toMatch(/failed before any child changed.*slot_3.*injected.*as they were/);
    expect(r.json.error).toContain(`injected for ${failpoint} `);
    expect(disks()).toEqual(disksBefore);
    expect(await Promise.all([0, 1, 2, 3].map((i) => exec(i, TREE_SUM)))).toEqual(sums);
    expect(await inUse()).toEqual(used);
    expect(await exec(1, "kill -0 $(cat /tmp/job.pid) && echo alive", "bash_stateful")).toBe("alive");
    expect(await exec(0, "pwd; echo $PVAR", "bash_stateful")).toBe("/workspace/src\np");
    // slot_2 and slot_3 are still views of their own templates: a write there lands in their view only.
    await exec(2, "echo again >> other.txt");
    await exec(3, "echo again > c3b");
    expect(await exec(0, "ls other.txt c3b 2>/dev/null || echo none")).toBe("none");
    sums[2] = await exec(2, TREE_SUM);
    sums[3] = await exec(3, TREE_SUM);

    // Without the failing child the same fork goes through: every child holds the parent's
    // tree, template layer included, and counts as a view of atomrepo.
    const before = await exec(0, TREE_SUM);
    const ok = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_2", "slot_4"] });
    expect(ok.status, ok.text).toBe(200);
    for (const c of [1, 2, 4]) expect(await exec(c, TREE_SUM)).toBe(before);
    expect(await exec(3, TREE_SUM)).toBe(sums[3]);
    expect(await inUse()).toEqual({ atomrepo: 5, atomother: 0 });
    // A child edits and deletes template files in its own view; a child of that child sees its tree.
    expect(await exec(1, "echo one >> src/app.py && rm data/f1.txt && ls -l src/app.py | cut -c1-10")).toBe("-rw-------");
    expect(await exec(2, "cat data/f1.txt")).toBe("1");
    const one = await exec(1, TREE_SUM);
    const again = await s.post("/fork", { slot_id: "slot_1", into: ["slot_4"] });
    expect(again.status, again.text).toBe(200);
    expect(await exec(4, TREE_SUM)).toBe(one);
    expect(await inUse()).toEqual({ atomrepo: 5, atomother: 0 });
    expect(await exec(0, TREE_SUM)).toBe(before);
    // A reset ends a child's view of the template (its reference handed back).
    await reset(1);
    await reset(4);
    expect(await inUse()).toEqual({ atomrepo: 3, atomother: 0 });
    expect(await exec(4, "ls | wc -l")).toBe("0");
  }, 180_000);
});
