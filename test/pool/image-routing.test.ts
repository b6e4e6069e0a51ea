import { afterEach, describe, expect, it } from "vitest";
import { ImageReferenceError, ImageUnavailableError } from "../../src/pool/errors.js";
import { ImageAffinity } from "../../src/pool/image-affinity.js";
import { ContainerRecord } from "../../src/pool/records.js";
import type { SandboxClientLike } from "../../src/pool/sandbox-client.js";
import { SlotPlacement } from "../../src/pool/slot-placement.js";
import { SlotPool, type SlotPoolOptions } from "../../src/pool/slot-pool.js";
import { TemplateAffinity } from "../../src/pool/template-affinity.js";
import type { LeasedSlot } from "../../src/pool/types.js";
import { MemoryProvisioner, memoryImageDigest } from "./support/memory-provisioner.js";

/**
 * Image routing (issue 36): the pool sends a trajectory to a container that holds its task
 * image when one has a free slot, else anywhere (that container fetches it); it knows what a
 * container holds from its own resets and from /health; an image a container cannot get is an
 * ImageUnavailableError naming the reason; a reference that cannot name an image is refused
 * before any slot is held. On the in-memory provisioner, whose server double keeps a store of
 * images per container (test/pool/support/memory-provisioner.ts).
 */
const pools: SlotPool[] = [];
afterEach(async () => {
  for (const p of pools.splice(0)) await p.stop();
});

const X = "registry.test:5000/tasks/x:1";
const Y = "registry.test:5000/tasks/y:1";

function makePool(config: Partial<SlotPoolOptions> = {}): { pool: SlotPool; provisioner: MemoryProvisioner } {
  const provisioner = new MemoryProvisioner({ slots: config.slotsPerContainer ?? 2 });
  const pool = new SlotPool({ slotsPerContainer: 2, minContainers: 2, maxContainers: 2, tickMs: 20, ...config, provisioner, createClient: provisioner.clientFactory });
  pools.push(pool);
  return { pool, provisioner };
}

/** The container index a lease is on. */
const indexOf = (slot: LeasedSlot) => slot.container.index;

describe("image routing through the pool", () => {
  it("a trajectory goes to the container that holds its image when it has a free slot; a new image goes where packing puts it, and is fetched there", async () => {
    const { pool, provisioner } = makePool();
    await pool.start();
    // Container 0 full: the first trajectory of X lands on container 1, which fetches X.
    const a = await pool.acquire({ trajectoryId: "a" });
    const b = await pool.acquire({ trajectoryId: "b" });
    const c = await pool.acquire({ trajectoryId: "c", image: X });
    expect([indexOf(a), indexOf(b), indexOf(c)]).toEqual([0, 0, 1]);
    const res = await pool.useTemplate(c, { name: "x", image: X });
    expect(res.image?.digest).toBe(memoryImageDigest(X));
    expect(res.image?.fetched).toBeDefined();
    await Promise.all([a, b, c].map((s) => pool.release(s)));

    // Packing alone would pick container 0; X's next trajectory goes to container 1, where X is.
    const d = await pool.acquire({ trajectoryId: "d", image: X });
    expect(indexOf(d)).toBe(1);
    const again = await pool.useTemplate(d, { name: "x", image: X });
    expect(again.image?.fetched).toBeUndefined();
    const fetchesOn1 = provisioner.running.get(1)!.imageFetches;
    expect(fetchesOn1).toBe(1);
    // A plain trajectory and a new image pack as before.
    const e = await pool.acquire({ trajectoryId: "e" });
    const f = await pool.acquire({ trajectoryId: "f", image: Y });
    expect([indexOf(e), indexOf(f)]).toEqual([0, 0]);
    await pool.useTemplate(f, { name: "y", image: Y });
    expect(provisioner.running.get(0)!.imageFetches).toBe(1);

    expect(pool.images.pulls).toBe(2);
    expect(pool.images.hits).toBe(1);
    expect(pool.images.holders(X)).toEqual([d.container.id]);
    expect(pool.images.used()).toEqual([
      { image: X, resets: 2, digest: memoryImageDigest(X) },
      { image: Y, resets: 1, digest: memoryImageDigest(Y) },
    ]);
    expect(pool.images.fetches.map((f) => [f.image, f.containerId])).toEqual([
      [X, c.container.id],
      [Y, f.container.id],
    ]);
  });

  it("one image, many spellings: python:3.12 and docker.io/library/python:3.12 route alike", async () => {
    const { pool } = makePool();
    await pool.start();
    const a = await pool.acquire({ trajectoryId: "a" });
    const b = await pool.acquire({ trajectoryId: "b" });
    const c = await pool.acquire({ trajectoryId: "c", image: "python:3.12" });
    await pool.useTemplate(c, { name: "py", image: "python:3.12" });
    await Promise.all([a, b, c].map((s) => pool.release(s)));
    const d = await pool.acquire({ trajectoryId: "d", image: "docker.io/library/python:3.12" });
    expect(indexOf(d)).toBe(1);
  });

  it("learns what a container holds from its /health, and forgets an image the server evicted", async () => {
    const { pool, provisioner } = makePool({ healthIntervalMs: 20 });
    await pool.start();
    // Fetched on container 1 outside this pool (POST /images, another client): only /health tells.
    provisioner.running.get(1)!.images.set(X, memoryImageDigest(X));
    const c1 = provisioner.running.get(1)!.info.id;
    // Polls the pool's record, which the periodic checks (every 20 ms) update; no fixed wait.
    await until(() => pool.images.holders(X).includes(c1));
    const a = await pool.acquire({ trajectoryId: "a", image: X });
    expect(indexOf(a)).toBe(1);
    await pool.release(a);
    provisioner.running.get(1)!.images.delete(X); // the server's budget evicted it
    await until(() => pool.images.holders(X).length === 0);
    const b = await pool.acquire({ trajectoryId: "b", image: X });
    expect(indexOf(b)).toBe(0);
  });

  it("an image the container cannot get rejects with ImageUnavailableError naming the reason; the slot is left as it was and the pool goes on", async () => {
    const { pool } = makePool();
    await pool.start();
    const slot = await pool.acquire({ trajectoryId: "t", image: "registry.test:5000/missing:1" });
    await slot.execute({ tool: "write_file", args: { path: "kept.txt", content: "still here" } });
    const err = await pool.useTemplate(slot, { name: "m", image: "registry.test:5000/missing:1" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ImageUnavailableError);
    expect((err as ImageUnavailableError).reason).toBe("not_found");
    expect((err as ImageUnavailableError).code).toBe("IMAGE_UNAVAILABLE");
    expect((err as Error).message).toContain("registry.test:5000/missing:1");
    expect((await slot.execute({ tool: "read_file", args: { path: "kept.txt" } })).output).toBe("still here");
    const full = await pool.useTemplate(slot, { name: "h", image: "registry.test:5000/huge:1" }).catch((e: unknown) => e);
    expect((full as ImageUnavailableError).reason).toBe("store_full");
    expect(Object.fromEntries(pool.images.failures)).toEqual({ not_found: 1, store_full: 1 });
    expect(pool.images.holders("registry.test:5000/missing:1")).toEqual([]);
    await pool.release(slot);
    expect(pool.stats().slots).toMatchObject({ free: 4, lost: 0 });
  });

  it("a reference that cannot name an image is refused at acquire, naming it, before any slot is held", async () => {
    const { pool } = makePool();
    await pool.start();
    for (const bad of ["Registry.test/UPPER:1", "dir:/tmp/x", "oci:relative/dir", "busybox:bad tag"]) {
      const err = await pool.acquire({ trajectoryId: "t", image: bad }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ImageReferenceError);
      expect((err as Error).message).toContain(JSON.stringify(bad));
    }
    expect(pool.stats().slots.held).toBe(0);
  });
});

describe("a slot left in its image", () => {
  it("a released slot stays in its image: the next trajectory of that image takes it with no reset of its own; a plain one prefers a plain slot, else resets first", async () => {
    const { pool, provisioner } = makePool({ minContainers: 1, maxContainers: 1 });
    await pool.start();
    const c = provisioner.running.get(0)!;
    const a = await pool.acquire({ trajectoryId: "a", image: X });
    await pool.useTemplate(a, { name: "x", image: X });
    await a.execute({ tool: "write_file", args: { path: "mine.txt", content: "a's" } });
    await pool.release(a);
    // The release reset kept the image and dropped what `a` wrote.
    expect(c.roots.get(a.slotId)).toBe(X);
    expect(c.files.get(a.slotId)).toBeUndefined();
    const resets = c.resets;
    const b = await pool.acquire({ trajectoryId: "b", image: X });
    expect(b.slotId).toBe(a.slotId);
    const ready = await pool.useTemplate(b, { name: "x", image: X });
    expect(c.resets).toBe(resets); // no reset of its own
    expect(ready).toMatchObject({ success: true, image: { reference: X, digest: memoryImageDigest(X) } });
    expect(ready.image?.fetched).toBeUndefined();
    // A plain trajectory meanwhile: the other slot, whose root is the server's own system.
    const p1 = await pool.acquire({ trajectoryId: "p1" });
    expect(p1.slotId).not.toBe(a.slotId);
    await pool.release(b);
    // Only the image's slot is free now: a plain trajectory takes it and it is reset before its first call.
    const p2 = await pool.acquire({ trajectoryId: "p2" });
    expect(p2.slotId).toBe(a.slotId);
    expect(c.roots.get(p2.slotId)).toBe(X);
    await p2.execute({ tool: "write_file", args: { path: "p2.txt", content: "plain" } });
    expect(c.roots.has(p2.slotId)).toBe(false);
    expect(c.resets).toBe(resets + 2); // b's release (back into X), then p2's plain reset
    // Used since: a trajectory of X on this slot would reset it again (not "fresh").
    await Promise.all([pool.release(p1), pool.release(p2)]);
    expect(pool.stats().slots).toMatchObject({ free: 2, held: 0, lost: 0 });
  });

  it("a store full of images that only idle slots hold lets them go (those slots reset plain) and fetches the new image", async () => {
    const { pool, provisioner } = makePool({ minContainers: 1, maxContainers: 1 });
    await pool.start();
    const c = provisioner.running.get(0)!;
    c.imageCapacity = 1;
    const a = await pool.acquire({ trajectoryId: "a", image: X });
    await pool.useTemplate(a, { name: "x", image: X });
    await pool.release(a); // slot left in X: X is in use, the store is full
    const b = await pool.acquire({ trajectoryId: "b", image: Y });
    expect(b.slotId).not.toBe(a.slotId);
    const res = await pool.useTemplate(b, { name: "y", image: Y });
    expect(res.image?.reference).toBe(Y);
    expect(c.roots.get(a.slotId)).toBeUndefined(); // let go: plain now
    expect([...c.images.keys()]).toEqual([Y]);
    await pool.release(b);
    expect(pool.stats().slots).toMatchObject({ free: 2, held: 0, lost: 0 });
  });
});

describe("slot placement", () => {
  const client = {} as SandboxClientLike;
  const container = (index: number, free: number) => {
    const c = new ContainerRecord({ id: `c${index}`, index, url: "http://x.invalid", slots: 2 }, client);
    c.initSlots(2);
    c.free.splice(0, c.free.length - free);
    c.state = "ready";
    return c;
  };

  it("prefers the template's container, then the image's, then packing; a full container is never preferred", () => {
    const containers = [container(0, 2), container(1, 2), container(2, 2)];
    const templates = new TemplateAffinity();
    const images = new ImageAffinity();
    // What each container holds, as its /health says.
    images.observe("c1", { status: "ok", slots: 2, bwrap_available: true, images: { available: true, cached: [{ reference: X, digest: "d", size_bytes: 1, in_use: 0 }], used_bytes: 1, budget_bytes: 1 } });
    (templates as unknown as { held: Map<string, Map<string, string>> }).held.set("c2", new Map([["repo", "h"]]));
    const placement = new SlotPlacement({ containers: () => containers, templates, images }, 30_000);
    expect(placement.take({ image: X })?.container.index).toBe(1);
    expect(placement.take({ template: "repo", image: X })?.container.index).toBe(2);
    expect(placement.take({})?.container.index).toBe(0);
    // c1 now has one free slot left; take it, then X has no free holder: packing.
    expect(placement.take({ image: X })?.container.index).toBe(1);
    expect(placement.take({ image: X })?.container.index).toBe(0);
  });
});

async function until(cond: () => boolean): Promise<void> {
  // Bounded only by the test's own timeout: the condition is the event awaited.
  while (!cond()) await new Promise((r) => setTimeout(r, 5));
}
