import { randomBytes } from "node:crypto";
import { Sandbox, SandboxError, Volume, VolumeError, VolumeFileType, VolumeNotFoundError, VolumePathNotFoundError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * E2B's `Volume` through the real JS SDK against slotpool: named persistent storage kept by
 * the sandbox servers (the pool's shared volumes directory), its content API (opened by the
 * volume's token, at E2B_VOLUME_API_URL), and `Sandbox.create({ volumeMounts })`: what one
 * sandbox writes, a later sandbox (on another slot) reads and changes, and so does the API.
 */

describe("E2B volumes through the SDK", () => {
  let h: E2bHarness;
  beforeAll(async () => {
    h = await startE2b({ slots: 4 });
    // The SDK's volume content client reads E2B_VOLUME_API_URL (else https://api.<domain>): docs/e2b.md.
    process.env["E2B_VOLUME_API_URL"] = h.url;
  }, 120_000);
  afterAll(async () => {
    delete process.env["E2B_VOLUME_API_URL"];
    await h?.stop();
  });

  it("create, list, getInfo, connect, destroy: E2B's answers and errors", async () => {
    const vol = await Volume.create("vol-crud", h.opts);
    expect(vol.volumeId).toMatch(/^[0-9a-f-]{36}$/);
    expect(vol.name).toBe("vol-crud");
    expect(vol.token.length).toBeGreaterThan(16);
    expect((await Volume.list(h.opts)).map((v) => v.name)).toContain("vol-crud");
    const info = await Volume.getInfo(vol.volumeId, h.opts);
    expect(info).toMatchObject({ volumeId: vol.volumeId, name: "vol-crud", token: vol.token });
    expect((await Volume.connect(vol.volumeId, h.opts)).token).toBe(vol.token);
    await expect(Volume.create("vol-crud", h.opts)).rejects.toBeInstanceOf(VolumeError);
    await expect(Volume.getInfo("no-such-volume", h.opts)).rejects.toBeInstanceOf(VolumeNotFoundError);
    expect(await Volume.destroy(vol.volumeId, h.opts)).toBe(true);
    expect(await Volume.destroy(vol.volumeId, h.opts)).toBe(false);
  });

  it("the content API: write and read (text, bytes, stream), force to replace, makeDir, list, exists, getInfo, updateMetadata, remove; a wrong token is refused", async () => {
    const vol = await Volume.create("vol-content", h.opts);
    try {
      const stat = await vol.writeFile("/hello.txt", "hello volume");
      expect(stat).toMatchObject({ name: "hello.txt", path: "/hello.txt", type: VolumeFileType.FILE, size: 12 });
      expect(stat.mtime).toBeInstanceOf(Date);
      expect(await vol.readFile("/hello.txt")).toBe("hello volume");
      const bin = randomBytes(2 * 1024 * 1024);
      await vol.writeFile("/data.bin", new Blob([bin]));
      expect(Buffer.from(await vol.readFile("/data.bin", { format: "bytes" })).equals(bin)).toBe(true);
      const stream = await vol.readFile("/data.bin", { format: "stream" });
      let n = 0;
      for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) n += chunk.length;
      expect(n).toBe(bin.length);
      await expect(vol.writeFile("/hello.txt", "again", { force: false })).rejects.toBeInstanceOf(VolumeError);
      await vol.writeFile("/hello.txt", "replaced", { force: true });
      expect(await vol.readFile("/hello.txt")).toBe("replaced");
      await expect(vol.makeDir("/a/b")).rejects.toBeInstanceOf(VolumePathNotFoundError);
      expect((await vol.makeDir("/a/b", { force: true })).type).toBe(VolumeFileType.DIRECTORY);
      await expect(vol.makeDir("/a/b", { force: false })).rejects.toBeInstanceOf(VolumeError);
      await vol.writeFile("/a/b/deep.txt", "deep");
      expect((await vol.list("/")).map((e) => e.name).sort()).toEqual(["a", "data.bin", "hello.txt"]);
      expect((await vol.list("/a", { depth: 3 })).map((e) => e.path)).toEqual(["/a/b", "/a/b/deep.txt"]);
      await expect(vol.list("/missing")).rejects.toBeInstanceOf(VolumePathNotFoundError);
      expect(await vol.exists("/a/b/deep.txt")).toBe(true);
      expect(await vol.exists("/nope")).toBe(false);
      expect((await vol.getInfo("/a")).type).toBe(VolumeFileType.DIRECTORY);
      expect((await vol.updateMetadata("/hello.txt", { mode: 0o600 })).mode).toBe(0o600);
      await vol.remove("/a");
      expect(await vol.exists("/a")).toBe(false);
      await expect(vol.remove("/a")).rejects.toBeInstanceOf(VolumePathNotFoundError);
      // The content API opens with this volume's token only.
      const stranger = new Volume(vol.volumeId, vol.name, "not-the-token", undefined, false);
      await expect(stranger.readFile("/hello.txt")).rejects.toBeInstanceOf(VolumeError);
      const raw = await fetch(`${h.url}/volumecontent/${vol.volumeId}/file?path=/hello.txt`);
      expect(raw.status).toBe(401);
    } finally {
      await Volume.destroy(vol.volumeId, h.opts);
    }
  });

  it("volumeMounts: a sandbox's writes persist for the next sandbox (another slot), which changes them; the API sees both; two sandboxes share it live", async () => {
    const vol = await Volume.create("vol-mounted", h.opts);
    try {
      const writer = await Sandbox.create({ ...h.opts, volumeMounts: { "/mnt/data": vol } });
      await writer.files.write("/mnt/data/hello.txt", "written by the writer");
      await writer.commands.run("mkdir -p /mnt/data/logs && echo run-1 > /mnt/data/logs/run.log");
      expect((await writer.getInfo()).volumeMounts).toEqual([{ name: "vol-mounted", path: "/mnt/data" }]);
      // While mounted it cannot be destroyed.
      await expect(Volume.destroy(vol.volumeId, h.opts)).rejects.toBeInstanceOf(VolumeError);
      const other = await Sandbox.create({ ...h.opts, volumeMounts: { "/data": vol.name } });
      // Live: the second sandbox sees the first one's file and appends to it; the first sees that.
      await other.commands.run("echo run-2 >> /data/logs/run.log");
      expect((await writer.commands.run("cat /mnt/data/logs/run.log")).stdout).toBe("run-1\nrun-2\n");
      await Promise.all([writer.kill(), other.kill()]);

      const reader = await Sandbox.create({ ...h.opts, volumeMounts: { "/mnt/data": vol } });
      try {
        expect(await reader.files.read("/mnt/data/hello.txt")).toBe("written by the writer");
        await reader.files.write("/mnt/data/hello.txt", "changed by the reader");
        expect((await reader.files.list("/mnt/data")).map((e) => e.name).sort()).toEqual(["hello.txt", "logs"]);
      } finally {
        await reader.kill();
      }
      expect(await vol.readFile("/hello.txt")).toBe("changed by the reader");
      await vol.writeFile("/from-api.txt", "api");
      const last = await Sandbox.create({ ...h.opts, volumeMounts: { "/mnt/data": vol } });
      expect((await last.commands.run("cat /mnt/data/from-api.txt")).stdout).toBe("api");
      await last.kill();
      // Without the mount, nothing is there.
      const plain = await Sandbox.create({ ...h.opts });
      expect((await plain.commands.run("ls /mnt/data 2>/dev/null || echo absent")).stdout).toBe("absent\n");
      await plain.kill();
      await expect(Sandbox.create({ ...h.opts, volumeMounts: { "/mnt/x": "no-such-volume" } })).rejects.toBeInstanceOf(SandboxError);
      await expect(Sandbox.create({ ...h.opts, volumeMounts: { "/etc/x": vol } })).rejects.toBeInstanceOf(SandboxError);
    } finally {
      await Volume.destroy(vol.volumeId, h.opts);
    }
  }, 120_000);
});
