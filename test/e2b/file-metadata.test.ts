// runs as each user: file metadata lives in user xattrs, written by the slot's uid as root and by the server's own uid in its user namespace otherwise
import { FileType, FilesystemEventType, Sandbox, SandboxError, type FilesystemEvent } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ENVD_VERSION } from "../../src/e2b/index.js";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * File metadata (envd ≥ 0.6.2) is user extended attributes `user.e2b.<key>` on the slot's
 * files: written with an upload, surfaced by getInfo, list, rename and the upload's answer,
 * whoever set them; watch events carry their entry when asked (envd ≥ 0.6.3) and accept
 * allowNetworkMounts (0.6.4). A write the slot may not make fails naming the path.
 */
describe("E2B file metadata, watch entry info, refused writes", () => {
  let h: E2bHarness;
  let sbx: Sandbox;
  beforeAll(async () => {
    h = await startE2b({ slots: 3, templates: [{ name: "tpl", files: { "from-template.txt": "t\n" }, setup: ["setfattr -n user.e2b.origin -v template from-template.txt"] }] });
    sbx = await Sandbox.create(h.opts);
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("announces envd 0.6.4, the version whose SDK gates (metadata, includeEntry, allowNetworkMounts) it serves", async () => {
    expect(ENVD_VERSION).toBe("0.6.4");
    expect((await Sandbox.getInfo(sbx.sandboxId, h.opts)).envdVersion).toBe("0.6.4");
  });

  it("metadata written with a file (multipart and octet-stream) is stored as user.e2b.* xattrs and surfaced by getInfo, list and rename", async () => {
    const meta = { author: "mish", purpose: "upload", empty: "" };
    const w = await sbx.files.write("meta/a.txt", "A", { metadata: meta });
    expect(w.metadata).toEqual(meta);
    expect((await sbx.files.getInfo("meta/a.txt")).metadata).toEqual(meta);
    // What a command sees: the same attributes, under the user.e2b. namespace.
    expect((await sbx.commands.run("getfattr -d -m '^user\\.e2b\\.' --absolute-names meta/a.txt")).stdout).toContain('user.e2b.author="mish"');
    await sbx.files.write("meta/b.txt", "B", { metadata: { k: "v 1=0x2" }, useOctetStream: true });
    expect((await sbx.files.getInfo("meta/b.txt")).metadata).toEqual({ k: "v 1=0x2" });
    await sbx.files.write("meta/plain.txt", "no metadata");
    const listed = await sbx.files.list("meta");
    expect(listed.map((e) => [e.name, e.metadata])).toEqual([
      ["a.txt", meta],
      ["b.txt", { k: "v 1=0x2" }],
      ["plain.txt", undefined],
    ]);
    const moved = await sbx.files.rename("meta/a.txt", "/tmp/moved.txt");
    expect(moved.metadata).toEqual(meta);
    expect((await sbx.files.getInfo("/tmp/moved.txt")).metadata).toEqual(meta);
  });

  it("writeFiles gives every file the metadata; overwriting without metadata clears it", async () => {
    const infos = await sbx.files.writeFiles([{ path: "multi/1.txt", data: "1" }, { path: "/tmp/multi/2.txt", data: "2" }], { metadata: { source: "suite" } });
    expect(infos.map((i) => i.metadata)).toEqual([{ source: "suite" }, { source: "suite" }]);
    for (const p of ["multi/1.txt", "/tmp/multi/2.txt"]) expect((await sbx.files.getInfo(p)).metadata).toEqual({ source: "suite" });
    const again = await sbx.files.write("multi/1.txt", "new");
    expect(again.metadata).toBeUndefined();
    expect((await sbx.files.getInfo("multi/1.txt")).metadata).toBeUndefined();
    // Replacing with other keys drops the old ones.
    await sbx.files.write("/tmp/multi/2.txt", "new", { metadata: { other: "x" } });
    expect((await sbx.files.getInfo("/tmp/multi/2.txt")).metadata).toEqual({ other: "x" });
  });

  it("attributes a command sets (setfattr, in the workspace and /tmp) are metadata; other namespaces are not", async () => {
    await sbx.commands.run("echo x > by-cmd.txt && setfattr -n user.e2b.author -v mish by-cmd.txt && setfattr -n user.other -v no by-cmd.txt");
    await sbx.commands.run("echo x > '/tmp/odd\nname' && setfattr -n user.e2b.k -v 'odd' '/tmp/odd\nname'");
    expect((await sbx.files.getInfo("by-cmd.txt")).metadata).toEqual({ author: "mish" });
    // A name getfattr has to escape (a newline) still gets its own metadata.
    expect((await sbx.files.list("/tmp")).find((e) => e.name === "odd\nname")?.metadata).toEqual({ k: "odd" });
  });

  it("metadata the SDK cannot check is refused by the server with a 400 naming the key, and nothing is written", async () => {
    const token = (sbx as unknown as { envdAccessToken: string }).envdAccessToken;
    const res = await fetch(`${h.url}/files?path=/home/user/bad-meta.txt`, {
      method: "POST",
      headers: { "e2b-sandbox-id": sbx.sandboxId, "x-access-token": token, "content-type": "application/octet-stream", "x-metadata-tag": "a\tb" },
      body: "x",
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { message: string }).message).toMatch(/metadata value of 'tag' must be printable US-ASCII/);
    expect(await sbx.files.exists("bad-meta.txt")).toBe(false);
  });

  it("watch events carry their entry (with metadata) when includeEntry asks; allowNetworkMounts is accepted", async () => {
    await sbx.files.makeDir("w");
    const events: FilesystemEvent[] = [];
    const handle = await sbx.files.watchDir("w", (e) => void events.push(e), { includeEntry: true, allowNetworkMounts: true });
    try {
      await sbx.files.write("w/f.txt", "hello", { metadata: { tag: "watched" } });
      await until(() => events.some((e) => e.name === "f.txt" && e.type === FilesystemEventType.CREATE));
      const created = events.find((e) => e.name === "f.txt" && e.type === FilesystemEventType.CREATE)!;
      expect(created.entry).toMatchObject({ name: "f.txt", path: "/home/user/w/f.txt", type: FileType.FILE, size: 5, metadata: { tag: "watched" } });
      await sbx.files.remove("w/f.txt");
      await until(() => events.some((e) => e.name === "f.txt" && e.type === FilesystemEventType.REMOVE));
      // Gone: no entry to give, the event still comes.
      expect(events.find((e) => e.type === FilesystemEventType.REMOVE)!.entry).toBeUndefined();
    } finally {
      await handle.stop();
    }
    const plain: FilesystemEvent[] = [];
    const h2 = await sbx.files.watchDir("w", (e) => void plain.push(e));
    try {
      await sbx.files.write("w/g.txt", "x");
      await until(() => plain.some((e) => e.name === "g.txt"));
      expect(plain.every((e) => e.entry === undefined)).toBe(true);
    } finally {
      await h2.stop();
    }
  });

  it("an uploaded new file is reported as create, write, chmod (E2B's inotify sequence); a command's chmod is a chmod, a plain write only a write", async () => {
    await sbx.files.makeDir("seq/deep");
    const events: Array<[string, string]> = [];
    const handle = await sbx.files.watchDir("seq", (e) => void events.push([e.name, e.type]), { recursive: true });
    try {
      await sbx.files.write("seq/deep/new.txt", "content");
      await until(() => events.length >= 3);
      // wait: nothing more comes for it — a window for a stray event to show (a loaded box can only delay one past it: never a false failure)
      await new Promise((r) => setTimeout(r, 600));
      expect(events).toEqual([
        ["deep/new.txt", FilesystemEventType.CREATE],
        ["deep/new.txt", FilesystemEventType.WRITE],
        ["deep/new.txt", FilesystemEventType.CHMOD],
      ]);
      events.length = 0;
      await sbx.commands.run("chmod +x seq/deep/new.txt");
      await until(() => events.length >= 1);
      await sbx.commands.run("sleep 0.3; echo more >> seq/deep/new.txt");
      await until(() => events.length >= 2);
      // wait: as above, a window for a stray event
      await new Promise((r) => setTimeout(r, 600));
      expect(events).toEqual([
        ["deep/new.txt", FilesystemEventType.CHMOD],
        ["deep/new.txt", FilesystemEventType.WRITE],
      ]);
    } finally {
      await handle.stop();
    }
  });

  it("in a template's copy-on-write workspace (an overlay), the template's metadata shows and new metadata is kept", async () => {
    const t = await Sandbox.create("tpl", h.opts);
    try {
      expect((await t.files.getInfo("from-template.txt")).metadata).toEqual({ origin: "template" });
      await t.files.write("from-template.txt", "changed", { metadata: { origin: "sandbox" } });
      await t.files.write("new.txt", "n", { metadata: { k: "v" } });
      expect((await t.files.list(".")).filter((e) => e.name.endsWith(".txt")).map((e) => [e.name, e.metadata])).toEqual([
        ["from-template.txt", { origin: "sandbox" }],
        ["new.txt", { k: "v" }],
      ]);
    } finally {
      await t.kill();
    }
  });

  it("a write where the slot may not write (the read-only root) fails naming the path, and writes none of the upload", async () => {
    const err = await sbx.files.writeFiles([{ path: "fine.txt", data: "x" }, { path: "/0/f.txt", data: "y" }]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as Error).message).toMatch(/'\/0\/f\.txt': permission denied/);
    expect((err as Error).message).not.toMatch(/no running/);
    expect(await sbx.files.exists("fine.txt")).toBe(false);
  });
});

async function until(cond: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 50));
  }
}
