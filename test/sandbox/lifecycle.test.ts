import { execFileSync } from "node:child_process";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, startServer, type TestServer, untilSlot } from "./helpers.js";
import { serverView } from "../support/server-view.js";

/** Stateful terminal (issue 2 point 8), reset (point 9) and graceful shutdown (point 12). */
const UID_BASE = 21500;

/** Live (non-zombie) host processes of a uid. */
function hostProcessesOf(uid: number): string {
  try {
    return execFileSync("ps", ["-u", String(uid), "-o", "pid=,stat=,args="], { encoding: "utf8" })
      .split("\n")
      .filter((l) => l.trim() && !/^\s*\d+\s+Z/.test(l))
      .join("\n");
  } catch {
    return "";
  }
}

describe("bash_stateful and tmux", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 2, extraArgs: ["--slot-uid-base", String(UID_BASE)] });
  });
  afterAll(async () => {
    await s?.stop();
  });

  const stateful = async (slot: number, command: string, extra: Record<string, unknown> = {}) => {
    const r = await s.post("/execute", { slot_id: `slot_${slot}`, tool: "bash_stateful", args: { command, ...extra } });
    expect(r.status).toBe(200);
    return r.json;
  };

  it("keeps cd, variables and background processes across calls; each call has its own output and exit code", async () => {
    const a = await stateful(0, "cd /tmp; export FOO=bar; X=1; sleep 120 & echo started");
    expect(a).toMatchObject({ success: true, output: "started", metadata: { sandboxed: true } });
    await stateful(0, "Y=2");
    const b = await stateful(0, "pwd; echo $FOO $X $Y; jobs | wc -l; echo oops >&2; false");
    expect(b.output).toBe("/tmp\nbar 1 2\n1\n\n[stderr]\noops");
    expect(b.error).toBe("Exit code: 1");
    expect(b.metadata.exit_code).toBe(1);
    const c = await stateful(0, "echo only-this");
    expect(c.output).toBe("only-this");
    // Background processes of a stateful call survive; a plain bash call does not see them
    // (it runs in the slot's other namespace) but leaves them alone.
    await s.bash(0, "true");
    const d = await stateful(0, "jobs -r | wc -l");
    expect(d.output).toBe("1");
  });

  it("honours its timeout: partial output, metadata.timeout, and the session stays usable", async () => {
    const r = await stateful(0, "echo partial; sleep 30", { timeout: 1 });
    expect(r.success).toBe(false);
    expect(r.metadata.timeout).toBe(true);
    expect(r.output).toBe("partial");
    const after = await stateful(0, "pwd; echo $FOO");
    expect(after.output).toBe("/tmp\nbar");
  });

  it("is isolated like bash (own namespaces, no other slot's files, network setting)", async () => {
    await s.bash(1, "echo secret1 > s.txt");
    const r = await stateful(0, "hostname; cat ../slot_1/s.txt /proc/*/root/workspace/s.txt 2>/dev/null; ls /workspace/..");
    expect(r.output).not.toContain("secret1");
    expect(r.output.split("\n")[0]).toBe("sandbox");
  });

  it("tmux actions drive the same session: send_keys, capture, stop, start", async () => {
    const keys = await s.post("/execute", { slot_id: "slot_0", tool: "tmux", args: { action: "send_keys", keys: "echo typed-$((6*7))" } });
    expect(keys.json.success).toBe(true);
    // The typed command's output shows in the pane when the shell has run it: capture until it does.
    let cap = await s.post("/execute", { slot_id: "slot_0", tool: "tmux", args: { action: "capture", lines: 30 } });
    for (let i = 0; i < 600 && !String(cap.json.output).includes("typed-42"); i++) {
      await new Promise((r) => setTimeout(r, 50));
      cap = await s.post("/execute", { slot_id: "slot_0", tool: "tmux", args: { action: "capture", lines: 30 } });
    }
    expect(cap.json.output).toContain("typed-42");
    const stop = await s.post("/execute", { slot_id: "slot_0", tool: "tmux", args: { action: "stop" } });
    expect(stop.json.success).toBe(true);
    const fresh = await stateful(0, "pwd; echo \"[$FOO]\"");
    expect(fresh.output).toBe("/workspace\n[]");
    const start = await s.post("/execute", { slot_id: "slot_0", tool: "tmux", args: { action: "start" } });
    expect(start.json.output).toMatch(/tmux session (started|already running)/);
  });

  it("an exit in the stateful shell ends that call and the next call gets a new shell", async () => {
    const r = await stateful(1, "exit 4");
    expect(r.metadata.exit_code).toBe(4);
    const next = await stateful(1, "echo new-shell");
    expect(next.output).toBe("new-shell");
  });
});

describe("reset", () => {
  it("kills every process of the slot, deletes all workspace contents, and the slot is usable at once", async () => {
    const s = await startServer({ slots: 2, extraArgs: ["--slot-uid-base", String(UID_BASE + 10)] });
    try {
      await s.post("/execute", { slot_id: "slot_0", tool: "bash_stateful", args: { command: "sleep 300 & echo bg" } });
      await s.bash(0, "mkdir -p d/e && touch .hidden d/e/f ro && chmod 444 ro && chmod 555 d/e && chmod 500 d && mkdir .dotdir && echo x > .dotdir/y");
      expect(readdirSync(serverView(s.proc.pid, join(s.dataDir, "slot_0"))).length).toBeGreaterThan(0);
      // A long call is running when the reset arrives: it ends, killed.
      const running = s.bash(0, "sleep 60; echo never", { timeout: 120 });
      await untilSlot(s, 0, (e) => e.queued >= 1, "the long call running");
      const t = Date.now();
      const reset = await s.post("/reset", { slot_id: "slot_0" });
      expect(reset.status).toBe(200);
      expect(reset.json).toMatchObject({ success: true, error: "" });
      // bound: the reset kills the call instead of waiting for its 60 s: 5 s leaves a loaded box ample time and still fails a reset that waited.
      expect(Date.now() - t).toBeLessThan(5000);
      const killed = await running;
      expect(killed.output).not.toContain("never");
      expect(readdirSync(serverView(s.proc.pid, join(s.dataDir, "slot_0")))).toEqual([]);
      if (isRoot) expect(hostProcessesOf(UID_BASE + 10)).not.toMatch(/sleep 300|sleep 60/);
      const next = await s.bash(0, "ls -A | wc -l; echo ok > f; cat f");
      expect(next.output).toBe("0\nok");
      const st = await s.post("/execute", { slot_id: "slot_0", tool: "bash_stateful", args: { command: "jobs | wc -l; pwd" } });
      expect(st.json.output).toBe("0\n/workspace");
      // The other slot was not touched.
      expect((await s.bash(1, "echo fine")).output).toBe("fine");
    } finally {
      await s.stop();
    }
  });
});

describe("graceful shutdown", () => {
  it("on SIGTERM stops accepting, kills slot processes and exits promptly", async () => {
    const s = await startServer({ slots: 2, extraArgs: ["--slot-uid-base", String(UID_BASE + 20)] });
    await s.post("/execute", { slot_id: "slot_1", tool: "bash_stateful", args: { command: "sleep 300 & echo bg" } });
    const running = s.bash(0, "sleep 300", { timeout: 600 }).catch((e: unknown) => e);
    await untilSlot(s, 0, (e) => e.queued >= 1, "the long call running");
    const t = Date.now();
    s.proc.child.kill("SIGTERM");
    const exit = await s.proc.exited;
    // bound: "promptly": the server kills its 300 s calls instead of waiting for them; 10 s is far from both on a loaded box.
    expect(Date.now() - t).toBeLessThan(10_000);
    expect(exit.code).toBe(0);
    await running;
    expect(s.logs.some((l) => l.includes('"shutting down"'))).toBe(true);
    if (isRoot) {
      // wait: the server waited for its slots' processes before exiting; this lets the kernel finish reaping (a stray one would stay).
      await new Promise((r) => setTimeout(r, 200));
      expect(hostProcessesOf(UID_BASE + 20)).toBe("");
      expect(hostProcessesOf(UID_BASE + 21)).toBe("");
    }
    await fetch(s.url + "/health").then(
      () => expect.unreachable("server still answering"),
      () => undefined,
    );
    expect(existsSync(s.dataDir)).toBe(true);
    await s.stop();
  });
});
