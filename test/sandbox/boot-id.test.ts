import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, readEvents, startServer, type TestServer } from "./helpers.js";

/**
 * A boot id per slot (isolation/boot-id.ts): /proc/sys/kernel/random/boot_id inside a slot is
 * the slot's own, not the host's and not another slot's; it stays the same while processes of
 * the slot may live on, and is new once every process of the slot has ended: a reset, a fork
 * into the slot, and `POST /processes/kill-all` (E2B's filesystem-only pause and cold boot).
 * A freeze (E2B's pause with memory) keeps it.
 */

const BOOT_ID = "/proc/sys/kernel/random/boot_id";
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** The boot id a process session of the slot reads (E2B's commands are process sessions). */
async function sessionBootId(s: TestServer, slot: string): Promise<string> {
  const res = await fetch(s.url + "/processes/start", { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: slot, cmd: "/bin/cat", args: [BOOT_ID] }) });
  expect(res.status).toBe(200);
  const events: Array<{ type: string; data?: string; exit_code?: number }> = [];
  await readEvents(res, events);
  expect(events.at(-1)).toMatchObject({ type: "end", exit_code: 0 });
  return events
    .filter((e) => e.type === "stdout")
    .map((e) => Buffer.from(e.data!, "base64").toString("utf8"))
    .join("")
    .trim();
}

async function bashBootId(s: TestServer, slot: number): Promise<string> {
  const r = await s.bash(slot, `cat ${BOOT_ID}`);
  expect(r.success, r.error).toBe(true);
  return r.output.trim();
}

describe(`a slot's boot id (${isRoot ? "root" : "not root"})`, () => {
  let s: TestServer;
  beforeAll(async () => {
    s = await startServer({ slots: 3 });
  }, 90_000);
  afterAll(async () => {
    await s?.stop();
  });

  it("is the slot's own: a UUID like the kernel's, neither the host's nor another slot's, the same for its bash calls and its process sessions", async () => {
    const host = readFileSync(BOOT_ID, "utf8").trim();
    const a = await bashBootId(s, 0);
    const b = await bashBootId(s, 1);
    expect(a).toMatch(UUID);
    expect(b).toMatch(UUID);
    expect(a).not.toBe(host);
    expect(b).not.toBe(a);
    expect(await bashBootId(s, 0)).toBe(a);
    expect(await sessionBootId(s, "slot_0")).toBe(a);
    // Read-only inside: the slot cannot set its own.
    const w = await s.bash(0, `echo x > ${BOOT_ID}`);
    expect(w.success).toBe(false);
    expect(await bashBootId(s, 0)).toBe(a);
  });

  it("is new after a reset, and only the reset slot's changes", async () => {
    const before = await bashBootId(s, 0);
    const other = await bashBootId(s, 1);
    expect((await s.post("/reset", { slot_id: "slot_0" })).status).toBe(200);
    const after = await bashBootId(s, 0);
    expect(after).toMatch(UUID);
    expect(after).not.toBe(before);
    expect(await bashBootId(s, 1)).toBe(other);
  });

  it("is new after kill-all (every process ended), also for a sandbox started ahead; a freeze keeps it", async () => {
    const first = await sessionBootId(s, "slot_2");
    // The slot keeps a session sandbox started ahead: it binds the file, so it sees the new id too.
    expect(await sessionBootId(s, "slot_2")).toBe(first);
    expect((await s.post("/processes/freeze", { slot_id: "slot_2" })).status).toBe(200);
    expect((await s.post("/processes/thaw", { slot_id: "slot_2" })).status).toBe(200);
    expect(await sessionBootId(s, "slot_2")).toBe(first);
    expect((await s.post("/processes/kill-all", { slot_id: "slot_2" })).status).toBe(200);
    const second = await sessionBootId(s, "slot_2");
    expect(second).toMatch(UUID);
    expect(second).not.toBe(first);
  });

  it("is new in a fork's children; the parent keeps its own", async () => {
    const parent = await bashBootId(s, 0);
    const child = await bashBootId(s, 1);
    const f = await s.post("/fork", { slot_id: "slot_0", into: ["slot_1"] });
    expect(f.status, f.text).toBe(200);
    const forked = await bashBootId(s, 1);
    expect(forked).toMatch(UUID);
    expect(forked).not.toBe(child);
    expect(forked).not.toBe(parent);
    expect(await bashBootId(s, 0)).toBe(parent);
  });
});
