import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, readEvents, startServer, type TestServer } from "./helpers.js";
import { busyboxImage } from "../support/test-images.js";
import { imageFixture, imagesMissing, resetInto, sh, type ImageFixture } from "../support/image-server.js";

/**
 * A template made of a slot's files (`POST /templates/capture`, `POST /templates/delete`,
 * protocol/template-capture.ts; E2B's snapshots are built on it): the workspace of a plain
 * slot, the changes of an image slot; other slots reset into it see exactly those files and
 * change them for themselves only; the slot's processes go on; a capture is kept until deleted.
 */

async function bash(s: TestServer, slot: number, command: string): Promise<string> {
  const r = await s.bash(slot, command);
  expect(r.success, `${command}: ${r.error} ${r.output}`).toBe(true);
  return r.output.trim();
}

describe(`captured templates of a plain slot (${isRoot ? "root" : "not root"})`, () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 3 });
  }, 90_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("copies the workspace as it is (dirs, modes, symlinks); other slots reset into it see it, change it for themselves, and may change every file", async () => {
    await bash(s, 0, "mkdir -p app/sub && printf '{\"env\": \"test\"}' > app/config.json && echo data > app/sub/data.txt && chmod 600 app/sub/data.txt && ln -s sub/data.txt app/link");
    const c = await s.post("/templates/capture", { slot_id: "slot_0", name: "snap-a" });
    expect(c.status, c.text).toBe(200);
    expect(c.json.template).toMatchObject({ name: "snap-a", captured: true, in_use: 0 });
    expect(c.json.template.files).toBeGreaterThanOrEqual(5);
    // The source goes on: what it writes now is not in the capture.
    await bash(s, 0, "echo later > app/later.txt");

    for (const slot of [1, 2]) expect((await s.post("/reset", { slot_id: `slot_${slot}`, template: "snap-a" })).status).toBe(200);
    expect(await bash(s, 1, "cat app/config.json; echo; cat app/link; stat -c %a app/sub/data.txt; readlink app/link; ls app")).toBe('{"env": "test"}\ndata\n600\nsub/data.txt\nconfig.json\nlink\nsub');
    // Every captured file is the new slot's own: changed and removed here, unchanged in the other slot and the capture.
    await bash(s, 1, "echo mine > app/sub/data.txt && rm app/config.json && whoami");
    expect(await bash(s, 2, "cat app/sub/data.txt; ls app")).toBe("data\nconfig.json\nlink\nsub");
    expect((await s.get("/templates")).json.templates.find((t: { name: string }) => t.name === "snap-a")).toMatchObject({ captured: true, in_use: 2 });
  });

  it("keeps the slot's processes running through the capture, and a paused slot paused", async () => {
    const res = await fetch(s.url + "/processes/start", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: "slot_0", cmd: "/bin/bash", args: ["-c", "read -r line; echo got:$line"], stdin: true }) });
    const events: Array<{ type: string; pid?: number; data?: string }> = [];
    const done = readEvents(res, events);
    while (events.length === 0) await new Promise((r) => setTimeout(r, 10));
    const pid = events[0]!.pid!;
    expect((await s.post("/templates/capture", { slot_id: "slot_0", name: "snap-b" })).status).toBe(200);
    expect((await s.post("/processes/input", { slot_id: "slot_0", pid, data: Buffer.from("x\n").toString("base64") })).status).toBe(200);
    await done;
    expect(Buffer.from(events.find((e) => e.type === "stdout")!.data!, "base64").toString()).toBe("got:x\n");

    expect((await s.post("/processes/freeze", { slot_id: "slot_0" })).status).toBe(200);
    expect((await s.post("/templates/capture", { slot_id: "slot_0", name: "snap-b" })).status).toBe(200);
    const refused = await s.post("/processes/start", { slot_id: "slot_0", cmd: "/bin/true", args: [] });
    expect(refused.status, "still paused after the capture").toBe(409);
    expect((await s.post("/processes/thaw", { slot_id: "slot_0" })).status).toBe(200);
  });

  it("replaces a capture of the same name, deletes one (kept by the slots using it until their reset), and refuses what it cannot do", async () => {
    await bash(s, 0, "echo v2 > version.txt");
    expect((await s.post("/templates/capture", { slot_id: "slot_0", name: "snap-a" })).status).toBe(200);
    expect((await s.post("/reset", { slot_id: "slot_2", template: "snap-a" })).status).toBe(200);
    expect(await bash(s, 2, "cat version.txt")).toBe("v2");
    // slot_1 still has the first version.
    expect(await bash(s, 1, "ls version.txt 2>&1 || true")).toMatch(/No such file/);

    const d = await s.post("/templates/delete", { name: "snap-a" });
    expect(d.json).toEqual({ deleted: true });
    expect((await s.post("/templates/delete", { name: "snap-a" })).json).toEqual({ deleted: false });
    expect(await bash(s, 2, "cat version.txt")).toBe("v2");
    expect((await s.post("/reset", { slot_id: "slot_1", template: "snap-a" })).status).toBe(404);

    expect((await s.post("/templates/capture", { slot_id: "slot_9", name: "x" })).status).toBe(404);
    expect((await s.post("/templates/capture", { slot_id: "slot_0", name: "../x" })).json.field).toBe("name");
    expect((await s.post("/templates", { name: "built", setup: ["echo hi > f"] })).json.success).toBe(true);
    const clash = await s.post("/templates/capture", { slot_id: "slot_0", name: "built" });
    expect(clash.status).toBe(409);
    expect((await s.post("/templates/delete", { name: "built" })).status).toBe(409);
  });
});

describe.skipIf(imagesMissing !== undefined)(`a captured template of an image slot${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let f: ImageFixture;
  beforeAll(async () => {
    f = await imageFixture({ busybox: busyboxImage() }, { slots: 2 });
    await resetInto(f.server, 0, f.refs.busybox!);
  }, 240_000);
  afterAll(async () => {
    await f?.stop();
  });

  it("holds what the slot changed anywhere in its root (written, replaced, deleted), on the same image", async () => {
    const before = await sh(f.server, 0, "ls /bin | wc -l");
    await sh(f.server, 0, "mkdir -p /solution && echo answer > /solution/out.txt && echo changed > /etc/motd && rm /bin/yes && echo done");
    const c = await f.server.post("/templates/capture", { slot_id: "slot_0", name: "img-snap" });
    expect(c.status, c.text).toBe(200);
    expect(c.json.template).toMatchObject({ name: "img-snap", captured: true, image: { reference: f.refs.busybox } });
    expect((await f.server.post("/reset", { slot_id: "slot_1", template: "img-snap" })).status).toBe(200);
    expect(await sh(f.server, 1, "cat /solution/out.txt /etc/motd; ls /bin/yes 2>&1 | grep -c 'No such' ; ls /bin | wc -l")).toBe(`answer\nchanged\n1\n${Number(before) - 1}`);
    // Its own from there: a change in slot_1 is not in slot_0.
    await sh(f.server, 1, "echo other > /solution/out.txt");
    expect(await sh(f.server, 0, "cat /solution/out.txt")).toBe("answer");
  });
});
