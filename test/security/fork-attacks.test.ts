/**
 * A fork must never hand a child anything of the host (issue 28). The parent slot controls
 * everything inside its tree and keeps running while the fork happens, so each attack here
 * is a parent that prepares its tree against the server: symlinks planted in its terminal's
 * session files and where the session dir goes, directories swapped for symlinks while a
 * copy-mode fork copies, and a writer in a mount namespace of its own that would keep
 * writing into the layer the children read. Run as root and as a non-root user (the host
 * file is then one of the server user's own, e.g. its ~/.ssh).
 */
import { randomBytes } from "node:crypto";
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ForkTreeChangedError, treeChangedDetail } from "../../src/sandbox/fork/sandboxed-copy.js";
import { startAttackServer, type AttackServer } from "./support.js";

/** A host dir the slots cannot see (their /tmp is their own), holding a 0600 file with a token. */
function hostSecret(): { dir: string; file: string; token: string } {
  const dir = mkdtempSync(join(tmpdir(), "slotpool-secret-"));
  const token = `host-secret-${randomBytes(8).toString("hex")}`;
  const file = join(dir, "secret");
  writeFileSync(file, token + "\n", { mode: 0o600 });
  chmodSync(dir, 0o700);
  return { dir, file, token };
}

function stateful(s: AttackServer, slot: number, command: string) {
  return s.execute({ slot_id: `slot_${slot}`, tool: "bash_stateful", args: { command, require_sandbox: true, allow_network: false, timeout: 20 } });
}

const cleanup: string[] = [];
afterAll(() => {
  for (const d of cleanup) rmSync(d, { recursive: true, force: true });
});

describe("fork attacks (overlay or copy, whichever the host allows)", () => {
  let server: AttackServer;
  beforeAll(async () => {
    server = await startAttackServer({ slots: 4 });
    expect((await server.health()).json.bwrap_available).toBe(true);
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("a fork never follows symlinks the parent planted in its terminal's session files (x.cwd, x.env, recd)", async () => {
    const secret = hostSecret();
    cleanup.push(secret.dir);
    const victim = join(secret.dir, "victim");
    writeFileSync(victim, "victim-intact\n", { mode: 0o644 });
    const before = statSync(victim);
    expect((await stateful(server, 0, "cd /workspace && echo warm")).output).toBe("warm");
    const planted = await stateful(server, 0, `ln -sf ${secret.file} /tmp/.slotpool/x.cwd; ln -sf ${secret.file} /tmp/.slotpool/x.env; ln -sf ${victim} /tmp/.slotpool/recd; echo planted`);
    expect(planted.output).toBe("planted");
    const f = await server.request("POST", "/fork", { slot_id: "slot_0", into: ["slot_1"] });
    expect(f.status, f.text).toBe(200);
    // An ordinary parent (no namespace of its own) loses no process to the fork's seal.
    expect(server.logs.join("\n")).not.toContain("mount namespaces of their own");
    const child = await stateful(server, 1, "pwd; env; echo child-ok");
    expect(child.output).toContain("child-ok");
    expect(child.output + child.error).not.toContain(secret.token);
    // The victim is neither truncated nor given to a slot's uid.
    expect(readFileSync(victim, "utf8")).toBe("victim-intact\n");
    const after = statSync(victim);
    expect([after.uid, after.gid, after.mode]).toEqual([before.uid, before.gid, before.mode]);
    // The parent's terminal still answers.
    expect((await stateful(server, 0, "echo parent-ok")).output).toBe("parent-ok");
    await server.reset(0);
    await server.reset(1);
  }, 90_000);

  it("a symlink planted where the terminal's session dir goes (/tmp/.slotpool) is not followed by the server", async () => {
    const victimDir = mkdtempSync(join(tmpdir(), "slotpool-victim-"));
    cleanup.push(victimDir);
    chmodSync(victimDir, 0o755);
    const before = statSync(victimDir);
    const r = await server.bash(2, `rm -rf /tmp/.slotpool; ln -s ${victimDir} /tmp/.slotpool && echo planted`);
    expect(r.output).toBe("planted");
    const t = await stateful(server, 2, "echo terminal-ok");
    // The host dir first (what the attack is after), then the terminal still works.
    const after = statSync(victimDir);
    expect([after.uid, after.gid, after.mode]).toEqual([before.uid, before.gid, before.mode]);
    expect(readdirSync(victimDir)).toEqual([]);
    expect(t.output, JSON.stringify(t)).toBe("terminal-ok");
    await server.reset(2);
  }, 60_000);

  it("a slot cannot even start a writer in a nested mount namespace: the seccomp filter refuses new user namespaces", async () => {
    const start = await stateful(server, 0, "unshare -Urm true 2>&1; echo rc=$?");
    expect(start.output).toMatch(/Operation not permitted/);
    expect(start.output).toMatch(/rc=1/);
  });
});

// Defense in depth: the fork's seal must hold on its own, so this server runs without the
// filter (--no-seccomp) and the nested writer really starts.
describe("fork attacks without the seccomp filter (the seal alone)", () => {
  let server: AttackServer;
  beforeAll(async () => {
    server = await startAttackServer({ slots: 4, extraArgs: ["--no-seccomp"] });
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("a writer in a nested mount namespace of the parent never reaches the children after the fork", async () => {
    await server.reset(0);
    await server.reset(3);
    // The writer appends to the workspace and, to prove it runs, to /tmp (not part of a fork).
    const start = await stateful(
      server,
      0,
      "(unshare -Urm sh -c 'while :; do echo x >> /workspace/leak; echo y >> /tmp/alive; sleep .1; done' 2>/tmp/unshare.err >/dev/null &); sleep 1; echo started",
    );
    expect(start.output).toBe("started");
    const alive = await stateful(server, 0, "wc -l < /tmp/alive 2>/dev/null || echo 0; cat /tmp/unshare.err");
    const [count, ...err] = alive.output.split("\n");
    // Without the filter the host must allow unprivileged user namespaces for the attack to start at all.
    expect(Number(count), `the nested writer did not run: ${err.join(" ")}`).toBeGreaterThan(2);
    const f = await server.request("POST", "/fork", { slot_id: "slot_0", into: ["slot_3"] });
    expect(f.status, f.text).toBe(200);
    const lines = async (): Promise<number> => Number((await server.bash(3, "wc -l < /workspace/leak")).output);
    // First what the attack is after: the writer's lines keep reaching the child.
    const first = await lines();
    expect(first).toBeGreaterThan(0);
    // wait: a window in which the writer (appending every few ms) must reach the child no more (a loaded box can only show fewer appends)
    await new Promise((r) => setTimeout(r, 2_000));
    expect(await lines(), "the nested writer's appends still reach the child after the fork").toBe(first);
    // And it was stopped by the fork (the seal below the slot's namespaces), not by chance.
    expect(server.logs.join("\n")).toContain("mount namespaces of their own");
    await server.reset(0);
    await server.reset(3);
  }, 90_000);
});

describe("copy-mode fork attacks (no per-slot disk)", () => {
  let server: AttackServer;
  beforeAll(async () => {
    server = await startAttackServer({ slots: 2, extraArgs: ["--no-disk-workspace"] });
    expect((await server.health()).json.bwrap_available).toBe(true);
  }, 60_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("a parent swapping a directory for a symlink to a host directory (RENAME_EXCHANGE loop) gets nothing of the host into a child", async () => {
    const secret = hostSecret();
    cleanup.push(secret.dir);
    // Each `dN` holds the same names as the host dir, so a copy that meets either never fails on a missing name.
    const setup = await server.bash(
      0,
      `for i in $(seq 1 64); do mkdir -p /workspace/d$i && echo decoy > /workspace/d$i/secret; ln -sfn ${secret.dir} /workspace/s$i; done; ` +
        `printf '%s\\n' 'import ctypes, os' 'libc = ctypes.CDLL(None, use_errno=True)' 'os.chdir("/workspace")' 'pairs = [(b"d%d" % i, b"s%d" % i) for i in range(1, 65)]' 'while True:' '  for d, s in pairs: libc.renameat2(-100, d, -100, s, 2)' > /workspace/swap.py; echo ready`,
    );
    expect(setup.output).toBe("ready");
    // The child holds a file of its own: a refused fork must leave it there.
    expect((await server.bash(1, "echo mine > /workspace/child-own; echo ok")).output).toBe("ok");
    expect((await stateful(server, 0, "python3 /workspace/swap.py >/dev/null 2>&1 & sleep 0.3; echo swapping")).output).toBe("swapping");
    let leaked = 0;
    let forks = 0;
    const refused: Array<{ status: number; error: string; childKept: boolean | undefined }> = [];
    const deadline = Date.now() + 40_000;
    for (let i = 0; i < 30 && Date.now() < deadline; i++) {
      const f = await server.request("POST", "/fork", { slot_id: "slot_0", into: ["slot_1"] });
      if (f.status !== 200) {
        // Until a fork succeeds, the child still holds its own file.
        const childKept = forks === 0 ? (await server.bash(1, "cat /workspace/child-own")).output === "mine" : undefined;
        refused.push({ status: f.status, error: String(f.json?.error ?? f.text), childKept });
        continue;
      }
      expect(f.json.mode).toBe("copy");
      forks++;
      const found = await server.bash(1, `grep -rls ${secret.token} /workspace 2>/dev/null | head -1; echo scanned`);
      expect(found.output).toContain("scanned");
      if (found.output.includes("/workspace/")) leaked++;
    }
    // First what matters: nothing of the host in any child (before the fix every fork copied the host file).
    expect(leaked, `${leaked} of ${forks} forks copied the host file into the child`).toBe(0);
    expect(forks + refused.length).toBeGreaterThanOrEqual(10);
    // Inside the parent's sandbox the symlink leads nowhere, so most copies meet a name that
    // changed under them: refused with 409 (the client's to retry: the parent's own processes
    // changed its tree), naming cp's complaint, and no child changed.
    expect(refused.length, "no fork met the tree changing under its copy: the attack did not run").toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.status, r.error).toBe(409);
      expect(r.error).toMatch(/^fork of slot_0 refused: the parent's workspace changed while it was being copied \(copy mode, no per-slot disk: [^)]*'\/workspace\/\.\/[ds]\d+[^']*'[^)]*\)\. Nothing changed in the parent or any child/);
      if (r.childKept !== undefined) expect(r.childKept, "a refused fork changed the child").toBe(true);
    }
    await server.reset(0);
  }, 120_000);
});

describe("what a copy-mode fork calls a changed tree (a 409) and what stays a server failure", () => {
  const src = "/workspace/.";
  it("every complaint about a source name gone, no longer a dir, a loop or a symlink turned dir: the first one is the detail", () => {
    const err = [
      "cp: cannot access '/workspace/./s1': No such file or directory",
      "cp: '/workspace/./d1': No such file or directory",
      "cp: cannot stat '/workspace/./s30/secret': Not a directory",
      "cp: cannot read symbolic link '/workspace/./s12': Invalid argument",
      "cp: cannot overwrite non-directory '/proc/self/fd/3/./s5' with directory '/workspace/./s5'",
      "cp: cannot open '/workspace/./l' for reading: Too many levels of symbolic links",
      "",
    ].join("\n");
    expect(treeChangedDetail(err, src)).toBe("cannot access '/workspace/./s1': No such file or directory");
    const e = new ForkTreeChangedError("'/workspace/./d1': No such file or directory", "slot_0");
    expect([e.status, e.code, e.field]).toEqual([409, "FORK_TREE_CHANGED", "slot_id"]);
    expect(e.message).toMatch(/^fork of slot_0 refused: the parent's workspace changed while it was being copied/);
  });
  it("anything else is not: no space, permissions, a destination path, another program, a cut-off line", () => {
    expect(treeChangedDetail("cp: error writing '/proc/self/fd/3/./big': No space left on device\n", src)).toBeUndefined();
    expect(treeChangedDetail("cp: cannot open '/workspace/./secret' for reading: Permission denied\n", src)).toBeUndefined();
    expect(treeChangedDetail("cp: cannot create directory '/proc/self/fd/3/./d': No such file or directory\n", src)).toBeUndefined();
    expect(treeChangedDetail("bwrap: Can't find source path /x: No such file or directory\n", src)).toBeUndefined();
    // One change and one real failure: the failure wins (a 500).
    expect(treeChangedDetail("cp: '/workspace/./d1': No such file or directory\ncp: error writing '/proc/self/fd/3/./f': No space left on device\n", src)).toBeUndefined();
    expect(treeChangedDetail("cp: '/workspace/./d1': No such file or dir", src)).toBeUndefined();
    expect(treeChangedDetail("", src)).toBeUndefined();
  });
});
