import { execFileSync, spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, startServer, type TestServer, untilSlot } from "./helpers.js";
import { serverView } from "../support/server-view.js";
import { descendants } from "../support/processes.js";

/**
 * Isolation of `bash` (issue 2 point 2), with escape attempts: another slot's files through
 * `..`, a symlink and /proc; another slot's processes; server files; leftovers of a call.
 */
const UID_BASE = 21200;

describe("sandbox isolation", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 3, extraArgs: ["--slot-uid-base", String(UID_BASE)] });
    // A secret in slot_1's workspace, written through the sandbox itself.
    const w = await s.bash(1, "echo slot1-secret > secret.txt && echo ok");
    expect(w.output).toBe("ok");
  });
  afterAll(async () => {
    await s?.stop();
  });

  it("shows the slot's workspace, writable, at /workspace, as HOME and cwd", async () => {
    const r = await s.bash(0, "pwd; echo $HOME; echo data > f.txt && cat /workspace/f.txt");
    expect(r.output).toBe("/workspace\n/workspace\ndata");
    expect(readFileSync(serverView(s.proc.pid, join(s.dataDir, "slot_0", "f.txt")), "utf8")).toBe("data\n");
  });

  it("has its own pid, ipc, uts and user namespaces", async () => {
    const r = await s.bash(0, "hostname; id -u; readlink /proc/self/ns/pid /proc/self/ns/ipc /proc/self/ns/uts /proc/self/ns/user");
    const [hostname, uid, ...ns] = r.output.split("\n");
    expect(hostname).toBe("sandbox");
    if (isRoot) expect(Number(uid)).toBe(UID_BASE);
    const host = ["pid", "ipc", "uts", "user"].map((n) => execFileSync("readlink", [`/proc/self/ns/${n}`], { encoding: "utf8" }).trim());
    expect(ns).toHaveLength(4);
    ns.forEach((n, i) => expect(n).not.toBe(host[i]));
    // Different slots: different namespaces.
    const other = await s.bash(1, "readlink /proc/self/ns/pid");
    expect(other.output).not.toBe(ns[0]);
  });

  it("keeps system directories read-only", async () => {
    for (const path of ["/usr/bin/evil", "/etc/evil", "/bin/evil", "/evil"]) {
      const r = await s.bash(0, `touch ${path}`);
      expect(r.success, path).toBe(false);
    }
  });

  it("cannot read another slot's files through .., absolute host paths, symlinks or /proc", async () => {
    const hostPath = join(s.dataDir, "slot_1", "secret.txt");
    const attempts = [
      "cat ../slot_1/secret.txt",
      "cat /workspace/../slot_1/secret.txt",
      `cat ${hostPath}`,
      `ln -sf ${hostPath} link && cat link`,
      "ln -sf ../slot_1/secret.txt link2 && cat link2",
      "cat /proc/*/root/workspace/secret.txt",
      "cat /proc/1/root/../slot_1/secret.txt",
      "find / -name secret.txt -not -path '/proc/*' 2>/dev/null | xargs -r cat",
    ];
    for (const cmd of attempts) {
      const r = await s.bash(0, cmd);
      expect(r.output, cmd).not.toContain("slot1-secret");
    }
  });

  it("does not see the server's files or the data dir", async () => {
    const r = await s.bash(0, `ls ${s.dataDir} 2>&1; ls /root 2>&1; ls ${process.cwd()} 2>&1; cat /proc/1/cmdline | tr '\\0' ' '`);
    expect(r.output).not.toContain("slot_1");
    expect(r.output).not.toContain("package.json");
    expect(r.output.match(/No such file or directory/g)).toHaveLength(3);
    expect(r.output).not.toMatch(/\/tmp\/slotpool-sbx-\w+\s*$/);
    const root = (await s.bash(0, "ls /")).output.split("\n");
    expect(root).not.toContain("root");
    expect(root).not.toContain("home");
    expect(root).toContain("workspace");
  });

  it("cannot see or kill another slot's processes", async () => {
    // slot_1 runs a long command; slot_0 tries to find and kill it.
    const victim = s.bash(1, "sleep 3; echo survived");
    await untilSlot(s, 1, (e) => e.queued >= 1, "the victim running");
    const look = await s.bash(0, "ps -eo args | grep -c '^sleep 3' || true");
    expect(look.output).toBe("0");
    await s.bash(0, "pkill -9 sleep; killall -9 sleep 2>/dev/null; true");
    // kill(-1) reaches every process this one may signal: only its own slot's.
    await s.bash(0, "kill -9 -1");
    expect((await victim).output).toBe("survived");
  });

  it("leaves no process of a call behind, even background and setsid ones", async () => {
    const r = await s.bash(2, "(sleep 300 &); setsid sleep 301 & nohup sleep 302 >/dev/null 2>&1 & echo started");
    expect(r.output).toBe("started");
    const after = await s.bash(2, "ps -eo args | grep -E '^sleep 30[012]' || echo none");
    expect(after.output).toBe("none");
    if (isRoot) {
      let left = "";
      try {
        left = execFileSync("pgrep", ["-u", String(UID_BASE + 2), "-f", "sleep 30"], { encoding: "utf8" });
      } catch {
        left = "";
      }
      expect(left.trim()).toBe("");
    }
  });

  it("a call cannot kill its slot's spawner (the namespace's init, issue 38): the call runs on, and so does the slot", async () => {
    const r = await s.bash(2, "kill -9 $PPID; kill -9 1; sleep 0.2; echo still-here $PPID");
    expect(r.output).toBe("still-here 1");
    const next = await s.bash(2, "echo back");
    expect(next.output).toBe("back");
  });

  it("a spawner killed from outside (a crash) fails the call it ran with an error; the next call works", async () => {
    // This server's spawners: processes named spawner below its process (never another server's).
    const ours = () => descendants(s.proc.pid).filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/comm`, "utf8").trim() === "spawner";
      } catch {
        return false;
      }
    });
    const running = s.bash(2, "sleep 20; echo not-reached");
    let killed = 0;
    for (let i = 0; i < 400 && killed === 0; i++) {
      await new Promise((r) => setTimeout(r, 25));
      if (!spawnSync("pgrep", ["-f", "sleep 20"]).stdout.length) continue; // the call is running
      for (const pid of ours()) {
        process.kill(pid, "SIGKILL");
        killed++;
      }
    }
    expect(killed).toBeGreaterThan(0);
    const r = await running;
    expect(r.output).not.toContain("not-reached");
    const next = await s.bash(2, "echo back");
    expect(next.output).toBe("back");
  });
});

describe("fail closed: a server that cannot sandbox refuses to start", () => {
  /** Runs `slotpool sandbox-server ARGS` to its exit (it must not start listening). */
  function refusal(args: string[], env: NodeJS.ProcessEnv = {}): { status: number | null; stderr: string } {
    const dataDir = mkdtempSync(join(tmpdir(), "slotpool-refuse-"));
    chmodSync(dataDir, 0o755);
    try {
      const { command: file, args: pre } = slotpoolCommand();
      const r = spawnSync(file, [...pre, "sandbox-server", "--port", "0", "--slots", "1", "--data-dir", dataDir, "--slot-uid-base", String(UID_BASE + 60), ...args], {
        encoding: "utf8",
        timeout: 30_000,
        env: { ...process.env, ...env },
      });
      return { status: r.status, stderr: r.stderr };
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }

  it("where bubblewrap cannot create its namespaces: one error naming what is missing and the fix", () => {
    // A bwrap that fails as Docker's masked /proc makes the real one fail.
    const bin = mkdtempSync(join(tmpdir(), "slotpool-fakebwrap-"));
    chmodSync(bin, 0o755);
    writeFileSync(join(bin, "bwrap"), "#!/bin/sh\necho \"bwrap: Can't mount proc on /newroot/proc: Operation not permitted\" >&2\nexit 1\n", { mode: 0o755 });
    try {
      const r = refusal([], { PATH: `${bin}:${process.env["PATH"] ?? ""}` });
      expect(r.status).toBe(1);
      const lines = r.stderr.split("\n").filter((l) => l.startsWith("slotpool sandbox-server:"));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(/cannot sandbox commands here: bubblewrap cannot create namespaces here: bwrap: Can't mount proc/);
      expect(lines[0]).toMatch(/Fix: /);
      expect(lines[0]).toMatch(/--allow-unsandboxed/);
      expect(r.stderr).not.toMatch(/"msg":"listening"/);
    } finally {
      rmSync(bin, { recursive: true, force: true });
    }
  });

  it("--no-sandbox alone is refused: unsandboxed takes --allow-unsandboxed", () => {
    const r = refusal(["--no-sandbox"]);
    expect(r.status).toBe(1);
    expect(r.stderr).toMatch(/--no-sandbox runs every command unsandboxed: pass --allow-unsandboxed/);
  });
});

describe("--allow-unsandboxed (development only)", () => {
  it("runs unsandboxed and says so in every result and /health; require_sandbox gets a clear error", async () => {
    const s = await startServer({ slots: 1, extraArgs: ["--no-sandbox", "--allow-unsandboxed", "--slot-uid-base", String(UID_BASE + 50)] });
    try {
      const health = await s.get("/health");
      expect(health.json.bwrap_available).toBe(false);
      expect(health.json.isolation).toMatchObject({ sandboxed: false, unsandboxed_reason: "sandboxing disabled by --no-sandbox", network: "host_unsandboxed", disk: "none" });
      expect(health.json.isolation.summary).toMatch(/^UNSANDBOXED \(sandboxing disabled by --no-sandbox\)/);
      const r = await s.bash(0, "echo plain");
      expect(r).toMatchObject({ success: true, output: "plain", metadata: { sandboxed: false, network_isolated: false } });
      expect(r.metadata["unsandboxed"]).toMatch(/^UNSANDBOXED: .*--allow-unsandboxed, development only/);
      const w = await s.post("/execute", { slot_id: "slot_0", tool: "write_file", args: { path: "f.txt", content: "x" } });
      expect(w.json.metadata.unsandboxed).toMatch(/^UNSANDBOXED/);
      const req = await s.bash(0, "echo plain", { require_sandbox: true });
      expect(req.success).toBe(false);
      expect(req.error).toMatch(/sandbox required but unavailable/);
      expect(req.output).toBe("");
      // Nothing ran: a file the command would create does not exist.
      const marker = serverView(s.proc.pid, join(s.dataDir, "slot_0", "marker"));
      await s.bash(0, `touch marker`, { require_sandbox: true });
      expect(existsSync(marker)).toBe(false);
    } finally {
      await s.stop();
    }
  });
});
