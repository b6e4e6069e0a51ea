import { randomBytes } from "node:crypto";
import { lstatSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, readEvents, startServer, type TestServer } from "./helpers.js";

/**
 * Volumes (`/volumes/*`, protocol/volumes.ts): named directories that outlive slots, mounted
 * into process sessions, read and written from outside any slot. Every slot that mounts a
 * volume reads and writes the same files, each as its own uid (root: an id-mapped view of
 * files the volume owner holds on disk); the content routes never follow a slot's symlink out
 * of the volume.
 */

const TOKEN = "volume-test-token";
const auth = { authorization: `Bearer ${TOKEN}` };

interface Ev {
  type: string;
  data?: string;
  exit_code?: number;
}

describe("sandbox server volumes", () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 3, token: TOKEN, extraArgs: ["--max-file-mb", "4"] });
  }, 90_000);
  afterAll(async () => {
    await s?.stop();
  });

  const post = (path: string, body: unknown) => s.post(path, body, auth);
  const put = async (id: string, path: string, data: Uint8Array | string, query = "") =>
    fetch(`${s.url}/volumes/file?volume_id=${id}&path=${encodeURIComponent(path)}${query}`, { method: "PUT", headers: auth, body: typeof data === "string" ? data : new Uint8Array(data) });
  const get = async (id: string, path: string) => fetch(`${s.url}/volumes/file?volume_id=${id}&path=${encodeURIComponent(path)}`, { headers: auth });

  /** Runs `script` in a session of `slot` with `volumes` mounted; its output and exit code. */
  async function run(slot: string, script: string, volumes: Array<{ volume_id: string; path: string }> = []): Promise<{ out: string; code: number | undefined }> {
    const res = await fetch(s.url + "/processes/start", {
      method: "POST",
      headers: { "content-type": "application/json", ...auth },
      body: JSON.stringify({ slot_id: slot, cmd: "/bin/bash", args: ["-c", script], volumes }),
    });
    expect(res.status, await res.clone().text()).toBe(200);
    const events: Ev[] = [];
    await readEvents(res, events);
    const out = events
      .filter((e) => e.type === "stdout" || e.type === "stderr")
      .map((e) => Buffer.from(e.data!, "base64").toString("utf8"))
      .join("");
    return { out, code: events.find((e) => e.type === "end")?.exit_code };
  }

  it("a server that has kept no volume makes no volumes directory: the list is empty and the data dir holds only the slots' workspaces; the first volume makes it", async () => {
    const visible = (): string[] => readdirSync(s.dataDir).filter((n) => !n.startsWith("."));
    expect(visible()).not.toContain("volumes");
    const list = await post("/volumes/list", {});
    expect(list.status).toBe(200);
    expect(list.json.volumes).toEqual([]);
    expect((await post("/volumes/get", { volume_id: "vol-none" })).status).toBe(404);
    expect(visible()).not.toContain("volumes");
    expect((await post("/volumes/create", { volume_id: "vol-first", name: "first", token: "f".repeat(32) })).status).toBe(200);
    expect(visible()).toContain("volumes");
    expect((await post("/volumes/delete", { volume_id: "vol-first" })).status).toBe(200);
  });

  it("create, list, get, delete; names are unique; a deleted volume is gone", async () => {
    const a = await post("/volumes/create", { volume_id: "vol-a", name: "alpha", token: "t".repeat(32) });
    expect(a.status).toBe(200);
    expect(a.json).toMatchObject({ volume_id: "vol-a", name: "alpha", token: "t".repeat(32) });
    expect((await post("/volumes/create", { volume_id: "vol-b", name: "alpha", token: "u".repeat(32) })).status).toBe(409);
    expect((await post("/volumes/create", { volume_id: "bad id!", name: "x", token: "u".repeat(32) })).json).toMatchObject({ field: "volume_id" });
    expect((await post("/volumes/list", {})).json.volumes.map((v: { name: string }) => v.name)).toContain("alpha");
    expect((await post("/volumes/get", { volume_id: "vol-a" })).json.name).toBe("alpha");
    expect((await post("/volumes/delete", { volume_id: "vol-a" })).status).toBe(200);
    expect((await post("/volumes/get", { volume_id: "vol-a" })).status).toBe(404);
    expect((await post("/volumes/delete", { volume_id: "vol-a" })).status).toBe(404);
  });

  it("content: write (force to replace), read byte for byte, mkdir (force for parents), list with depth, mode, remove; E2B's statuses", async () => {
    const id = "vol-content";
    expect((await post("/volumes/create", { volume_id: id, name: "content", token: "c".repeat(32) })).status).toBe(200);
    const data = randomBytes(300_000);
    const w = await put(id, "/blob.bin", data, "&mode=420");
    expect(w.status).toBe(200);
    expect(await w.json()).toMatchObject({ name: "blob.bin", path: "/blob.bin", type: "file", size: data.length, mode: 0o644 });
    expect(Buffer.from(await (await get(id, "/blob.bin")).arrayBuffer()).equals(data)).toBe(true);
    expect((await put(id, "/blob.bin", "again")).status).toBe(409);
    expect((await put(id, "/blob.bin", "again", "&force=true")).status).toBe(200);
    expect(await (await get(id, "blob.bin")).text()).toBe("again");
    expect((await put(id, "/no/parent.txt", "x")).status).toBe(404);
    expect((await post("/volumes/mkdir", { volume_id: id, path: "/a/b/c" })).status).toBe(404);
    const made = await post("/volumes/mkdir", { volume_id: id, path: "/a/b/c", force: true, mode: 0o750 });
    expect(made.json).toMatchObject({ type: "directory", path: "/a/b/c", mode: 0o750 });
    expect((await post("/volumes/mkdir", { volume_id: id, path: "/a/b/c" })).status).toBe(409);
    expect((await post("/volumes/mkdir", { volume_id: id, path: "/a/b/c", force: true })).status).toBe(200);
    expect((await post("/volumes/mkdir", { volume_id: id, path: "/blob.bin", force: true })).status).toBe(409);
    expect((await put(id, "/a/b/c/deep.txt", "deep")).status).toBe(200);
    const top = await post("/volumes/list-dir", { volume_id: id, path: "/" });
    expect(top.json.entries.map((e: { path: string }) => e.path)).toEqual(["/a", "/blob.bin"]);
    const all = await post("/volumes/list-dir", { volume_id: id, path: "/", depth: 4 });
    expect(all.json.entries.map((e: { path: string }) => e.path)).toEqual(["/a", "/a/b", "/a/b/c", "/a/b/c/deep.txt", "/blob.bin"]);
    expect((await post("/volumes/list-dir", { volume_id: id, path: "/missing" })).status).toBe(404);
    expect((await post("/volumes/chmeta", { volume_id: id, path: "/blob.bin", mode: 0o600 })).json.mode).toBe(0o600);
    expect((await post("/volumes/stat", { volume_id: id, path: "/a/b" })).json.type).toBe("directory");
    expect((await post("/volumes/remove", { volume_id: id, path: "/a" })).status).toBe(200);
    expect((await post("/volumes/stat", { volume_id: id, path: "/a" })).status).toBe(404);
    expect((await post("/volumes/remove", { volume_id: id, path: "/a" })).status).toBe(404);
    expect((await post("/volumes/remove", { volume_id: id, path: "/" })).status).toBe(404);
    // Above --max-file-mb (4 here): refused, and nothing of it is kept.
    const big = await put(id, "/big.bin", randomBytes(5 * 1024 * 1024));
    expect(big.status).toBe(413);
  });

  it("mounted into sessions: what one slot writes another reads and overwrites (each as its own uid); the API sees it; a slot without the mount does not; on disk it is the volume owner's", async () => {
    const id = "vol-shared";
    expect((await post("/volumes/create", { volume_id: id, name: "shared", token: "s".repeat(32) })).status).toBe(200);
    const mount = [{ volume_id: id, path: "/mnt/data" }];
    const w = await run("slot_0", "echo from-slot-0 > /mnt/data/note.txt && mkdir -p /mnt/data/dir && id -u", mount);
    expect(w.code).toBe(0);
    const r = await run("slot_1", "cat /mnt/data/note.txt && echo slot-1-was-here >> /mnt/data/note.txt && touch /mnt/data/dir/x && stat -c %U /mnt/data/note.txt && id -u", mount);
    expect(r.code, r.out).toBe(0);
    const [line, owner, uid1] = r.out.trim().split("\n");
    expect(line).toBe("from-slot-0");
    // Each slot sees the files as its own (E2B's `user`, the session's uid), whoever wrote them.
    expect(owner).toBe("sandbox");
    if (isRoot) expect(uid1).not.toBe(w.out.trim());
    expect(await (await get(id, "/note.txt")).text()).toBe("from-slot-0\nslot-1-was-here\n");
    // slot_2 did not mount it: nothing at /mnt/data.
    expect((await run("slot_2", "ls /mnt/data 2>&1 || echo absent")).out).toContain("absent");
    if (isRoot) {
      // On disk every file is the volume owner's (19999 by default), never a slot's.
      const dir = join(s.dataDir, "volumes", id);
      for (const f of ["note.txt", "dir", "dir/x"]) expect(lstatSync(join(dir, f)).uid).toBe(19_999);
    }
    // A reset releases the slot's view; the files stay.
    for (const slot of ["slot_0", "slot_1"]) expect((await post("/reset", { slot_id: slot })).status).toBe(200);
    if (isRoot) expect(readdirSync(join(s.dataDir, ".slotpool", "volume-views", "slot_0"))).toEqual([]);
    expect(await (await get(id, "/note.txt")).text()).toContain("slot-1-was-here");
    const again = await run("slot_0", "cat /mnt/data/note.txt", mount);
    expect(again.out).toContain("slot-1-was-here");
    expect((await post("/reset", { slot_id: "slot_0" })).status).toBe(200);
    // Mount paths over system directories, /tmp or the workspace are refused, naming the field.
    const bad = await fetch(s.url + "/processes/start", { method: "POST", headers: { "content-type": "application/json", ...auth }, body: JSON.stringify({ slot_id: "slot_0", cmd: "true", volumes: [{ volume_id: id, path: "/etc/x" }] }) });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ field: "volumes.0.path" });
    const unknown = await fetch(s.url + "/processes/start", { method: "POST", headers: { "content-type": "application/json", ...auth }, body: JSON.stringify({ slot_id: "slot_0", cmd: "true", volumes: [{ volume_id: "nope", path: "/mnt/x" }] }) });
    expect(unknown.status).toBe(404);
  }, 120_000);

  it("the content routes never follow a slot's symlink out of the volume", async () => {
    const id = "vol-links";
    expect((await post("/volumes/create", { volume_id: id, name: "links", token: "l".repeat(32) })).status).toBe(200);
    const planted = await run("slot_2", "ln -s /etc/passwd /mnt/v/passwd && ln -s /etc /mnt/v/etc && ln -s inside.txt /mnt/v/ok && echo fine > /mnt/v/inside.txt", [{ volume_id: id, path: "/mnt/v" }]);
    expect(planted.code, planted.out).toBe(0);
    const read = await get(id, "/passwd");
    expect(read.status).toBe(400);
    expect(await read.text()).not.toContain("root:");
    expect((await put(id, "/etc/evil", "x")).status).toBe(400);
    expect((await post("/volumes/mkdir", { volume_id: id, path: "/etc/evil", force: true })).status).toBe(400);
    // A link inside the volume is followed (to a file of the volume).
    expect(await (await get(id, "/ok")).text()).toBe("fine\n");
    // Listings show links as links.
    const entries = (await post("/volumes/list-dir", { volume_id: id, path: "/" })).json.entries as Array<{ name: string; type: string; target?: string }>;
    expect(entries.find((e) => e.name === "passwd")).toMatchObject({ type: "symlink", target: "/etc/passwd" });
    expect((await post("/reset", { slot_id: "slot_2" })).status).toBe(200);
  }, 60_000);
});
