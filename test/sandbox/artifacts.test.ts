import { execFileSync } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { mkdtemp, mkdir, readFile, readdir, readlink, rm, symlink, truncate, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeEach, describe, expect, it } from "vitest";
import {
  ArtifactArchiveResponseSchema,
  ArtifactListResponseSchema,
  ArtifactReadResponseSchema,
} from "../../src/protocol/sandbox.js";
import { archiveArtifacts, DEFAULT_ARTIFACT_LIMITS, listArtifacts, mimeFor, readArtifact } from "../../src/sandbox/tools/artifacts.js";
import { TarGzWriter } from "../../src/sandbox/tools/tar-writer.js";

/**
 * Artifact read/list/archive on real temp directories: answers match the wire schemas,
 * caps hold, user mistakes come back as success:false, and nothing outside the workspace
 * is ever read, listed or archived. Archives are unpacked with the system tar.
 */

const SECRET = "OUTSIDE-SECRET-artifacts";
const roots: string[] = [];
let root: string;
let ws: string;
let outside: string;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), "slotpool-artifacts-"));
  roots.push(root);
  ws = join(root, "workspace");
  outside = join(root, "outside");
  await mkdir(join(ws, "out", "nested"), { recursive: true });
  await mkdir(outside);
  await writeFile(join(outside, "secret.txt"), SECRET);
  await writeFile(join(ws, "out", "result.json"), '{"score": 1}\n');
  await writeFile(join(ws, "out", "nested", "log.txt"), "line 1\nline 2\n");
  await writeFile(join(ws, "top.md"), "# top\n");
});

afterAll(async () => {
  for (const r of roots) await rm(r, { recursive: true, force: true });
});

function noLeak(answer: unknown): void {
  const text = JSON.stringify(answer);
  expect(text).not.toContain(SECRET);
  // The workspace's host path is never named (a symlink's own text may be echoed).
  expect(text).not.toContain(ws);
}

describe("readArtifact", () => {
  it("reads text with size, mime and sha256, matching the wire schema", async () => {
    const r = await readArtifact(ws, { path: "/workspace/out/result.json", include_sha256: true });
    expect(ArtifactReadResponseSchema.parse(r)).toEqual(r);
    expect(r).toMatchObject({
      success: true, content: '{"score": 1}\n', encoding: "text", truncated: false,
      bytes: 13, file_size: 13, path: "out/result.json", mime: "application/json",
    });
    expect(r.sha256).toBe(createHash("sha256").update('{"score": 1}\n').digest("hex"));
    const plain = await readArtifact(ws, { path: "top.md" });
    expect(plain.sha256).toBeNull();
    expect(plain.mime).toBe("text/markdown");
  });

  it("returns binary files as base64 and refuses them as text", async () => {
    const bytes = randomBytes(300);
    bytes[0] = 0;
    await writeFile(join(ws, "blob.bin"), bytes);
    const b = await readArtifact(ws, { path: "blob.bin", encoding: "base64", include_sha256: true });
    expect(b.success).toBe(true);
    expect(Buffer.from(b.content, "base64")).toEqual(bytes);
    expect(b.sha256).toBe(createHash("sha256").update(bytes).digest("hex"));
    expect(b.mime).toBe("application/octet-stream");
    const t = await readArtifact(ws, { path: "blob.bin" });
    expect(t.success).toBe(false);
    expect(t.error).toMatch(/"blob.bin" is binary .*encoding "base64"/);
    expect(ArtifactReadResponseSchema.safeParse(t).success).toBe(true);
  });

  it("truncates at max_bytes and hashes what it returned", async () => {
    await writeFile(join(ws, "big.txt"), "abcdefghij".repeat(1000));
    const r = await readArtifact(ws, { path: "big.txt", max_bytes: 25, include_sha256: true });
    expect(r).toMatchObject({ success: true, content: "abcdefghijabcdefghijabcde", truncated: true, bytes: 25, file_size: 10_000 });
    expect(r.sha256).toBe(createHash("sha256").update("abcdefghijabcdefghijabcde").digest("hex"));
    const b = await readArtifact(ws, { path: "big.txt", max_bytes: 7, encoding: "base64" });
    expect(Buffer.from(b.content, "base64").toString()).toBe("abcdefg");
  });

  it("reads the head of a huge file without loading it", async () => {
    await writeFile(join(ws, "huge.log"), "head\n");
    await truncate(join(ws, "huge.log"), 2 * 1024 * 1024 * 1024); // 2 GiB, sparse
    const before = process.memoryUsage().rss;
    const r = await readArtifact(ws, { path: "huge.log", max_bytes: 1024 * 1024, encoding: "base64" });
    expect(r.success).toBe(true);
    expect(r.truncated).toBe(true);
    expect(r.bytes).toBe(1024 * 1024);
    expect(r.file_size).toBe(2 * 1024 * 1024 * 1024);
    expect(process.memoryUsage().rss - before).toBeLessThan(64 * 1024 * 1024);
  });

  it("refuses escapes and non-files with success:false, never throwing", async () => {
    await symlink("/etc/passwd", join(ws, "passwd"));
    await symlink(outside, join(ws, "outdir"));
    await symlink(join(outside, "secret.txt"), join(ws, "out", "leak.txt"));
    const cases: Array<[string, RegExp]> = [
      ["../outside/secret.txt", /escapes the workspace/],
      ["/etc/passwd", /outside the workspace/],
      [join(outside, "secret.txt"), /outside the workspace/],
      ["passwd", /symlink "passwd" points outside/],
      ["outdir/secret.txt", /symlink "outdir" points outside/],
      ["out/leak.txt", /symlink "out\/leak.txt" points outside/],
      ["missing.txt", /not found/],
      ["out", /is a directory; use \/artifacts\/list/],
    ];
    for (const [path, pattern] of cases) {
      const r = await readArtifact(ws, { path });
      expect(r.success, path).toBe(false);
      expect(r.error).toMatch(pattern);
      expect(r.content).toBe("");
      expect(ArtifactReadResponseSchema.safeParse(r).success).toBe(true);
      if (!path.includes(ws)) noLeak(r);
    }
  });

  it("guesses mime types by extension", () => {
    expect(mimeFor("a/b.PNG")).toBe("image/png");
    expect(mimeFor("x.py")).toBe("text/x-python");
    expect(mimeFor("Makefile")).toBe("application/octet-stream");
  });
});

describe("listArtifacts", () => {
  it("lists one level by default and the whole tree when recursive", async () => {
    const flat = await listArtifacts(ws, {});
    expect(ArtifactListResponseSchema.parse(flat)).toEqual(flat);
    expect(flat).toMatchObject({ success: true, truncated: false, path: "." });
    expect(flat.entries).toEqual([
      { path: "out", type: "dir", size: 0 },
      { path: "top.md", type: "file", size: 6 },
    ]);
    const deep = await listArtifacts(ws, { path: "/workspace/out", recursive: true });
    expect(deep.path).toBe("out");
    expect(deep.entries).toEqual([
      { path: "out/nested", type: "dir", size: 0 },
      { path: "out/nested/log.txt", type: "file", size: 14 },
      { path: "out/result.json", type: "file", size: 13 },
    ]);
  });

  it("shows symlinks as symlinks and never descends into them", async () => {
    await symlink(outside, join(ws, "out", "outdir"));
    await symlink("/etc", join(ws, "etc"));
    const r = await listArtifacts(ws, { recursive: true });
    expect(r.entries).toContainEqual({ path: "out/outdir", type: "symlink", size: 0 });
    expect(r.entries).toContainEqual({ path: "etc", type: "symlink", size: 0 });
    expect(r.entries.map((e) => e.path).filter((p) => p.includes("secret") || p.startsWith("etc/"))).toEqual([]);
    noLeak(r);
  });

  it("stops at max_entries and says so", async () => {
    for (let i = 0; i < 30; i++) await writeFile(join(ws, "out", `f${String(i).padStart(2, "0")}.txt`), "x");
    const r = await listArtifacts(ws, { recursive: true, max_entries: 10 });
    expect(r.success).toBe(true);
    expect(r.entries).toHaveLength(10);
    expect(r.truncated).toBe(true);
    const all = await listArtifacts(ws, { recursive: true, max_entries: 1000 });
    expect(all.truncated).toBe(false);
    expect(all.entries).toHaveLength(30 + 5);
  });

  it("refuses escapes and files with success:false", async () => {
    await symlink(outside, join(ws, "outdir"));
    for (const [path, pattern] of [
      ["..", /escapes the workspace/],
      ["/tmp", /outside the workspace/],
      ["outdir", /symlink "outdir" points outside/],
      ["top.md", /is not a directory/],
      ["nope", /not found/],
    ] as const) {
      const r = await listArtifacts(ws, { path });
      expect(r.success, path).toBe(false);
      expect(r.error).toMatch(pattern);
      expect(r.entries).toEqual([]);
      expect(ArtifactListResponseSchema.safeParse(r).success).toBe(true);
      noLeak(r);
    }
  });
});

/** Unpacks a base64 tar.gz with the system tar into a fresh directory. */
async function unpack(content: string): Promise<string> {
  const dir = await mkdtemp(join(root, "unpacked-"));
  const file = join(root, `archive-${Date.now()}-${Math.random()}.tar.gz`);
  await writeFile(file, Buffer.from(content, "base64"));
  execFileSync("tar", ["-xzf", file, "-C", dir]);
  return dir;
}

async function treeOf(dir: string, prefix = ""): Promise<string[]> {
  const out: string[] = [];
  for (const d of (await readdir(dir, { withFileTypes: true })).sort((a, b) => a.name.localeCompare(b.name))) {
    const rel = prefix + d.name;
    if (d.isDirectory()) out.push(rel + "/", ...(await treeOf(join(dir, d.name), rel + "/")));
    else if (d.isSymbolicLink()) out.push(`${rel} -> ${await readlink(join(dir, d.name))}`);
    else out.push(rel);
  }
  return out;
}

describe("archiveArtifacts", () => {
  it("archives a directory as tar.gz that unpacks to the same tree", async () => {
    const r = await archiveArtifacts(ws, { path: "out" });
    expect(ArtifactArchiveResponseSchema.parse(r)).toEqual(r);
    expect(r).toMatchObject({ success: true, encoding: "base64", format: "tar.gz", path: "out", entries: 4 });
    expect(r.bytes).toBe(Buffer.from(r.content, "base64").length);
    const dir = await unpack(r.content);
    expect(await treeOf(dir)).toEqual(["out/", "out/nested/", "out/nested/log.txt", "out/result.json"]);
    expect(await readFile(join(dir, "out", "nested", "log.txt"), "utf8")).toBe("line 1\nline 2\n");
  });

  it("archives the whole workspace and single files, keeping binary content intact", async () => {
    const bytes = randomBytes(100_000);
    await writeFile(join(ws, "data.bin"), bytes);
    const all = await archiveArtifacts(ws, {});
    expect(all.success).toBe(true);
    const dir = await unpack(all.content);
    expect(await treeOf(dir)).toEqual(["data.bin", "out/", "out/nested/", "out/nested/log.txt", "out/result.json", "top.md"]);
    expect(await readFile(join(dir, "data.bin"))).toEqual(bytes);
    const one = await archiveArtifacts(ws, { path: "/workspace/out/result.json" });
    expect(one.entries).toBe(1);
    expect(await treeOf(await unpack(one.content))).toEqual(["out/", "out/result.json"]);
  });

  it("stores symlinks as links and never pulls in files from outside", async () => {
    await symlink("/etc/passwd", join(ws, "out", "passwd"));
    await symlink(outside, join(ws, "out", "outdir"));
    await symlink(join(outside, "secret.txt"), join(ws, "out", "secret-link"));
    const r = await archiveArtifacts(ws, { path: "out" });
    expect(r.success).toBe(true);
    const raw = gunzipSync(Buffer.from(r.content, "base64")).toString("latin1");
    expect(raw).not.toContain(SECRET);
    expect(raw).not.toContain("root:x:0:0");
    const tree = await treeOf(await unpack(r.content));
    expect(tree).toContain("out/passwd -> /etc/passwd");
    expect(tree).toContain(`out/outdir -> ${outside}`);
    expect(tree.filter((p) => p.startsWith("out/outdir/"))).toEqual([]);
  });

  it("keeps long and non-ASCII names through pax headers", async () => {
    const long = "d".repeat(60) + "/" + "e".repeat(70) + "/" + "f".repeat(120) + ".txt";
    await mkdir(join(ws, "names", long, ".."), { recursive: true });
    await writeFile(join(ws, "names", long), "long");
    await writeFile(join(ws, "names", "héllo wörld ✓.txt"), "unicode");
    const r = await archiveArtifacts(ws, { path: "names" });
    expect(r.success, r.error).toBe(true);
    const dir = await unpack(r.content);
    expect(await readFile(join(dir, "names", long), "utf8")).toBe("long");
    expect(await readFile(join(dir, "names", "héllo wörld ✓.txt"), "utf8")).toBe("unicode");
  });

  it("keeps long symlink targets, and records sizes over 8 GiB in pax headers", async () => {
    const target = "t".repeat(150) + "/x";
    await symlink(target, join(ws, "out", "long-link"));
    const r = await archiveArtifacts(ws, { path: "out" });
    expect(await treeOf(await unpack(r.content))).toContain(`out/long-link -> ${target}`);
    // The ustar size field stops at 8 GiB - 1; bigger files need a pax "size" record.
    const tar = new TarGzWriter(1024 * 1024);
    await tar.writeHeader({ path: "big.img", type: "file", size: 9 * 1024 ** 3, mode: 0o644, mtimeMs: 0, uid: 0, gid: 0 });
    const raw = gunzipSync(await tar.finish()).toString("latin1");
    expect(raw).toContain(`size=${9 * 1024 ** 3}\n`);
  });

  it("fails clearly over max_entries and max_bytes", async () => {
    for (let i = 0; i < 20; i++) await writeFile(join(ws, "out", `f${i}`), "x");
    const many = await archiveArtifacts(ws, { path: "out", max_entries: 5 });
    expect(many.success).toBe(false);
    expect(many.error).toMatch(/"out" has more than 5 entries \(max_entries\)/);
    expect(many.content).toBe("");
    await writeFile(join(ws, "out", "noise.bin"), randomBytes(2 * 1024 * 1024));
    const big = await archiveArtifacts(ws, { path: "out", max_bytes: 64 * 1024 });
    expect(big.success).toBe(false);
    expect(big.error).toMatch(/exceeds max_bytes \(65536 bytes compressed\)/);
    expect(ArtifactArchiveResponseSchema.safeParse(big).success).toBe(true);
  });

  it("skips fifos but counts them, so a capped directory never loses files silently", async () => {
    await mkdir(join(ws, "mixed"));
    for (const n of ["a-fifo", "b-fifo", "c-fifo"]) execFileSync("mkfifo", [join(ws, "mixed", n)]);
    for (const n of ["x.txt", "y.txt", "z.txt"]) await writeFile(join(ws, "mixed", n), n);
    const capped = await archiveArtifacts(ws, { path: "mixed", max_entries: 5 });
    expect(capped.success).toBe(false);
    expect(capped.error).toMatch(/more than 5 entries/);
    const ok = await archiveArtifacts(ws, { path: "mixed", max_entries: 7 });
    expect(ok.success, ok.error).toBe(true);
    expect(await treeOf(await unpack(ok.content))).toEqual(["mixed/", "mixed/x.txt", "mixed/y.txt", "mixed/z.txt"]);
  });

  it("gives up on trees with too much data or nesting, quickly", async () => {
    await writeFile(join(ws, "out", "sparse.img"), "");
    await truncate(join(ws, "out", "sparse.img"), 4 * 1024 * 1024 * 1024); // compresses ~1000:1
    const started = Date.now();
    const r = await archiveArtifacts(ws, { path: "out" }, { ...DEFAULT_ARTIFACT_LIMITS, maxArchiveSourceBytes: 1024 * 1024 });
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/"out" holds more than 1048576 bytes of file data/);
    // bound: stopping at the 1 MiB bound takes milliseconds; compressing the 4 GiB file would take minutes — 5 s fails only that, even on a loaded box.
    expect(Date.now() - started).toBeLessThan(5_000);
    await mkdir(join(ws, "deep", ...Array.from({ length: 130 }, () => "d")), { recursive: true });
    const deep = await archiveArtifacts(ws, { path: "deep" });
    expect(deep.success).toBe(false);
    expect(deep.error).toMatch(/deeper than 128 levels/);
    const list = await listArtifacts(ws, { path: "deep", recursive: true });
    expect(list.success).toBe(true);
    expect(list.truncated).toBe(true);
  });

  it("refuses escapes with success:false", async () => {
    await symlink(outside, join(ws, "outdir"));
    for (const [path, pattern] of [
      ["../outside", /escapes the workspace/],
      ["/etc", /outside the workspace/],
      ["outdir", /symlink "outdir" points outside/],
      ["outdir/secret.txt", /symlink "outdir" points outside/],
    ] as const) {
      const r = await archiveArtifacts(ws, { path });
      expect(r.success, path).toBe(false);
      expect(r.error).toMatch(pattern);
      expect(r.content).toBe("");
      noLeak(r);
    }
  });
});
