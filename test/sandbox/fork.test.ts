import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serversMayMount } from "../support/server-view.js";
import { logLinesSince, startServer, type TestServer, untilSlot } from "./helpers.js";

/**
 * POST /fork (issue 23): children get a copy-on-write copy of the parent's workspace as it
 * is at the fork; every slot's later changes stay its own; the parent keeps running.
 */
const UID_BASE = 22_700;

/** Checksum of the workspace from inside the slot: every entry's path, type, mode and mtime, and every file's content. */
const TREE_SUM =
  "cd /workspace && (find . -mindepth 1 -not -name '.slotpool-output-*' -printf '%p %y %m %T@\\n' | LC_ALL=C sort; find . -type f -not -name '.slotpool-output-*' -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum) | sha256sum | cut -c1-64";

async function ok(s: TestServer, slot: number, command: string): Promise<string> {
  const r = await s.bash(slot, command);
  expect(r.error, `${command}: ${r.output}`).toBe("");
  return r.output;
}

/** Runs `command` in the slot until its output satisfies `done` (what a background job has written by now), a minute at most. */
async function until(s: TestServer, slot: number, command: string, done: (out: string) => boolean): Promise<string> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const out = (await s.bash(slot, command)).output;
    if (done(out) || Date.now() > deadline) return out;
    await new Promise((r) => setTimeout(r, 50));
  }
}

async function stateful(s: TestServer, slot: number, command: string): Promise<string> {
  const r = await s.post("/execute", { slot_id: `slot_${slot}`, tool: "bash_stateful", args: { command } });
  expect(r.status).toBe(200);
  expect(r.json.error, `${command}: ${r.json.output}`).toBe("");
  return r.json.output as string;
}

const REPO = {
  name: "forkrepo",
  files: { "README.md": "# demo\n", "src/app.py": "def add(a, b):\n    return a + b\n" },
  setup: ["mkdir -p data && for i in $(seq 1 20); do echo $i > data/f$i.txt; done && chmod 444 data/f1.txt"],
};

describe("POST /fork", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 6, extraArgs: ["--slot-uid-base", String(UID_BASE)] });
    const b = await s.post("/templates", REPO);
    expect(b.json.success).toBe(true);
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("children hold exactly the parent's tree at the fork; writes and deletes stay in the slot that made them", async () => {
    await ok(s, 0, "mkdir -p a/b && for i in $(seq 1 200); do echo $i > a/b/f$i; done && echo x > top && chmod 600 top && ln -s top link && mkdir empty");
    const before = await ok(s, 0, TREE_SUM);
    const f = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_2"] });
    expect(f.status, f.text).toBe(200);
    expect(f.json).toMatchObject({ success: true, slot_id: "slot_0", into: ["slot_1", "slot_2"], mode: serversMayMount ? "overlay" : "copy" });
    expect(await ok(s, 1, TREE_SUM)).toBe(before);
    expect(await ok(s, 2, TREE_SUM)).toBe(before);
    expect(await ok(s, 0, TREE_SUM)).toBe(before);
    // Each slot changes its copy; nobody else sees it.
    await ok(s, 0, "echo parent > p && rm a/b/f1 && echo changed > top");
    await ok(s, 1, "echo one > c1 && rm a/b/f2 && rm -r empty");
    await ok(s, 2, "echo two >> a/b/f3 && chmod 644 top");
    expect(await ok(s, 0, "ls p a/b/f2 a/b/f3 empty >/dev/null && cat top && ! ls c1 a/b/f1 2>/dev/null && cat a/b/f3")).toBe("changed\n3");
    expect(await ok(s, 1, "ls a/b/f1 a/b/f3 >/dev/null && ! ls p empty a/b/f2 2>/dev/null && cat top c1 a/b/f3 && stat -c %a top")).toBe("x\none\n3\n600");
    expect(await ok(s, 2, "ls a/b/f1 a/b/f2 empty >/dev/null && ! ls p c1 2>/dev/null && cat top && cat a/b/f3 && stat -c %a top")).toBe("x\n3\ntwo\n644");
  });

  it("the parent's background job and terminal state survive; the parent's later writes never reach the children", async () => {
    await s.post("/reset", { slot_id: "slot_0" });
    await stateful(s, 0, "mkdir -p work/sub && cd work/sub && export FORK_VAR='hello world' && NOT_EXPORTED=1");
    await stateful(s, 0, "(while :; do date +%s%N >> /workspace/bg.log; sleep 0.05; done) >/dev/null 2>&1 & echo $! > /workspace/bg.pid");
    await until(s, 0, "cat bg.log 2>/dev/null | wc -l", (n) => Number(n) > 0);
    const f = await s.post("/fork", { slot_id: "slot_0", into: ["slot_3"] });
    expect(f.status, f.text).toBe(200);
    const atFork = Number(await ok(s, 3, "wc -l < /workspace/bg.log"));
    expect(atFork).toBeGreaterThan(0);
    await until(s, 0, "wc -l < bg.log", (n) => Number(n) > atFork);
    // The job still runs in the parent and keeps writing there (its log grows), not in the child.
    expect(await stateful(s, 0, "kill -0 $(cat /workspace/bg.pid) && echo alive")).toBe("alive");
    expect(Number(await ok(s, 0, "wc -l < bg.log"))).toBeGreaterThan(atFork);
    expect(Number(await ok(s, 3, "wc -l < bg.log"))).toBe(atFork);
    // The parent's terminal: same directory and variables, and it writes where the children cannot see.
    expect(await stateful(s, 0, "pwd; echo $FORK_VAR $NOT_EXPORTED; echo after > after.txt")).toBe("/workspace/work/sub\nhello world 1");
    expect(await ok(s, 0, "cat work/sub/after.txt")).toBe("after");
    expect((await s.bash(3, "cat work/sub/after.txt")).error).not.toBe("");
    // The child's terminal starts in the parent's directory with its exported environment, without its processes.
    expect(await stateful(s, 3, "pwd; echo \"$FORK_VAR|$NOT_EXPORTED\"; pgrep -f 'date \\+%s' || echo none")).toBe("/workspace/work/sub\nhello world|\nnone");
    await stateful(s, 0, "kill $(cat /workspace/bg.pid)");
  });

  it.skipIf(!serversMayMount)("documented limit: a parent process whose working directory is in the workspace keeps the state of the fork there, read-only (EROFS); by path it reaches the live workspace", async () => {
    await s.post("/reset", { slot_id: "slot_0" });
    // A job started in w/: each turn it appends relatively, then by path (cd by path each time).
    await stateful(s, 0, "mkdir -p w && cd w");
    await stateful(
      s,
      0,
      "(while :; do if echo x >> rel.log 2>/dev/null; then echo ok > /workspace/rel.status; else echo erofs > /workspace/rel.status; fi; (cd /workspace/w && echo y >> abs.log); sleep 0.05; done) >/dev/null 2>&1 & echo $! > /workspace/job.pid",
    );
    await until(s, 0, "cat rel.status 2>/dev/null", (st) => st === "ok");
    expect(await ok(s, 0, "cat rel.status")).toBe("ok");
    expect((await s.post("/fork", { slot_id: "slot_0", into: ["slot_4"] })).status).toBe(200);
    const atFork = Number(await ok(s, 4, "wc -l < w/abs.log"));
    await until(s, 0, "cat rel.status; wc -l < w/abs.log", (out) => out.split("\n")[0] === "erofs" && Number(out.split("\n")[1]) > atFork);
    // The job runs on; its relative writes fail (its cwd is the frozen mount), its writes by path land in the parent only.
    expect(await ok(s, 0, "cat rel.status")).toBe("erofs");
    expect(await stateful(s, 0, "kill -0 $(cat /workspace/job.pid) && echo alive")).toBe("alive");
    expect(Number(await ok(s, 0, "wc -l < w/abs.log"))).toBeGreaterThan(atFork);
    expect(Number(await ok(s, 4, "wc -l < w/abs.log"))).toBe(atFork);
    // The terminal itself re-entered w/ by path: its relative writes work.
    expect(await stateful(s, 0, "pwd; echo t > t.txt && cat /workspace/w/t.txt")).toBe("/workspace/w\nt");
    await stateful(s, 0, "kill $(cat /workspace/job.pid)");
  });

  it("a child forks again (layers stack) and resets of parents leave their children intact", async () => {
    await s.post("/reset", { slot_id: "slot_0" });
    await ok(s, 0, "echo gen0 > g0");
    expect((await s.post("/fork", { slot_id: "slot_0", into: ["slot_1"] })).status).toBe(200);
    await ok(s, 1, "echo gen1 > g1");
    expect((await s.post("/fork", { slot_id: "slot_1", into: ["slot_2", "slot_3"] })).status).toBe(200);
    await ok(s, 1, "echo late > late");
    // Parents reset: their layers stay alive for the grandchildren.
    await s.post("/reset", { slot_id: "slot_0" });
    await s.post("/reset", { slot_id: "slot_1" });
    expect(await ok(s, 0, "ls -A | grep -v slotpool-output || true")).toBe("");
    for (const c of [2, 3]) expect(await ok(s, c, "cat g0 g1; ls late 2>/dev/null || echo no-late")).toBe("gen0\ngen1\nno-late");
    await ok(s, 2, "rm g0 && echo mine > g1");
    expect(await ok(s, 3, "cat g0 g1")).toBe("gen0\ngen1");
    // A grandchild forks again after both ancestors were reset: their layers still serve.
    expect((await s.post("/fork", { slot_id: "slot_3", into: ["slot_4"] })).status).toBe(200);
    expect(await ok(s, 4, "cat g0 g1")).toBe("gen0\ngen1");
  });

  it("forks a template view: the child gets the template layer and the parent's changes to it", async () => {
    expect((await s.post("/reset", { slot_id: "slot_0", template: "forkrepo" })).json.success).toBe(true);
    await ok(s, 0, "rm data/f2.txt && echo more >> README.md && chmod 644 data/f1.txt && echo new > new.txt");
    const before = await ok(s, 0, TREE_SUM);
    expect((await s.post("/fork", { slot_id: "slot_0", into: ["slot_4"] })).status).toBe(200);
    expect(await ok(s, 4, TREE_SUM)).toBe(before);
    await ok(s, 4, "echo child >> README.md && rm data/f3.txt");
    expect(await ok(s, 0, "tail -1 README.md; ls data/f3.txt")).toBe("more\ndata/f3.txt");
    const list = await s.get("/templates");
    expect(list.json.templates[0].in_use).toBe(2);
  });

  it("children fresh from a reset (no call since) get the view without a second reset: same tree, their own writes, their namespaces on it", async () => {
    for (const i of [0, 1, 2]) await s.post("/reset", { slot_id: `slot_${i}`, ...(i === 0 ? { template: "forkrepo" } : {}) });
    // Let the children's namespaces start (they are sealed with the new view, not restarted);
    // without the fast path (no C compiler) nothing starts ahead, and there is nothing to wait for.
    if ((await s.get("/health")).json.fast_path) {
      await untilSlot(s, 1, (e) => e.warm === true, "slot_1's namespace up");
      await untilSlot(s, 2, (e) => e.warm === true, "slot_2's namespace up");
    }
    await ok(s, 0, "echo fresh > fresh.txt && rm data/f5.txt");
    const before = await ok(s, 0, TREE_SUM);
    const logged = s.logs.length;
    expect((await s.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_2"] })).status).toBe(200);
    // The fast path ran for both (else this test would only repeat the first one).
    expect((await logLinesSince(s, logged, (l) => l.includes("fresh from a reset"), 2)).length).toBe(2);
    for (const c of [1, 2]) {
      expect(await ok(s, c, TREE_SUM)).toBe(before);
      expect(await ok(s, c, `pwd; echo mine-${c} > own.txt; cat own.txt; ls /tmp | wc -l`)).toBe(`/workspace\nmine-${c}\n0`);
    }
    expect(await ok(s, 0, "ls own.txt 2>/dev/null || echo none")).toBe("none");
    expect(await ok(s, 1, "cat own.txt")).toBe("mine-1");
    const list = await s.get("/templates");
    expect(list.json.templates.find((t: { name: string }) => t.name === "forkrepo").in_use).toBeGreaterThanOrEqual(3);
  });

  it("refuses bad forks with a 4xx naming the problem, and nothing changes", async () => {
    await s.post("/reset", { slot_id: "slot_0" });
    await s.post("/reset", { slot_id: "slot_1" });
    await ok(s, 0, "echo parent > only-parent");
    await ok(s, 1, "echo child > only-child");
    const sums = [await ok(s, 0, TREE_SUM), await ok(s, 1, TREE_SUM)];
    const cases: Array<[unknown, number, string]> = [
      [{ slot_id: "slot_0", into: ["slot_0"] }, 400, "into.0"],
      [{ slot_id: "slot_0", into: ["slot_1", "slot_1"] }, 400, "into.1"],
      [{ slot_id: "slot_0", into: ["slot_1", "slot_99"] }, 404, "into.1"],
      [{ slot_id: "slot_99", into: ["slot_1"] }, 404, "slot_id"],
      [{ slot_id: "slot_0", into: [] }, 400, "into"],
      [{ slot_id: "slot_0" }, 400, "into"],
    ];
    for (const [body, status, field] of cases) {
      const r = await s.post("/fork", body);
      expect(r.status, JSON.stringify(body)).toBe(status);
      expect(r.json.field).toBe(field);
    }
    // A busy child: 409, and neither slot changes.
    const running = s.bash(1, "sleep 3");
    await untilSlot(s, 1, (e) => e.queued >= 1, "slot_1 running its call");
    const busy = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1"] });
    expect(busy.status).toBe(409);
    expect(busy.json.error).toMatch(/slot_1 is busy/);
    expect((await running).error).toBe("");
    expect([await ok(s, 0, TREE_SUM), await ok(s, 1, TREE_SUM)]).toEqual(sums);
  });

  it.skipIf(!serversMayMount)("a parent whose terminal holds a workspace file open for writing is refused with 409, unchanged", async () => {
    await s.post("/reset", { slot_id: "slot_0" });
    await s.post("/reset", { slot_id: "slot_5" });
    // Forked once already: the refused fork would replace that view (and must not).
    await ok(s, 0, "echo base > base");
    expect((await s.post("/fork", { slot_id: "slot_0", into: ["slot_5"] })).status).toBe(200);
    await ok(s, 5, "echo mine > child-file");
    await stateful(s, 0, "exec 7>/workspace/held.log; echo held >&7");
    const before = [await ok(s, 0, TREE_SUM), await ok(s, 5, TREE_SUM)];
    const r = await s.post("/fork", { slot_id: "slot_0", into: ["slot_5"] });
    expect(r.status).toBe(409);
    expect(r.json.error).toMatch(/open for writing/);
    expect([await ok(s, 0, TREE_SUM), await ok(s, 5, TREE_SUM)]).toEqual(before);
    expect(await stateful(s, 0, "echo more >&7; exec 7>&-; cat /workspace/held.log")).toBe("held\nmore");
    // Closed: the fork goes through.
    expect((await s.post("/fork", { slot_id: "slot_0", into: ["slot_5"] })).status).toBe(200);
    expect(await ok(s, 5, "cat held.log base; ls child-file 2>/dev/null || echo dropped")).toBe("held\nmore\nbase\ndropped");
    // The parent's own view still takes its writes (the server's and the terminal's alike).
    await stateful(s, 0, "echo t >> /workspace/held.log");
    expect(await ok(s, 0, "cat held.log")).toBe("held\nmore\nt");
  });
});

describe("POST /fork where the server cannot use overlayfs (copy mode)", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 3, extraArgs: ["--slot-uid-base", String(UID_BASE + 10)], env: { SLOTPOOL_TEMPLATE_VIEWS: "copy" } });
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("copies the parent's tree into each child: same checksum, changes stay apart", async () => {
    await ok(s, 0, "mkdir -p a/b && for i in $(seq 1 50); do echo $i > a/b/f$i; done && chmod 600 a/b/f1");
    await ok(s, 1, "echo old > old-child-file");
    const before = await ok(s, 0, TREE_SUM);
    const f = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_2"] });
    expect(f.status, f.text).toBe(200);
    expect(f.json.mode).toBe("copy");
    expect(await ok(s, 1, TREE_SUM)).toBe(before);
    expect(await ok(s, 2, TREE_SUM)).toBe(before);
    await ok(s, 1, "rm a/b/f2 && echo c > c");
    expect(await ok(s, 0, "ls a/b/f2 && ! ls c old-child-file 2>/dev/null")).toBe("a/b/f2");
    expect(await ok(s, 2, "ls a/b/f2")).toBe("a/b/f2");
  });
});
