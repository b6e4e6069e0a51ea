import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot } from "./helpers.js";
import { busyboxImage, noBashImage } from "../support/test-images.js";
import { call, imageFixture, imagesMissing, sh, type ImageFixture } from "../support/image-server.js";

/**
 * A template may name an image (issue 36): its files and setup apply on top of the image,
 * built once per container (as slot_0 would run it), and a reset into the template gives the
 * slot the image with the template's layer between the image and the slot's own changes.
 */
describe.skipIf(imagesMissing !== undefined)(`templates on an image${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let f: ImageFixture;

  beforeAll(async () => {
    f = await imageFixture({ busybox: busyboxImage(), nobash: noBashImage() }, { slots: 4 });
  }, 240_000);
  afterAll(async () => {
    await f?.stop();
  });

  const build = (body: Record<string, unknown>) => f.server.post("/templates", body);
  const reset = (slot: number, template: string) => f.server.post("/reset", { slot_id: `slot_${slot}`, template });

  it("builds the files and setup on the image, once, and a reset into it is the image with those changes", async () => {
    const body = { name: "task-a", image: f.refs.busybox, files: { "a.txt": "from the template\n", "sub/b.txt": "nested\n" }, setup: ["echo built > /etc/built", "rm /data/b.txt", "id -u > /whoami", "cat a.txt > copied.txt"] };
    const r = await build(body);
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({ success: true, built: true, template: { name: "task-a", image: { reference: f.refs.busybox } } });
    expect((await build(body)).json.built).toBe(false);
    const into = await reset(1, "task-a");
    expect(into.status).toBe(200);
    expect(into.json.image).toMatchObject({ reference: f.refs.busybox, runtime: { working_dir: "/srv/work" } });
    expect(await sh(f.server, 1, "pwd; cat a.txt sub/b.txt copied.txt /etc/built /whoami; test -e /data/b.txt && echo b || echo no-b; cat /data/a.txt")).toBe("/srv/work\nfrom the template\nnested\nfrom the template\nbuilt\n0\nno-b\nlinked");
    expect((await f.server.get("/health")).json.slot_images[1]).toMatchObject({ reference: f.refs.busybox });
  });

  it("every path stays writable, a reset drops the slot's changes and keeps the template's, two slots on it are apart", async () => {
    await reset(1, "task-a");
    await reset(2, "task-a");
    await sh(f.server, 1, "echo mine > /etc/built; rm /srv/work/a.txt; echo x > /new");
    expect(await sh(f.server, 2, "cat /etc/built /srv/work/a.txt; test -e /new && echo new || echo no-new")).toBe("built\nfrom the template\nno-new");
    await reset(1, "task-a");
    expect(await sh(f.server, 1, "cat /etc/built /srv/work/a.txt; test -e /new && echo new || echo no-new")).toBe("built\nfrom the template\nno-new");
  });

  it("on an image whose User is app, the build runs as app and each slot sees the files as its own app's", async () => {
    const r = await build({ name: "task-app", image: f.refs.nobash, setup: ["echo made > made.txt", "id -u"] });
    expect(r.json).toMatchObject({ success: true });
    expect(r.json.output).toContain(isRoot ? "1000" : "0");
    await reset(3, "task-app");
    expect(await sh(f.server, 3, "pwd; cat made.txt; stat -c '%u' made.txt; echo more >> made.txt && echo appended")).toBe(`/home/app\nmade\n${isRoot ? 1000 : 0}\nappended`);
  });

  it("a fork of a slot on a template carries the template and the parent's changes", async () => {
    await reset(0, "task-a");
    await sh(f.server, 0, "echo parent >> /srv/work/a.txt");
    const fork = await f.server.post("/fork", { slot_id: "slot_0", into: ["slot_3"] });
    expect(fork.status).toBe(200);
    expect(await sh(f.server, 3, "cat /srv/work/a.txt /etc/built")).toBe("from the template\nparent\nbuilt");
  });

  it("a template on an image the server cannot get is image_unavailable, and a failing setup names its step", async () => {
    const missing = await build({ name: "task-missing", image: `${f.registry.host}/nope:1`, setup: ["true"] });
    expect(missing.status).toBe(404);
    expect(missing.json).toMatchObject({ code: "image_unavailable", reason: "not_found" });
    const bad = await build({ name: "task-bad", image: f.refs.busybox, setup: ["true", "exit 3"] });
    expect(bad.json).toMatchObject({ success: false });
    expect(bad.json.error).toMatch(/setup\[1\] `exit 3` exited 3/);
    expect((await call(f.server, 0, "bash", { command: "true" })).success).toBe(true);
  });
});
