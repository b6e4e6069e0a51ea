import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, SandboxError, ServiceBusyError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { E2bServer } from "../../src/e2b/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { imagesMissing } from "../support/image-server.js";
import { pushImage, startRegistry, type TestRegistry } from "../support/registry.js";
import { busyboxImage } from "../support/test-images.js";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * E2B's snapshots through the real `e2b` JS SDK: `createSnapshot` captures a sandbox's files as
 * a template on its container (the sandbox goes on), `Sandbox.create(snapshotId)` makes
 * sandboxes with those files (each its own copy), `listSnapshots` lists them (all, one
 * sandbox's, by name), `deleteSnapshot` drops one (true, then false). What a snapshot keeps is
 * files: the processes of the sandbox are not in it.
 */
describe("E2B snapshots (plain sandboxes)", () => {
  let h: E2bHarness;
  beforeAll(async () => {
    h = await startE2b({ slots: 4 });
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("a snapshot keeps the sandbox's files, not its processes; sandboxes made of it each get their own copy; the source goes on", async () => {
    const src = await Sandbox.create(h.opts);
    try {
      await src.files.makeDir("/home/user/app");
      await src.files.write("/home/user/app/config.json", '{"env":"test"}');
      const bg = await src.commands.run("sleep 600", { background: true });
      const snap = await src.createSnapshot();
      expect(snap.snapshotId).toMatch(/^snap-[0-9a-f]{16}$/);
      // The source runs on after the capture, its background command too.
      await src.commands.run("echo after > /home/user/after.txt");
      expect((await src.commands.list()).map((p) => p.pid)).toContain(bg.pid);

      const [a, b] = await Promise.all([Sandbox.create(snap.snapshotId, h.opts), Sandbox.create(snap.snapshotId, h.opts)]);
      try {
        expect(await a.files.read("/home/user/app/config.json")).toBe('{"env":"test"}');
        // What the source wrote after the snapshot is not in it; its processes are not either.
        expect((await a.commands.run("cat /home/user/after.txt 2>/dev/null || echo absent")).stdout).toBe("absent\n");
        expect(await a.commands.list()).toEqual([]);
        await a.files.write("/home/user/app/config.json", "changed in a");
        expect(await b.files.read("/home/user/app/config.json")).toBe('{"env":"test"}');
        expect(await src.files.read("/home/user/app/config.json")).toBe('{"env":"test"}');
        expect((await a.getInfo()).templateId).toBe(snap.snapshotId);
      } finally {
        await Promise.all([a.kill(), b.kill()]);
      }
      expect(await Sandbox.deleteSnapshot(snap.snapshotId, h.opts)).toBe(true);
      expect(await Sandbox.deleteSnapshot(snap.snapshotId, h.opts)).toBe(false);
      // A deleted snapshot is no template any more: create answers E2B's 404.
      await expect(Sandbox.create(snap.snapshotId, h.opts)).rejects.toThrow(/not found/);
    } finally {
      await src.kill();
    }
  }, 180_000);

  it("a snapshot outlives its sandbox; lists: all, one sandbox's, by name; a name taken again replaces the snapshot", async () => {
    const one = await Sandbox.create(h.opts);
    const two = await Sandbox.create(h.opts);
    let named = "";
    let other = "";
    try {
      await one.files.write("/home/user/v.txt", "v1");
      const first = await one.createSnapshot({ name: "my-snap" });
      expect(first).toEqual({ snapshotId: "my-snap", names: ["my-snap"] });
      named = first.snapshotId;
      other = (await two.createSnapshot()).snapshotId;

      const all = await Sandbox.listSnapshots(h.opts).nextItems();
      expect(all.map((s) => s.snapshotId).sort()).toEqual([named, other].sort());
      expect((await one.listSnapshots().nextItems()).map((s) => s.snapshotId)).toEqual([named]);
      expect((await Sandbox.listSnapshots({ ...h.opts, name: "my-snap" }).nextItems()).map((s) => s.snapshotId)).toEqual([named]);
      expect(await Sandbox.listSnapshots({ ...h.opts, name: "no-such-snap" }).nextItems()).toEqual([]);
      // Pages of one.
      const pager = Sandbox.listSnapshots({ ...h.opts, limit: 1 });
      const page1 = await pager.nextItems();
      expect(pager.hasNext).toBe(true);
      const page2 = await pager.nextItems();
      expect([...page1, ...page2].map((s) => s.snapshotId).sort()).toEqual([named, other].sort());
      expect(pager.hasNext).toBe(false);

      await one.files.write("/home/user/v.txt", "v2");
      await one.createSnapshot({ name: "my-snap" });
    } finally {
      await one.kill();
      await two.kill();
    }
    // Both sandboxes are gone; their snapshots are not.
    const again = await Sandbox.create(named, h.opts);
    try {
      expect(await again.files.read("/home/user/v.txt")).toBe("v2");
    } finally {
      await again.kill();
    }
    expect(await Sandbox.deleteSnapshot(named, h.opts)).toBe(true);
    expect(await Sandbox.deleteSnapshot(other, h.opts)).toBe(true);
    expect(await Sandbox.listSnapshots(h.opts).nextItems()).toEqual([]);
  }, 180_000);

  it("bad names and unknown sandboxes are refused by name; a template of the server cannot be deleted", async () => {
    const s = await Sandbox.create(h.opts);
    try {
      await expect(s.createSnapshot({ name: "../etc" })).rejects.toThrow(/name: a snapshot name is 1-64 letters/);
      await expect(s.createSnapshot({ name: "base" })).rejects.toThrow(/'base' is a template of this server/);
    } finally {
      await s.kill();
    }
    await expect(Sandbox.createSnapshot("sp-no-such-sandbox", h.opts)).rejects.toThrow(/not found/);
    await expect(Sandbox.deleteSnapshot("base", h.opts)).rejects.toBeInstanceOf(SandboxError);
    const bad = await fetch(`${h.url}/snapshots?limit=0`, { headers: { "x-api-key": h.apiKey } });
    expect([bad.status, ((await bad.json()) as { message: string }).message]).toEqual([400, "limit must be a whole number from 1 to 100"]);
  }, 120_000);
});

describe("E2B snapshots live on one container", () => {
  // Two containers of one slot each: which container a sandbox lands on is the test's to choose.
  const baseDir = mkdtempSync(join(tmpdir(), "slotpool-e2b-snap-"));
  chmodSync(baseDir, 0o755);
  const pool = new SlotPool({ provisioner: new LocalProvisioner({ slotsPerContainer: 1, baseDir }), slotsPerContainer: 1, minContainers: 2, maxContainers: 2 });
  const apiKey = "e2b_test_key_" + Math.random().toString(36).slice(2);
  const server = new E2bServer({ pool, apiKey });
  let opts = { apiUrl: "", sandboxUrl: "", apiKey };
  beforeAll(async () => {
    await pool.start();
    const url = await server.listen(0, "127.0.0.1");
    opts = { apiUrl: url, sandboxUrl: url, apiKey };
  }, 120_000);
  afterAll(async () => {
    await server.close();
    await pool.stop({ purge: true });
    rmSync(baseDir, { recursive: true, force: true });
  });

  it("a sandbox from a snapshot gets a slot of the snapshot's container, or a 503 while that container has none free", async () => {
    const src = await Sandbox.create(opts);
    await src.files.write("/home/user/here.txt", "on the first container");
    const snap = await src.createSnapshot();
    // The source holds its container's one slot: the other container's slot has not the files.
    const busy = await Sandbox.create(snap.snapshotId, opts).catch((e: unknown) => e);
    // The SDK's error for E2B's 503 (no capacity to place the sandbox now).
    expect(busy).toBeInstanceOf(ServiceBusyError);
    expect((busy as Error).message).toMatch(/snapshot '.*' lives on container .*, which has no free slot now/);
    // That slot was given back: a plain sandbox gets it.
    const other = await Sandbox.create(opts);
    expect(server.registry.get(other.sandboxId)!.slot.container.id).not.toBe(server.registry.get(src.sandboxId)!.slot.container.id);
    await other.kill();
    await src.kill();
    const made = await Sandbox.create(snap.snapshotId, opts);
    try {
      expect(await made.files.read("/home/user/here.txt")).toBe("on the first container");
    } finally {
      await made.kill();
    }
    expect(pool.stats().slots).toMatchObject({ held: 0, lost: 0 });
  }, 180_000);
});

describe.skipIf(imagesMissing !== undefined)(`E2B snapshots of a sandbox from a task image${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let registry: TestRegistry;
  let h: E2bHarness;
  let ref = "";
  beforeAll(async () => {
    registry = await startRegistry();
    ref = await pushImage(busyboxImage(), registry.host, "e2b/busybox:snap");
    h = await startE2b({ slots: 3, sandboxServerArgs: ["--insecure-registry", registry.host] });
  }, 300_000);
  afterAll(async () => {
    await h?.stop();
    await registry?.stop();
  });

  it("keeps every change to the image (root's writes outside the home, a deleted file), the image's WorkingDir with it", async () => {
    const src = await Sandbox.create(ref, h.opts);
    try {
      await src.commands.run("mkdir /solution && echo answer > /solution/out.txt && rm /data/a.txt", { user: "root" });
      const snap = await src.createSnapshot();
      const made = await Sandbox.create(snap.snapshotId, h.opts);
      try {
        const r = await made.commands.run("pwd; cat /solution/out.txt; ls /data/a.txt 2>&1 || echo deleted");
        expect(r.stdout).toMatch(/^\/srv\/work\nanswer\n.*deleted\n$/s);
      } finally {
        await made.kill();
      }
      expect(await Sandbox.deleteSnapshot(snap.snapshotId, h.opts)).toBe(true);
    } finally {
      await src.kill();
    }
  }, 180_000);
});
