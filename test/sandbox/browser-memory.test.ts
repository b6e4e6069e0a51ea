import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, startServer, type TestServer } from "./helpers.js";
import { browserProcesses, chromium, serverPid, statusField, tool } from "./browser-helpers.js";

/**
 * A runaway page is bounded by its slot's memory (issue 40): as root by the slot's memory
 * cgroup (the browser is one of the slot's processes), not root by the per-process bounds a
 * browser gets there (RLIMIT_DATA and V8's heap limit: RLIMIT_AS cannot hold Chromium). Either
 * way the page dies, the model reads that it crashed, and the slot, its neighbours and the
 * server carry on.
 */

const MEMORY_MB = 700;

/**
 * A page that allocates (and touches) 160 MB every 20 ms until something stops it: the kernel's
 * OOM killer (a memory cgroup), or its allocations being refused (RLIMIT_DATA), which it shows
 * in its title.
 */
const HOG = `data:text/html,<title>hog</title><script>const keep = []; const t = setInterval(() => { try { for (let i = 0; i < 20; i++) keep.push(new Uint8Array(8 << 20).fill(1)); } catch (e) { document.title = "allocation refused"; clearInterval(t); } }, 20);</script>`;

/** Resident memory of a process, bytes (0 once it is gone). */
function rss(pid: number): number {
  return Number(statusField(pid, "VmRSS")?.split(/\s+/)[0] ?? 0) * 1024;
}

/** The slot's memory cgroup (v2: the slot's dir; v1: the memory hierarchy's), from a process of the slot. */
function memoryCgroup(pid: number): string | undefined {
  for (const line of readFileSync(`/proc/${pid}/cgroup`, "utf8").split("\n")) {
    const [, controllers, path] = line.split(":");
    if (controllers === "") return join("/sys/fs/cgroup", path!);
    if (controllers?.split(",").includes("memory")) return join("/sys/fs/cgroup/memory", path!);
  }
  return undefined;
}

/** OOM kills the kernel made in that cgroup (v2 memory.events, v1 memory.oom_control). */
function oomKills(dir: string): number {
  for (const file of ["memory.events", "memory.oom_control"]) {
    const f = join(dir, file);
    if (!existsSync(f)) continue;
    const m = /^oom_kill (\d+)$/m.exec(readFileSync(f, "utf8"));
    if (m) return Number(m[1]);
  }
  return 0;
}

describe.skipIf(!chromium)("a runaway page (skipped without Chromium)", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 2, extraArgs: ["--no-network", "--memory-mb", String(MEMORY_MB)] });
  });
  afterAll(async () => {
    await s?.stop();
  });

  // Time bound: the page asks for 8 GB a second; a loaded box allocates slower, a minute is ample (the test's 120 s leaves the rest).
  it("is stopped by the slot's memory bound: as root its renderer is OOM-killed in the slot's cgroup (the model reads that the page crashed), not root its allocations are refused at RLIMIT_DATA; the slot and its neighbour carry on", async () => {
    expect((await tool(s, 1, "browser_navigate", { url: "data:text/html,<title>neighbour</title><h1>calm</h1>" })).success).toBe(true);
    // The slot's browser starts on a calm page, so its cgroup's OOM count is read before the
    // hog runs (the hog can be killed before a navigation to it has even answered).
    const started = await tool(s, 0, "browser_navigate", { url: "data:text/html,<title>start</title>" });
    expect(started.success, started.error).toBe(true);
    const pids = browserProcesses(s, 0);
    const cgroup = isRoot ? memoryCgroup(pids[0]!) : undefined;
    const killsBefore = cgroup ? oomKills(cgroup) : 0;
    if (!isRoot) expect(readFileSync(`/proc/${pids[0]}/limits`, "utf8")).toMatch(new RegExp(`Max data size\\s+${MEMORY_MB * 1024 * 1024}\\s`));
    const opened = await tool(s, 0, "browser_navigate", { url: HOG });
    // Either the navigation answered (the page runs on) or the page was already stopped.
    if (!opened.success) expect(opened.metadata["browser_error"], opened.error).toBe("crashed");
    let last = opened;
    let peak = 0;
    const end = Date.now() + 60_000;
    while (last.success && last.metadata["title"] !== "allocation refused" && Date.now() < end) {
      for (const p of browserProcesses(s, 0)) peak = Math.max(peak, rss(p));
      last = await tool(s, 0, "browser_snapshot", {}, { timeout: 20 });
      if (!last.success || last.metadata["title"] === "allocation refused") break;
      await new Promise((r) => setTimeout(r, 200));
    }
    // No process of the browser ever held more than the slot's memory (plus its code and shared files).
    expect(peak).toBeLessThan((MEMORY_MB + 300) * 1024 * 1024);
    if (cgroup) {
      expect(last.success, "the page was never stopped").toBe(false);
      expect(last.metadata["browser_error"]).toBe("crashed");
      expect(last.error).toMatch(/crashed/);
      expect(last.metadata["infra"]).toBeUndefined();
      expect(oomKills(cgroup)).toBeGreaterThan(killsBefore);
    } else {
      expect(last.metadata["title"], "the page's allocations were never refused").toBe("allocation refused");
    }
    // The neighbour's browser and the server are untouched; the slot browses again.
    expect((await tool(s, 1, "browser_snapshot")).output).toMatch(/heading "calm"/);
    expect(statusField(serverPid(s), "State")).not.toMatch(/Z/);
    const again = await tool(s, 0, "browser_navigate", { url: "data:text/html,<title>after</title>" });
    expect(again.success, again.error).toBe(true);
    expect(again.metadata["title"]).toBe("after");
  }, 120_000);
});
