import { spawn, execFileSync } from "node:child_process";
import { mkdtemp, mkdir, readFile, rm, stat, symlink, writeFile, readdir, lstat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import { readFileTool, writeFileTool, type FileToolOptions, type ToolOutcome } from "../../src/sandbox/tools/files.js";
import { resolveInWorkspace, WorkspacePathError } from "../../src/sandbox/tools/path-guard.js";
import { isRoot } from "./helpers.js";

/**
 * read_file / write_file on real temp directories: every way out of the workspace is
 * refused with an error naming the path, nothing outside is read or written, and paths
 * in answers are workspace-relative.
 */

const SECRET = "OUTSIDE-SECRET-do-not-leak";
const opts: FileToolOptions = { maxReadBytes: 4096, maxWriteBytes: 4096 };
const roots: string[] = [];
let ws: string;
let outside: string;

beforeEach(async () => {
  const root = await mkdtemp(join(tmpdir(), "slotpool-files-"));
  roots.push(root);
  ws = join(root, "workspace");
  outside = join(root, "outside");
  await mkdir(join(ws, "sub", "deep"), { recursive: true });
  await mkdir(outside);
  await writeFile(join(outside, "secret.txt"), SECRET);
  await writeFile(join(ws, "sub", "deep", "inside.txt"), "inside\n");
});

afterAll(async () => {
  for (const r of roots) await rm(r, { recursive: true, force: true });
});

const read = (path: string, extra: Partial<Parameters<typeof readFileTool>[1]> = {}, o = opts) =>
  readFileTool(ws, { path, ...extra }, o);
const write = (path: string, content: string, extra: Partial<Parameters<typeof writeFileTool>[1]> = {}, o = opts) =>
  writeFileTool(ws, { path, content, ...extra }, o);

function expectRefused(r: ToolOutcome, path: string, pattern: RegExp): void {
  expect(r.success).toBe(false);
  expect(r.error).toContain(JSON.stringify(path));
  expect(r.error).toMatch(pattern);
  expect(r.output).toBe("");
  expect(JSON.stringify(r)).not.toContain(SECRET);
  // Host paths never leave the tool (unless the caller sent one: it is named back).
  if (!path.includes(ws)) expect(JSON.stringify(r)).not.toContain(ws);
}

async function outsideUntouched(): Promise<void> {
  expect((await readdir(outside)).sort()).toEqual(["secret.txt"]);
  expect(await readFile(join(outside, "secret.txt"), "utf8")).toBe(SECRET);
}

describe("read_file", () => {
  it("reads relative paths and /workspace paths, answering workspace-relative paths", async () => {
    for (const p of ["sub/deep/inside.txt", "./sub/deep/inside.txt", "/workspace/sub/deep/inside.txt", "sub//deep/../deep/inside.txt"]) {
      const r = await read(p);
      expect(r.success, p).toBe(true);
      expect(r.output).toBe("inside\n");
      expect(r.metadata.path).toBe("sub/deep/inside.txt");
      expect(r.metadata["bytes"]).toBe(7);
      expect(JSON.stringify(r)).not.toContain(ws);
    }
  });

  it("follows symlinks that stay inside the workspace (relative and /workspace-absolute)", async () => {
    await symlink("sub/deep", join(ws, "rel-link"));
    await symlink("/workspace/sub/deep/inside.txt", join(ws, "abs-link"));
    await symlink("../deep/inside.txt", join(ws, "sub", "deep", "up-link"));
    for (const p of ["rel-link/inside.txt", "abs-link", "sub/deep/up-link"]) {
      const r = await read(p);
      expect(r.success, `${p}: ${r.error}`).toBe(true);
      expect(r.output).toBe("inside\n");
      expect(r.metadata.path).toBe("sub/deep/inside.txt");
    }
  });

  it("refuses '..' escapes", async () => {
    for (const p of ["../outside/secret.txt", "sub/../../outside/secret.txt", "sub/deep/../../../outside/secret.txt", "..", "/workspace/../outside/secret.txt"]) {
      expectRefused(await read(p), p, /escapes the workspace/);
    }
  });

  it("refuses absolute paths outside /workspace", async () => {
    for (const p of ["/etc/passwd", join(outside, "secret.txt"), "/workspacefoo/x", "/proc/self/environ", ws + "/sub/deep/inside.txt"]) {
      expectRefused(await read(p), p, /outside the workspace: absolute paths must be under \/workspace/);
    }
  });

  it("refuses a symlink leading out at every position of the path", async () => {
    await symlink(outside, join(ws, "first"));
    await symlink(outside, join(ws, "sub", "middle"));
    await symlink(join(outside, "secret.txt"), join(ws, "sub", "deep", "last"));
    await symlink("../../../outside/secret.txt", join(ws, "sub", "deep", "relative-last"));
    await symlink("/etc/passwd", join(ws, "passwd"));
    await symlink("/etc", join(ws, "etc"));
    const cases: Array<[string, string]> = [
      ["first/secret.txt", "first"],
      ["sub/middle/secret.txt", "sub/middle"],
      ["sub/deep/last", "sub/deep/last"],
      ["sub/deep/relative-last", "sub/deep/relative-last"],
      ["passwd", "passwd"],
      ["etc/passwd", "etc"],
      ["/workspace/etc/hostname", "etc"],
    ];
    for (const [p, link] of cases) {
      const r = await read(p);
      expectRefused(r, p, /symlink .* (points|leads) outside the workspace/);
      expect(r.error).toContain(JSON.stringify(link));
      expect(r.output).not.toContain("root:");
    }
  });

  it("refuses a chain of symlinks that ends outside, and symlink loops", async () => {
    await symlink("hop2", join(ws, "hop1"));
    await symlink("sub/../..", join(ws, "hop2"));
    expectRefused(await read("hop1/outside/secret.txt"), "hop1/outside/secret.txt", /symlink .* outside the workspace/);
    await symlink("loop-b", join(ws, "loop-a"));
    await symlink("loop-a", join(ws, "loop-b"));
    expectRefused(await read("loop-a"), "loop-a", /too many levels of symlinks/);
  });

  it("reports missing files, directories and dangling symlinks clearly", async () => {
    expectRefused(await read("nope.txt"), "nope.txt", /not found/);
    expectRefused(await read("sub/nope/x.txt"), "sub/nope/x.txt", /not found: "sub\/nope" does not exist/);
    expectRefused(await read("sub"), "sub", /is a directory/);
    await symlink("missing-target", join(ws, "dangling"));
    expectRefused(await read("dangling"), "dangling", /not found/);
    await symlink(join(outside, "missing"), join(ws, "dangling-out"));
    expectRefused(await read("dangling-out"), "dangling-out", /outside the workspace/);
    await writeFile(join(ws, "file"), "x");
    expectRefused(await read("file/child"), "file/child", /is not a directory/);
  });

  it("does not hang on a FIFO", async () => {
    execFileSync("mkfifo", [join(ws, "pipe")]);
    const r = await read("pipe");
    expectRefused(r, "pipe", /not a regular file/);
  });

  it("caps reads, keeps UTF-8 whole and marks the truncation", async () => {
    await writeFile(join(ws, "big.txt"), "é".repeat(5000)); // 10,000 bytes
    const r = await read("big.txt", {}, { ...opts, maxReadBytes: 1001 });
    expect(r.success).toBe(true);
    expect(r.metadata.truncated).toBe(true);
    expect(r.metadata["bytes"]).toBe(1000); // the cut fell inside a 2-byte character
    expect(r.metadata["file_size"]).toBe(10_000);
    expect(r.output.startsWith("é".repeat(500) + "\n[truncated: showing the first 1000 of 10000 bytes")).toBe(true);
    const small = await read("big.txt", { max_bytes: 10 });
    expect(small.metadata["bytes"]).toBe(10);
    // A max_bytes above the server's cap does not raise it.
    const capped = await read("big.txt", { max_bytes: 1_000_000 }, { ...opts, maxReadBytes: 100 });
    expect(capped.metadata["bytes"]).toBe(100);
  });

  it("shows text that is not valid UTF-8 with replacement characters and says so", async () => {
    await writeFile(join(ws, "latin1.txt"), Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a])); // "café\n" in Latin-1
    const r = await read("latin1.txt");
    expect(r.success).toBe(true);
    expect(r.output).toBe("caf\ufffd\n");
    expect(r.metadata["invalid_utf8"]).toBe(true);
    const clean = await read("sub/deep/inside.txt");
    expect(clean.metadata["invalid_utf8"]).toBeUndefined();
  });

  it("says a binary file is binary, and returns it as base64 when asked", async () => {
    const bytes = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff, 0xfe, 0x01]);
    await writeFile(join(ws, "img.png"), bytes);
    const r = await read("img.png");
    expectRefused(r, "img.png", /binary file \(8 bytes\).*encoding "base64"/);
    const b = await read("img.png", { encoding: "base64" });
    expect(b.success).toBe(true);
    expect(Buffer.from(b.output, "base64")).toEqual(bytes);
    expect(b.metadata["encoding"]).toBe("base64");
  });
});

describe("write_file", () => {
  it("creates parent directories and answers a workspace-relative path", async () => {
    const r = await write("/workspace/new/dir/a.txt", "hello");
    expect(r.success, r.error).toBe(true);
    expect(r.metadata.path).toBe("new/dir/a.txt");
    expect(r.metadata["bytes"]).toBe(5);
    expect(r.output).toBe("Wrote 5 bytes to new/dir/a.txt");
    expect(JSON.stringify(r)).not.toContain(ws);
    expect(await readFile(join(ws, "new", "dir", "a.txt"), "utf8")).toBe("hello");
  });

  it("replaces the whole content of an existing file", async () => {
    await writeFile(join(ws, "f.txt"), "a long original content");
    expect((await write("f.txt", "short")).success).toBe(true);
    expect(await readFile(join(ws, "f.txt"), "utf8")).toBe("short");
  });

  it("chowns what it creates to the slot's owner", async () => {
    // Root serves slots as other uids; a non-root server's slots are its own uid (a chown
    // to another uid is root's alone), and it still sets it explicitly.
    const owner = isRoot ? { uid: 54321, gid: 54322 } : { uid: process.getuid!(), gid: process.getgid!() };
    const r = await write("own/er/file.txt", "x", {}, { ...opts, owner });
    expect(r.success, r.error).toBe(true);
    for (const p of ["own", "own/er", "own/er/file.txt"]) {
      const st = await stat(join(ws, p));
      expect([st.uid, st.gid], p).toEqual([owner.uid, owner.gid]);
    }
  });

  it("writes base64 content byte for byte and refuses invalid base64", async () => {
    const bytes = Buffer.from([0, 1, 2, 250, 255]);
    const r = await write("bin.dat", bytes.toString("base64"), { encoding: "base64" });
    expect(r.success, r.error).toBe(true);
    expect(await readFile(join(ws, "bin.dat"))).toEqual(bytes);
    const bad = await write("bad.dat", "not base64!!", { encoding: "base64" });
    expect(bad.success).toBe(false);
    expect(bad.error).toMatch(/not valid base64/);
  });

  it("refuses content over the cap without creating anything", async () => {
    const r = await write("huge.txt", "x".repeat(5000));
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/"huge.txt" is 5000 bytes; write_file accepts at most 4096 bytes/);
    await expect(lstat(join(ws, "huge.txt"))).rejects.toThrow(/ENOENT/);
    const b64 = await write("huge.bin", Buffer.alloc(5000).toString("base64"), { encoding: "base64" });
    expect(b64.success).toBe(false);
  });

  it("refuses every escape and leaves the outside untouched", async () => {
    await symlink(outside, join(ws, "first"));
    await symlink(outside, join(ws, "sub", "middle"));
    await symlink(join(outside, "secret.txt"), join(ws, "last"));
    await symlink(join(outside, "new-file"), join(ws, "dangling-out"));
    await symlink("../outside/new-file2", join(ws, "dangling-rel-out"));
    await symlink("/etc/passwd", join(ws, "passwd"));
    const cases: Array<[string, RegExp]> = [
      ["../outside/x.txt", /escapes the workspace/],
      ["sub/../../outside/x.txt", /escapes the workspace/],
      ["/etc/slotpool-test", /absolute paths must be under \/workspace/],
      [join(outside, "x.txt"), /absolute paths must be under \/workspace/],
      ["first/x.txt", /symlink "first" points outside/],
      ["first/new/dir/x.txt", /symlink "first" points outside/],
      ["sub/middle/x.txt", /symlink "sub\/middle" points outside/],
      ["last", /symlink "last" points outside/],
      ["dangling-out", /symlink "dangling-out" points outside/],
      ["dangling-rel-out", /symlink "dangling-rel-out" leads outside/],
      ["passwd", /symlink "passwd" points outside/],
    ];
    for (const [p, pattern] of cases) expectRefused(await write(p, "pwned"), p, pattern);
    await outsideUntouched();
    expect(await readFile("/etc/passwd", "utf8")).not.toContain("pwned");
  });

  it("writes through a dangling symlink that stays inside (creating its target)", async () => {
    await symlink("sub/target.txt", join(ws, "dangling-in"));
    const r = await write("dangling-in", "via link");
    expect(r.success, r.error).toBe(true);
    expect(r.metadata.path).toBe("sub/target.txt");
    expect(await readFile(join(ws, "sub", "target.txt"), "utf8")).toBe("via link");
  });

  it("refuses to write over a directory or to the workspace root", async () => {
    expectRefused(await write("sub", "x"), "sub", /is a directory/);
    expectRefused(await write("/workspace", "x"), "/workspace", /is a directory/);
    expectRefused(await write(".", "x"), ".", /is a directory/);
  });
});

/**
 * Starts a separate process that flips `<ws>/swap` between `<ws>/<real>` and `<ws>/<evil>`
 * (a symlink out) as fast as it can, the way a hostile slot command would.
 */
function startFlipper(real: string, evil: string): { stop: () => Promise<void> } {
  const flipper = spawn(process.execPath, [
    "-e",
    `const fs = require("fs"); const [d, real, evil] = process.argv.slice(1);
     const mv = (a, b) => { try { fs.renameSync(d + "/" + a, d + "/" + b); } catch {} };
     for (;;) { mv(real, "swap"); mv("swap", real); mv(evil, "swap"); mv("swap", evil); }`,
    ws, real, evil,
  ], { stdio: "ignore" });
  const exited = new Promise((resolve) => flipper.once("exit", resolve));
  return {
    async stop() {
      flipper.kill("SIGTERM");
      await exited;
    },
  };
}

/**
 * Runs `attempt` for `ms`, counting successes and refusals; on a loaded machine (the flipper
 * gets little CPU) it goes on, up to 10x as long, until both outcomes were seen.
 */
async function hammer(ms: number, attempt: () => Promise<boolean>): Promise<{ ok: number; refused: number }> {
  const seen = { ok: 0, refused: 0 };
  const start = Date.now();
  while (Date.now() < start + ms || ((seen.ok === 0 || seen.refused === 0) && Date.now() < start + 10 * ms)) {
    if (await attempt()) seen.ok++;
    else seen.refused++;
  }
  return seen;
}

describe("path guard under a symlink swap race", () => {
  it("never reads or writes outside while a command swaps a directory for a symlink", async () => {
    await mkdir(join(ws, "real"));
    await writeFile(join(ws, "real", "secret.txt"), "inside-secret");
    await symlink(outside, join(ws, "evil"));
    const flipper = startFlipper("real", "evil");
    try {
      const reads = await hammer(1000, async () => {
        const r = await read("swap/secret.txt");
        expect(r.output).not.toContain(SECRET);
        return r.success;
      });
      // Writing without creating parents: a write that got through the symlink would
      // overwrite the outside secret.
      const writes = await hammer(1000, async () => {
        const w = await resolveInWorkspace(ws, "swap/secret.txt", { intent: "write" }).catch((err: unknown) => {
          // Losing the race must be a clear refusal, never an internal error.
          expect(err).toBeInstanceOf(WorkspacePathError);
          return undefined;
        });
        if (!w) return false;
        await w.handle.write("pwned");
        await w.handle.close();
        return true;
      });
      // Both outcomes must have happened, or the race was not exercised at all.
      for (const seen of [reads, writes]) {
        expect(seen.ok).toBeGreaterThan(0);
        expect(seen.refused).toBeGreaterThan(0);
      }
    } finally {
      await flipper.stop();
    }
    await outsideUntouched();
  });

  it("never reads or writes outside while a command swaps the final file for a symlink", async () => {
    await writeFile(join(ws, "realfile"), "inside");
    await symlink(join(outside, "secret.txt"), join(ws, "evilfile"));
    const flipper = startFlipper("realfile", "evilfile");
    try {
      const reads = await hammer(1000, async () => {
        const r = await read("swap");
        expect(r.output).not.toContain(SECRET);
        if (!r.success) expect(r.error).toMatch(/outside the workspace|not found/);
        return r.success;
      });
      const writes = await hammer(1000, async () => {
        const w = await write("swap", "pwned");
        if (!w.success) expect(w.error).toMatch(/outside the workspace|not found|vanished/);
        return w.success;
      });
      for (const seen of [reads, writes]) {
        expect(seen.ok).toBeGreaterThan(0);
        expect(seen.refused).toBeGreaterThan(0);
      }
    } finally {
      await flipper.stop();
    }
    await outsideUntouched();
  });
});

describe("resolveInWorkspace", () => {
  it("throws WorkspacePathError with the problem kind", async () => {
    const err = await resolveInWorkspace(ws, "../x", { intent: "read" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkspacePathError);
    expect((err as WorkspacePathError).problem).toBe("outside");
    const nul = await resolveInWorkspace(ws, "a\0b", { intent: "read" }).catch((e: unknown) => e);
    expect((nul as WorkspacePathError).problem).toBe("invalid");
  });

  it("opens directories for listing and reports the workspace root as '.'", async () => {
    const root = await resolveInWorkspace(ws, "/workspace", { intent: "directory" });
    expect(root.path).toBe(".");
    expect(root.stat.isDirectory()).toBe(true);
    await root.handle.close();
    const file = await resolveInWorkspace(ws, "sub/deep/inside.txt", { intent: "directory" }).catch((e: unknown) => e);
    expect((file as WorkspacePathError).problem).toBe("not_directory");
  });
});
