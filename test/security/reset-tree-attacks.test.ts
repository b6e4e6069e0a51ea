/**
 * Issue 20, attacks 1, 2 and 6: what a slot leaves in its workspace cannot break a reset or
 * stall the server, and bad input is refused before anything happens.
 *
 *  - a 4,000-deep directory tree (and one with read-only levels) resets like an empty
 *    slot: HTTP 200, the workspace empty, the next reset fine too;
 *  - 20,000 files reset while another slot keeps answering (the timing targets, 150,000
 *    files and p99, are in test/bench/reset-barrier.ts --tree);
 *  - NUL bytes in a command, keys or path, paths that lead out (`a/../../x`), names and
 *    paths over the filesystem's limits: 400 naming the field, nothing created;
 *  - a slot sees no host path of the server (/proc/1/environ, /proc/1/cmdline, its cwd).
 *
 * Run as root and as the non-root CI user (a non-root server has its own user namespace
 * where it may mount; where it may not, the fallback removal path is what is tested).
 */
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAttackServer, type AttackServer } from "./support.js";
import { serverView } from "../support/server-view.js";

/** Makes a tree `depth` levels deep below /workspace (cd-relative: no PATH_MAX; python: 4,000 mkdir execs would outlast the timeout). */
const deepTree = (depth: number, name = "d") =>
  `cd /workspace && python3 -c 'import os
for i in range(${depth}):
    os.mkdir("${name}"); os.chdir("${name}")
open("leaf", "w").write("x")' && echo made`;

describe.each([
  ["own disk (default)", [] as string[]],
  ["no per-slot mount (--no-disk-workspace)", ["--no-disk-workspace"]],
])("reset of a slot's tree: %s", (_label, extraArgs) => {
  let server: AttackServer;
  const workspace = (i: number) => serverView(server.proc.pid, join(server.dataDir, `slot_${i}`));

  beforeAll(async () => {
    server = await startAttackServer({ slots: 2, extraArgs });
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("a 4,000-deep tree: reset answers 200, the workspace is empty, later resets work", async () => {
    const made = await server.bash(0, deepTree(4000), { timeout: 60 });
    expect(made.output).toContain("made");
    // Control: the tree is there, seen where the server sees the workspace.
    expect(readdirSync(workspace(0))).toContain("d");
    const r = await server.reset(0);
    expect(r.status, r.text).toBe(200);
    expect(r.json.success, r.text).toBe(true);
    expect(readdirSync(workspace(0))).toEqual([]);
    const next = await server.bash(0, "ls -A /workspace | wc -l; ls /workspace/d 2>&1 | head -1");
    expect(next.output.split("\n")[0]).toBe("0");
    const again = await server.reset(0);
    expect(again.status, again.text).toBe(200);
    expect(again.json.success).toBe(true);
  }, 120_000);

  it("a deep tree with read-only levels and a 0000 directory resets too", async () => {
    const made = await server.bash(0, `${deepTree(300, "r")}; cd /workspace && for d in $(find r -type d | head -50); do chmod 500 "$d"; done; mkdir -p z/y && echo s > z/y/f && chmod 000 z; echo locked`, { timeout: 60 });
    expect(made.output).toContain("locked");
    const r = await server.reset(0);
    expect(r.status, r.text).toBe(200);
    expect(readdirSync(workspace(0))).toEqual([]);
  }, 120_000);

  it("20,000 files reset while the other slot keeps answering", async () => {
    const made = await server.bash(0, "cd /workspace && mkdir f && cd f && seq 20000 | xargs touch && ls | wc -l", { timeout: 120 });
    expect(made.output.trim()).toBe("20000");
    const reset = server.reset(0);
    const other = await server.bash(1, "true");
    expect(other.success).toBe(true);
    const r = await reset;
    expect(r.status, r.text).toBe(200);
    expect(readdirSync(workspace(0))).toEqual([]);
  }, 180_000);

  it("/tmp, /var/tmp and /dev/shm are empty after a reset", async () => {
    const wrote = await server.bash(0, "echo a > /tmp/left && echo b > /var/tmp/left && echo c > /dev/shm/left && echo wrote");
    expect(wrote.output).toContain("wrote");
    expect((await server.reset(0)).status).toBe(200);
    const after = await server.bash(0, "ls -A /tmp /var/tmp /dev/shm | grep -c left || true");
    expect(after.output.trim()).toBe("0");
  }, 60_000);
});

describe("bad input is refused before anything happens", () => {
  let server: AttackServer;
  const workspace = () => serverView(server.proc.pid, join(server.dataDir, "slot_0"));

  beforeAll(async () => {
    server = await startAttackServer({ slots: 1 });
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
  });

  const execute = (tool: string, args: Record<string, unknown>) => server.request("POST", "/execute", { slot_id: "slot_0", tool, args });

  it("a NUL byte in a command: 400 naming args.command, nothing runs", async () => {
    const r = await execute("bash", { command: "touch /workspace/ran\u0000; echo cut" });
    expect(r.status).toBe(400);
    expect(r.json.field).toBe("args.command");
    expect(r.json.error).toMatch(/NUL/);
    for (const tool of ["bash_stateful"]) {
      const s = await execute(tool, { command: "touch /workspace/ran2\u0000x" });
      expect(s.status).toBe(400);
      expect(s.json.field).toBe("args.command");
    }
    const keys = await execute("tmux", { action: "send_keys", keys: "echo a\u0000b" });
    expect(keys.status).toBe(400);
    expect(keys.json.field).toBe("args.keys");
    expect(existsSync(join(workspace(), "ran"))).toBe(false);
  });

  it("a NUL byte in a path: 400 naming args.path", async () => {
    for (const tool of ["read_file", "write_file"]) {
      const r = await execute(tool, { path: "a\u0000b", content: "x" });
      expect(r.status).toBe(400);
      expect(r.json.field).toBe("args.path");
    }
    const art = await server.artifact("read", { slot_id: "slot_0", path: "x\u0000y" });
    expect(art.status).toBe(400);
    expect(art.json.field).toBe("path");
  });

  it("write_file 'a/../../x' is refused without creating 'a'", async () => {
    for (const path of ["a/../../x", "/workspace/b/../../x", "c/d/../../../x"]) {
      const r = await execute("write_file", { path, content: "x" });
      expect(r.status, path).toBe(400);
      expect(r.json.field).toBe("args.path");
      expect(r.json.error).toMatch(/escapes the workspace|outside/);
    }
    expect(readdirSync(workspace())).toEqual([]);
    // `..` that stays inside is fine.
    const ok = await execute("write_file", { path: "e/../inside.txt", content: "x" });
    expect(ok.status).toBe(200);
    expect(ok.json.success, ok.text).toBe(true);
    expect((await server.reset(0)).status).toBe(200);
  });

  it("a 5,000-character name or a 3,000-level path: 400 naming args.path, no internal error", async () => {
    const long = await execute("write_file", { path: "n".repeat(5000), content: "x" });
    expect(long.status).toBe(400);
    expect(long.json.field).toBe("args.path");
    expect(long.json.error).toMatch(/4095 bytes/);
    const name = await execute("write_file", { path: `dir/${"n".repeat(300)}`, content: "x" });
    expect(name.status).toBe(400);
    expect(name.json.field).toBe("args.path");
    expect(name.json.error).toMatch(/255 bytes/);
    const deep = await execute("write_file", { path: "d/".repeat(3000) + "f", content: "x" });
    expect(deep.status).toBe(400);
    expect(deep.json.field).toBe("args.path");
    expect(deep.json.error).toMatch(/4095 bytes/);
    const read = await execute("read_file", { path: "n".repeat(300) });
    expect(read.status).toBe(400);
    expect(readdirSync(workspace())).toEqual([]);
  });

  it("a slot sees no host path of the server in /proc/1 (environ, cmdline, cwd): bash with and without network, the terminal", async () => {
    const probe = "cat /proc/1/environ | tr '\\0' '\\n'; echo ---; cat /proc/1/cmdline | tr '\\0' ' '; echo; readlink /proc/1/cwd; echo ---; cat /proc/self/environ | tr '\\0' '\\n'";
    const health = (await server.health()).json;
    const answers = [
      await server.bash(0, probe),
      ...(health.internet === "slirp4netns" ? [await server.bash(0, probe, { allowNetwork: true })] : []),
      await server.execute({ slot_id: "slot_0", tool: "bash_stateful", args: { command: probe, require_sandbox: true, allow_network: false } }),
    ];
    for (const r of answers) {
      expect(r.success, r.error).toBe(true);
      // Control: the probe printed pid 1's command line.
      expect(r.output).toMatch(/bwrap|spawner/);
      for (const hostPath of [server.dataDir, process.cwd(), "/proc/self/fd", "/root", "/home"]) expect(r.output, hostPath).not.toContain(hostPath);
      expect(r.output).not.toMatch(/^PWD=\/(?!workspace)/m);
      expect(r.output).not.toMatch(/^OLDPWD=/m);
    }
    expect((await server.reset(0)).status).toBe(200);
  });
});
