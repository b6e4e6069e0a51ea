import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serversMayMount } from "../support/server-view.js";
import { isRoot, startServer, type TestServer } from "./helpers.js";

/**
 * Workspace templates (issue 13): a template is built once, sandboxed; a reset gives the
 * slot a copy-on-write view of it; what a slot changes stays in that slot.
 */
const UID_BASE = 22_300;

/** A small repository: a few files, a read-only one, a script, a git commit. */
const REPO = {
  name: "repo",
  files: { "README.md": "# demo\n", "src/app.py": "def add(a, b):\n    return a + b\n" },
  setup: [
    "mkdir -p data && for i in $(seq 1 50); do echo $i > data/f$i.txt; done && chmod 444 data/f1.txt && printf '#!/bin/sh\\necho run\\n' > run.sh && chmod 755 run.sh",
    "git init -q . && git add -A && git -c user.email=t@example.invalid -c user.name=t commit -qm init && echo built",
  ],
};

/** Checksum of a tree from inside it: every entry's path, type, mode and mtime, and every file's content. */
const TREE_SUM =
  "(find . -mindepth 1 -printf '%p %y %m %T@\\n' | LC_ALL=C sort; find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-64";

function storeTree(s: TestServer, name: string): string {
  const store = join(s.dataDir, ".slotpool", "templates", "store");
  const dir = readdirSync(store).find((n) => n.startsWith(`${name}-`));
  if (!dir) throw new Error(`template ${name} not in the store`);
  return join(store, dir);
}

function hostSum(dir: string): string {
  return execFileSync("bash", ["-c", TREE_SUM], { cwd: dir, encoding: "utf8" }).trim();
}

describe("workspace templates", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 3, extraArgs: ["--slot-uid-base", String(UID_BASE)] });
    const b = await s.post("/templates", REPO);
    expect(b.status).toBe(200);
    expect(b.json.error).toBe("");
    expect(b.json.success).toBe(true);
  }, 120_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("builds sandboxed, returns the build's output, and lists the template with size and build time", async () => {
    const again = await s.post("/templates", REPO);
    expect(again.json).toMatchObject({ success: true, built: false });
    const list = await s.get("/templates");
    expect(list.status).toBe(200);
    expect(list.json.mode).toBe(serversMayMount ? "overlay" : "copy");
    const [t] = list.json.templates;
    expect(t).toMatchObject({ name: "repo", in_use: 0 });
    expect(t.size_bytes).toBeGreaterThan(0);
    expect(t.files).toBeGreaterThan(50);
    expect(t.build_ms).toBeGreaterThan(0);
    // The build ran in the sandbox: its hostname, its own /tmp, not the server's.
    const probe = await s.post("/templates", { name: "probe", setup: ["hostname > host.txt; pwd > pwd.txt; id -u > uid.txt"] });
    expect(probe.json.success).toBe(true);
    await s.post("/reset", { slot_id: "slot_2", template: "probe" });
    const r = await s.bash(2, "cat host.txt pwd.txt");
    expect(r.output).toBe("sandbox\n/workspace");
  });

  it("resets a slot into the template: files, git history, modes, owned by the slot", async () => {
    const r = await s.post("/reset", { slot_id: "slot_0", template: "repo" });
    expect(r.json).toMatchObject({ success: true, output: "slot_0 reset into template repo" });
    const out = await s.bash(0, "cat README.md; git log --oneline | wc -l; git status --short | wc -l; stat -c '%a %U' data/f1.txt run.sh; ./run.sh; id -u");
    expect(out.output).toBe(`# demo\n1\n0\n444 sandbox\n755 sandbox\nrun\n${isRoot ? UID_BASE : process.getuid!()}`);
    const inUse = await s.get("/templates");
    expect(inUse.json.templates.find((t: { name: string }) => t.name === "repo").in_use).toBe(1);
  });

  it("keeps a slot's edits, deletions and chmods to itself; a reset gives the template back bit for bit", async () => {
    const tree = storeTree(s, "repo");
    const templateSum = hostSum(tree);
    await s.post("/reset", { slot_id: "slot_0", template: "repo" });
    await s.post("/reset", { slot_id: "slot_1", template: "repo" });
    const before = (await s.bash(0, TREE_SUM)).output;
    expect(before).toBe(templateSum);

    const change = await s.bash(0, "echo hacked >> README.md && rm data/f2.txt && chmod 777 data/f1.txt && chmod 700 src && rm -rf src && echo new > new.txt && git commit -qam x --author 'a <a@b>' -m y; echo done");
    expect(change.output).toContain("done");
    expect((await s.bash(0, TREE_SUM)).output).not.toBe(templateSum);

    // Slot 1 sees the template untouched; so does the template's own tree.
    expect((await s.bash(1, TREE_SUM)).output).toBe(templateSum);
    expect((await s.bash(1, "cat README.md; stat -c %a data/f1.txt; ls src")).output).toBe("# demo\n444\napp.py");
    expect(hostSum(tree)).toBe(templateSum);

    // Reset: the template again, bit for bit.
    await s.post("/reset", { slot_id: "slot_0", template: "repo" });
    expect((await s.bash(0, TREE_SUM)).output).toBe(templateSum);
  });

  it("shows the same merged view to the file tools, artifacts and the stateful terminal", async () => {
    await s.post("/reset", { slot_id: "slot_0", template: "repo" });
    const read = await s.post("/execute", { slot_id: "slot_0", tool: "read_file", args: { path: "src/app.py" } });
    expect(read.json.output).toContain("def add");
    await s.post("/execute", { slot_id: "slot_0", tool: "write_file", args: { path: "src/app.py", content: "changed\n" } });
    expect((await s.bash(0, "cat src/app.py")).output).toBe("changed");
    const list = await s.post("/artifacts/list", { slot_id: "slot_0", path: "data", recursive: false });
    expect(list.json.entries.map((e: { path: string }) => e.path)).toContain("data/f3.txt");
    const art = await s.post("/artifacts/read", { slot_id: "slot_0", path: "README.md" });
    expect(art.json.content).toBe("# demo\n");
    const term = await s.post("/execute", { slot_id: "slot_0", tool: "bash_stateful", args: { command: "cat src/app.py README.md" } });
    expect(term.json.output).toContain("changed\n# demo");
  });

  it("gives no path from a slot to the template's storage or the view's writable layer", async () => {
    await s.post("/reset", { slot_id: "slot_0", template: "repo" });
    // The slot can read the mount options (host paths of its layers) but cannot reach them.
    const opts = (await s.bash(0, "grep ' /workspace ' /proc/self/mountinfo")).output;
    const paths = [...opts.matchAll(/(?:lowerdir|upperdir|workdir)=([^,\s]+)/g)].map((m) => m[1]!);
    if (serversMayMount) expect(paths.length).toBeGreaterThanOrEqual(2);
    for (const p of [...paths, storeTree(s, "repo"), join(s.dataDir, ".slotpool")]) {
      const r = await s.bash(0, `ls ${p} || echo absent; echo x > ${p}/evil.txt || echo refused`);
      expect(r.output, p).toContain("refused");
    }
    // The file tools are confined to the workspace.
    const esc = await s.post("/execute", { slot_id: "slot_0", tool: "read_file", args: { path: "../.slotpool/templates/store" } });
    expect(esc.status).toBe(400);
    expect(esc.json.field).toBe("args.path");
    if (isRoot) {
      // Root-only store: no slot uid may even traverse it.
      expect(statSync(join(s.dataDir, ".slotpool", "templates", "store")).mode & 0o777).toBe(0o700);
      expect(statSync(join(s.dataDir, ".slotpool", "views")).mode & 0o777).toBe(0o700);
    }
  });

  it("a plain reset after a template still gives an empty workspace", async () => {
    await s.post("/reset", { slot_id: "slot_1", template: "repo" });
    await s.bash(1, "echo mine > mine.txt");
    const r = await s.post("/reset", { slot_id: "slot_1" });
    expect(r.json.output).toBe("slot_1 reset");
    expect((await s.bash(1, "ls -A | wc -l")).output).toBe("0");
  });

  it("refuses a reset into an unknown template without touching the slot", async () => {
    await s.post("/reset", { slot_id: "slot_1" });
    await s.bash(1, "echo keep > keep.txt");
    const r = await s.post("/reset", { slot_id: "slot_1", template: "nope" });
    expect(r.status).toBe(404);
    expect(r.json.error).toMatch(/unknown template 'nope'.*POST \/templates/);
    expect((await s.bash(1, "cat keep.txt")).output).toBe("keep");
    const bad = await s.post("/reset", { slot_id: "slot_1", template: "../etc" });
    expect(bad.status).toBe(400);
  });

  it("fails a build clearly and keeps nothing half-built", async () => {
    const r = await s.post("/templates", { name: "broken", setup: ["echo partial > part.txt && echo step one", "echo about to fail >&2; exit 3", "echo never"] });
    expect(r.status).toBe(200);
    expect(r.json.success).toBe(false);
    expect(r.json.error).toBe("template 'broken' build failed: setup[1] `echo about to fail >&2; exit 3` exited 3");
    expect(r.json.output).toContain("step one");
    expect(r.json.output).toContain("about to fail");
    expect(r.json.output).not.toContain("never");
    const list = await s.get("/templates");
    expect(list.json.templates.map((t: { name: string }) => t.name)).not.toContain("broken");
    expect(readdirSync(join(s.dataDir, ".slotpool", "templates", "building"))).toEqual([]);
    expect(readdirSync(join(s.dataDir, ".slotpool", "templates", "store")).some((n) => n.startsWith("broken-"))).toBe(false);
    const reset = await s.post("/reset", { slot_id: "slot_2", template: "broken" });
    expect(reset.status).toBe(404);
  });

  it("times a build out with its own limit", async () => {
    const r = await s.post("/templates", { name: "slow", setup: ["sleep 30"], timeout: 1 });
    expect(r.json.success).toBe(false);
    expect(r.json.error).toMatch(/setup\[0\] `sleep 30` timed out \(the build's limit is 1 s\)/);
    expect(readdirSync(join(s.dataDir, ".slotpool", "templates", "building"))).toEqual([]);
  });

  it("runs one build for concurrent requests of the same template", async () => {
    const req = { name: "once", setup: ["sleep 0.5; date +%s%N > stamp"] };
    const answers = await Promise.all([1, 2, 3, 4].map(() => s.post("/templates", req)));
    expect(answers.map((a) => a.json.success)).toEqual([true, true, true, true]);
    expect(answers.filter((a) => a.json.built).length).toBe(1);
    expect(new Set(answers.map((a) => a.json.template.hash)).size).toBe(1);
  });

  it("rebuilds a name whose setup changed; a slot on the old version keeps it until reset", async () => {
    await s.post("/templates", { name: "ver", setup: ["echo one > v"] });
    await s.post("/reset", { slot_id: "slot_2", template: "ver" });
    const two = await s.post("/templates", { name: "ver", setup: ["echo two > v"] });
    expect(two.json).toMatchObject({ success: true, built: true });
    expect((await s.bash(2, "cat v")).output).toBe("one");
    await s.post("/reset", { slot_id: "slot_2", template: "ver" });
    expect((await s.bash(2, "cat v")).output).toBe("two");
  });

  it("rejects bad requests with the field named", async () => {
    const r = await s.post("/templates", { name: "x", setup: "echo" });
    expect(r.status).toBe(400);
    expect(r.json.field).toBe("setup");
    const p = await s.post("/templates", { name: "x", setup: [], files: { "../evil": "x" } });
    expect(p.status).toBe(400);
    expect(p.json.error).toMatch(/invalid template file path '..\/evil'/);
  });
});

describe("template budget", () => {
  let s: TestServer;
  const blob = (name: string) => ({ name, setup: [`head -c 1500000 /dev/urandom > ${name}.bin`] });
  beforeAll(async () => {
    s = await startServer({ slots: 2, extraArgs: ["--slot-uid-base", String(UID_BASE + 10), "--template-budget-mb", "4"] });
  }, 60_000);
  afterAll(async () => {
    await s?.stop();
  });

  const names = async (): Promise<string[]> => (await s.get("/templates")).json.templates.map((t: { name: string }) => t.name).sort();

  it("evicts the least recently used unused template, never one a slot uses", async () => {
    expect((await s.post("/templates", blob("a"))).json.success).toBe(true);
    expect((await s.post("/reset", { slot_id: "slot_0", template: "a" })).json.success).toBe(true);
    expect((await s.post("/templates", blob("b"))).json.success).toBe(true);
    expect(await names()).toEqual(["a", "b"]);
    // 3 x 1.5 MB > 4 MB: b (unused) goes, a (used by slot_0, and older) stays.
    expect((await s.post("/templates", blob("c"))).json.success).toBe(true);
    expect(await names()).toEqual(["a", "c"]);
    expect((await s.bash(0, "ls")).output).toBe("a.bin");
    // slot_0 lets a go (a was used until now: c is the least recently used); next build
    // evicts c, then (another) a.
    await s.post("/reset", { slot_id: "slot_0" });
    expect((await s.post("/templates", blob("d"))).json.success).toBe(true);
    expect(await names()).toEqual(["a", "d"]);
    expect((await s.post("/templates", blob("e"))).json.success).toBe(true);
    expect(await names()).toEqual(["d", "e"]);
    const store = join(s.dataDir, ".slotpool", "templates", "store");
    expect(readdirSync(store).map((n) => n.split("-")[0]).sort()).toEqual(["d", "e"]);
  });

  it("refuses a template larger than the whole budget", async () => {
    const r = await s.post("/templates", { name: "huge", setup: ["head -c 6000000 /dev/urandom > big.bin"] });
    expect(r.json.success).toBe(false);
    expect(r.json.error).toMatch(/more than the whole template budget \(4\.0 MB\): raise --template-budget-mb/);
    expect(await names()).not.toContain("huge");
  });
});

describe("templates across a server restart", () => {
  it("unmounts every view when the server stops", async () => {
    const s = await startServer({ slots: 2, extraArgs: ["--slot-uid-base", String(UID_BASE + 20)] });
    try {
      await s.post("/templates", { name: "t", setup: ["echo hi > hi.txt"] });
      await s.post("/reset", { slot_id: "slot_0", template: "t" });
      await s.post("/reset", { slot_id: "slot_1", template: "t" });
    } finally {
      const dir = s.dataDir;
      await s.proc.stop(10_000);
      const mounts = execFileSync("cat", ["/proc/self/mountinfo"], { encoding: "utf8" });
      expect(mounts).not.toContain(dir);
      await s.stop();
      expect(existsSync(dir)).toBe(false);
    }
  });
});

describe("templates in copy mode (a server that may not mount: not root, or no CAP_SYS_ADMIN)", () => {
  it("copies the template into the workspace: same files, owned by the slot, reset restores it", async () => {
    const s = await startServer({ slots: 2, extraArgs: ["--slot-uid-base", String(UID_BASE + 30)], env: { SLOTPOOL_TEMPLATE_VIEWS: "copy" } });
    try {
      expect((await s.get("/templates")).json.mode).toBe("copy");
      expect((await s.post("/templates", REPO)).json.success).toBe(true);
      const sum = hostSum(storeTree(s, "repo"));
      await s.post("/reset", { slot_id: "slot_0", template: "repo" });
      expect((await s.bash(0, TREE_SUM)).output).toBe(sum);
      expect((await s.bash(0, "stat -c %U README.md; git status --short | wc -l")).output).toBe("sandbox\n0");
      await s.bash(0, "rm -rf src data && echo x > README.md");
      expect(hostSum(storeTree(s, "repo"))).toBe(sum);
      await s.post("/reset", { slot_id: "slot_0", template: "repo" });
      expect((await s.bash(0, TREE_SUM)).output).toBe(sum);
      await s.post("/reset", { slot_id: "slot_0" });
      expect((await s.bash(0, "ls -A | wc -l")).output).toBe("0");
    } finally {
      await s.stop();
    }
  }, 60_000);
});
