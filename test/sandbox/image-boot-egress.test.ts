import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, readEvents } from "./helpers.js";
import { busyboxImage } from "../support/test-images.js";
import { imageFixture, imagesMissing, resetInto, sh, type ImageFixture } from "../support/image-server.js";
import { makeOutsideHosts, type OutsideHosts } from "../support/outside-hosts.js";

/**
 * A slot whose root is an image (issue 36) gets the same boot id and egress rules as any
 * slot: the boot id is the slot's own and new after a reset (isolation/boot-id.ts), and the
 * egress rules hold in its network namespace, which lives in the image's user namespace
 * (protocol/egress.ts). The outside host is the test's own network namespace (root only).
 */
describe.skipIf(imagesMissing !== undefined)(`boot id and egress rules in an image root${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let f: ImageFixture;
  let outside: OutsideHosts | undefined;

  beforeAll(async () => {
    if (isRoot) outside = await makeOutsideHosts(2, 18083);
    f = await imageFixture({ busybox: busyboxImage() }, { slots: 1 });
    await resetInto(f.server, 0, f.refs.busybox!);
  }, 240_000);

  afterAll(async () => {
    await f?.stop();
    outside?.remove();
  });

  it("the boot id is the slot's own, and new after the slot's reset into the image again", async () => {
    const host = readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
    const first = await sh(f.server, 0, "cat /proc/sys/kernel/random/boot_id");
    expect(first).toMatch(/^[0-9a-f-]{36}$/);
    expect(first).not.toBe(host);
    await resetInto(f.server, 0, f.refs.busybox!);
    const second = await sh(f.server, 0, "cat /proc/sys/kernel/random/boot_id");
    expect(second).toMatch(/^[0-9a-f-]{36}$/);
    expect(second).not.toBe(first);
  });

  it.skipIf(!isRoot)("a denied address is refused to a network-on process session of the image, an allowed one reached (skipped without root: no network namespace for the outside host)", async () => {
    const [a, b] = outside!.addresses as [string, string];
    const rules = await f.server.post("/processes/egress", { slot_id: "slot_0", allow: [a], deny: ["0.0.0.0/0"] });
    expect(rules.status, rules.text).toBe(200);
    // busybox's nc: an HTTP/1.0 GET, the answer's last line, or "refused".
    const get = (host: string) => `printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 ${host} ${outside!.port} 2>/dev/null | tail -1 | grep . || echo refused`;
    const res = await fetch(f.server.url + "/processes/start", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ slot_id: "slot_0", cmd: "/bin/sh", args: ["-c", `${get(a)}; echo; ${get(b)}`], allow_network: true }),
    });
    expect(res.status).toBe(200);
    const events: Array<{ type: string; data?: string }> = [];
    await readEvents(res, events);
    const out = events
      .filter((e) => e.type === "stdout")
      .map((e) => Buffer.from(e.data!, "base64").toString("utf8"))
      .join("")
      .split("\n")
      .filter(Boolean);
    expect(out).toEqual([`outside ${a}`, "refused"]);
  }, 60_000);
});
