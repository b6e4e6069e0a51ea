import { readFileSync, readlinkSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { descendants } from "../../src/sandbox/run/process-barrier.js";
import { isRoot, SLOT_UID_BASE, startServer, type TestServer } from "./helpers.js";
import { BROWSER_TEST, browserProcesses, chromium, running, serverPid, serveSite, statusField, tool } from "./browser-helpers.js";

/**
 * A slot's browser is one of the slot's processes (issue 40): it runs in the slot's sandbox
 * (its uid, seccomp filter, cgroups, no capability), on the network of the slot's terminal,
 * apart from every other slot's browser, and it is gone when the slot is reset, forked, or lost.
 */

const PORT = 19_000 + Math.floor(Math.random() * 1000);
const SITE = `http://127.0.0.1:${PORT}`;

/** Resolves once `cond` holds; `what` says what did not happen in time. */
async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`${what} did not happen within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe.skipIf(!chromium)("a slot's browser is a process of the slot (skipped without Chromium)", BROWSER_TEST, () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 3, extraArgs: ["--no-network"] });
    await Promise.all([serveSite(s, 0, PORT, "alpha"), serveSite(s, 1, PORT, "beta")]);
  });
  afterAll(async () => {
    await s?.stop();
  });

  it("runs as the slot's uid, under the slot's seccomp filter, without privileges or capabilities, in the slot's cgroup, on its terminal's network", async () => {
    expect((await tool(s, 0, "browser_navigate", { url: `${SITE}/` })).success).toBe(true);
    const pids = browserProcesses(s, 0);
    expect(pids.length).toBeGreaterThan(1);
    const uid = isRoot ? SLOT_UID_BASE : process.getuid!();
    for (const pid of pids) {
      expect(statusField(pid, "Uid")?.split(/\s+/)[0], `uid of ${pid}`).toBe(String(uid));
      expect(statusField(pid, "Seccomp"), `seccomp of ${pid}`).toBe("2");
      expect(statusField(pid, "NoNewPrivs")).toBe("1");
      expect(statusField(pid, "CapEff")).toBe("0000000000000000");
      if (isRoot) expect(readFileSync(`/proc/${pid}/cgroup`, "utf8"), `cgroup of ${pid}`).toMatch(/\/slotpool-\d+\/slot_0$/m);
    }
    // The terminal's http.server (which the browser just reached on 127.0.0.1) is on the same network namespace; the server is not.
    // (Slots 0 and 1 each serve on their own 127.0.0.1:PORT: the browser shares exactly one of the two servers' namespaces, slot 0's.)
    const net = (pid: number) => readlinkSync(`/proc/${pid}/ns/net`);
    const sites = descendants(serverPid(s)).filter((p) => readFileSync(`/proc/${p}/cmdline`, "utf8").includes(`http.server\0${PORT}`));
    expect(sites).toHaveLength(2);
    const terminalPython = sites.find((p) => net(p) === net(pids[0]!));
    expect(terminalPython).toBeDefined();
    expect(sites.filter((p) => net(p) === net(pids[0]!))).toHaveLength(1);
    if (isRoot) expect(statusField(terminalPython!, "Uid")?.split(/\s+/)[0]).toBe(String(SLOT_UID_BASE));
    expect(net(pids[0]!)).not.toBe(net(serverPid(s)));
    // Its own PID namespace: not the terminal's, not the server's.
    expect(readlinkSync(`/proc/${pids[0]}/ns/pid`)).not.toBe(readlinkSync(`/proc/${terminalPython}/ns/pid`));
  });

  it("keeps its profile in the slot's /tmp: nothing of Chromium's lands in the workspace", async () => {
    expect((await tool(s, 0, "browser_navigate", { url: `${SITE}/store.html?set` })).success).toBe(true);
    const ls = await tool(s, 0, "bash", { command: "ls -A /workspace; echo ---; ls -A /tmp/.slotpool-browser" });
    const [workspace, tmp] = ls.output.split("---");
    // The terminal's shell keeps its .bash_history there (HOME is /workspace); Chromium's HOME is /tmp/.slotpool-browser.
    expect(workspace!.trim().split(/\s+/).filter((f) => f !== ".bash_history")).toEqual(["site"]);
    expect(tmp).toMatch(/profile/);
    expect(tmp).toMatch(/config/);
  });

  it("two slots' browsers are apart: cookies, local storage and pages of one never show in the other", async () => {
    const a = await tool(s, 0, "browser_navigate", { url: `${SITE}/store.html?set` });
    const b = await tool(s, 1, "browser_navigate", { url: `${SITE}/store.html` });
    expect(a.success && b.success).toBe(true);
    // Same URL (each slot's own 127.0.0.1:PORT), different browsers: slot 1 never set anything.
    expect((await tool(s, 1, "browser_snapshot")).output).toMatch(/cookie none[\s\S]*storage none/);
    expect((await tool(s, 0, "browser_snapshot")).output).toMatch(/cookie who=alpha[\s\S]*storage alpha/);
    await tool(s, 1, "browser_navigate", { url: `${SITE}/store.html?set` });
    expect((await tool(s, 1, "browser_snapshot")).output).toMatch(/cookie who=beta[\s\S]*storage beta/);
    expect((await tool(s, 0, "browser_navigate", { url: `${SITE}/store.html` })).success).toBe(true);
    expect((await tool(s, 0, "browser_snapshot")).output).toMatch(/cookie who=alpha[\s\S]*storage alpha/);
    // A slot that never opened a page has none.
    expect((await tool(s, 2, "browser_snapshot")).metadata["browser_error"]).toBe("no_page");
    expect(browserProcesses(s, 2)).toEqual([]);
  });

  it("a reset kills every process of the slot's browser before it answers; the next trajectory's browser starts empty", async () => {
    expect((await tool(s, 1, "browser_navigate", { url: `${SITE}/store.html?set` })).success).toBe(true);
    const pids = browserProcesses(s, 1);
    expect(pids.length).toBeGreaterThan(1);
    const reset = await s.post("/reset", { slot_id: "slot_1" });
    expect(reset.status).toBe(200);
    expect(pids.filter(running)).toEqual([]);
    expect((await tool(s, 1, "browser_snapshot")).metadata["browser_error"]).toBe("no_page");
    // The next trajectory serves its own site and finds no cookie or storage of the last one.
    await serveSite(s, 1, PORT, "gamma");
    expect((await tool(s, 1, "browser_navigate", { url: `${SITE}/store.html` })).success).toBe(true);
    expect((await tool(s, 1, "browser_snapshot")).output).toMatch(/cookie none[\s\S]*storage none/);
  });

  it("a reset during a browser call cuts it off as the infrastructure's doing (command_killed), and kills the browser", async () => {
    expect((await tool(s, 2, "browser_navigate", { url: "data:text/html,<title>x</title>" })).success).toBe(true);
    const pids = browserProcesses(s, 2);
    // A navigation that never loads (a listener that never answers), reset while it waits.
    const hang = await tool(s, 2, "bash_stateful", {
      command: `python3 -c 'import socket,time; s=socket.socket(); s.bind(("127.0.0.1", ${PORT + 3})); s.listen(8); time.sleep(600)' >/dev/null 2>&1 &
for i in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/${PORT + 3}) 2>/dev/null && exit 0; sleep 0.1; done; exit 1`,
    });
    expect(hang.success).toBe(true);
    const waiting = tool(s, 2, "browser_navigate", { url: `http://127.0.0.1:${PORT + 3}/` }, { timeout: 120 });
    // The call is under way once the browser's connection to the listener is established (its network namespace's TCP table).
    const port = (PORT + 3).toString(16).toUpperCase().padStart(4, "0");
    const connected = () =>
      readFileSync(`/proc/${pids[0]}/net/tcp`, "utf8")
        .split("\n")
        .map((l) => l.trim().split(/\s+/))
        .some((f) => f[3] === "01" && (f[1]?.endsWith(`:${port}`) || f[2]?.endsWith(`:${port}`)));
    await until(connected, "the browser's connection to the slot's listener");
    const reset = await s.post("/reset", { slot_id: "slot_2" });
    expect(reset.status).toBe(200);
    const cut = await waiting;
    expect(cut.success).toBe(false);
    expect(cut.metadata["infra"]).toBe("command_killed");
    expect(pids.filter(running)).toEqual([]);
  });

  it("no browser survives a fork: the parent's is closed and the children start without one", async () => {
    expect((await tool(s, 0, "browser_navigate", { url: `${SITE}/` })).success).toBe(true);
    const pids = browserProcesses(s, 0);
    expect(pids.length).toBeGreaterThan(1);
    const f = await s.post("/fork", { slot_id: "slot_0", into: ["slot_2"] });
    expect(f.status, f.text).toBe(200);
    expect(pids.filter(running)).toEqual([]);
    for (const slot of [0, 2]) expect((await tool(s, slot, "browser_snapshot")).metadata["browser_error"]).toBe("no_page");
    // The parent's terminal (and its site) survived the fork: a new browser reaches it.
    expect((await tool(s, 0, "browser_navigate", { url: `${SITE}/page2.html` })).metadata["title"]).toBe("Second");
  });
});

describe.skipIf(!chromium)("the browser driver (skipped without Chromium)", BROWSER_TEST, () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 2, extraArgs: ["--no-network"] });
  });
  afterAll(async () => {
    await s?.stop();
  });

  it("runs Playwright apart from the server: when it ends, only the browsers go (an infra failure for their next call), the server serves on, and the next navigate starts a new one", async () => {
    for (const slot of [0, 1]) expect((await tool(s, slot, "browser_navigate", { url: `data:text/html,<title>t${slot}</title>` })).success).toBe(true);
    const browsers = [...browserProcesses(s, 0), ...browserProcesses(s, 1)];
    const driver = descendants(serverPid(s)).find((p) => readFileSync(`/proc/${p}/cmdline`, "utf8").includes("driver-main"));
    expect(driver).toBeDefined();
    // Not in the server's process: a fault of Playwright's (or a browser feeding it what it cannot handle) ends this one.
    expect(driver).not.toBe(serverPid(s));
    process.kill(driver!, "SIGKILL");
    // Their bubblewrap dies with its parent, the driver (time bound: the kernel's delivery on a loaded box).
    await until(() => browsers.filter(running).length === 0, "the browsers ending with their driver");
    const lost = await tool(s, 0, "browser_snapshot");
    expect(lost.success).toBe(false);
    expect(lost.metadata["infra"]).toBe("sandbox_error");
    expect(lost.error).toMatch(/browser driver process ended/);
    expect((await s.bash(1, "echo still here")).output).toBe("still here");
    const again = await tool(s, 1, "browser_navigate", { url: "data:text/html,<title>again</title>" });
    expect(again.success, again.error).toBe(true);
    expect(again.metadata["title"]).toBe("again");
  });
});

describe.skipIf(!chromium)("a lost slot takes its browser with it (skipped without Chromium)", BROWSER_TEST, () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 1, extraArgs: ["--no-network"] });
  });
  afterAll(async () => {
    await s?.stop();
  });

  it("the sandbox server killed with SIGKILL (its container lost) leaves no browser process behind", async () => {
    expect((await tool(s, 0, "browser_navigate", { url: "data:text/html,<title>lost</title>" })).success).toBe(true);
    const pids = browserProcesses(s, 0);
    expect(pids.length).toBeGreaterThan(1);
    process.kill(serverPid(s), "SIGKILL");
    // bubblewrap's --die-with-parent: the kernel signals the browser's sandbox when the server dies (time bound: that delivery on a loaded box).
    await until(() => pids.filter(running).length === 0, "the browser's processes ending");
  });
});
