import { execFileSync } from "node:child_process";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ImageBuildEvent } from "../../src/protocol/image-build.js";
import { isRoot } from "./helpers.js";
import { busyboxImage } from "../support/test-images.js";
import { imageFixture, imagesMissing, resetInto, sh, type ImageFixture } from "../support/image-server.js";

/**
 * Image builds on the sandbox server (POST /images/build): E2B's template steps run in a slot
 * whose root is the image so far, each step an image of its own in the build layout, cached by
 * its key (parent digest + step + files hash). The result is an image a slot resets into.
 */

async function build(f: ImageFixture, body: Record<string, unknown>): Promise<ImageBuildEvent[]> {
  const res = await fetch(`${f.server.url}/images/build`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: "slot_0", ...body }) });
  expect(res.status).toBe(200);
  const text = await res.text();
  return text.split("\n").filter(Boolean).map((l) => JSON.parse(l) as ImageBuildEvent);
}

function done(events: ImageBuildEvent[]): Extract<ImageBuildEvent, { type: "done" }> {
  const d = events.find((e) => e.type === "done");
  if (!d || d.type !== "done") throw new Error(`the build did not finish: ${JSON.stringify(events.filter((e) => e.type === "error" || e.type === "log").slice(-10))}`);
  return d;
}

/** A build context as E2B's SDKs upload one: a gzipped tar of paths relative to the context dir. */
function context(files: Record<string, string>): Buffer {
  const dir = mkdtempSync(join(tmpdir(), "slotpool-ctx-"));
  try {
    for (const [p, content] of Object.entries(files)) {
      mkdirSync(join(dir, p, ".."), { recursive: true });
      writeFileSync(join(dir, p), content);
    }
    return execFileSync("tar", ["-czf", "-", "-C", dir, ...Object.keys(files)]);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const HASH = "a".repeat(64);

describe.skipIf(imagesMissing !== undefined)(`image builds${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let f: ImageFixture;

  beforeAll(async () => {
    f = await imageFixture({ busybox: busyboxImage() }, { slots: 2 });
    const put = await fetch(`${f.server.url}/images/contexts?hash=${HASH}`, { method: "PUT", body: new Uint8Array(context({ "app/main.sh": "echo from-copied-file\n", "app/conf/x.txt": "x\n" })) });
    expect(put.status).toBe(200);
  }, 240_000);

  afterAll(async () => {
    await f?.stop();
  });

  const steps = [
    { type: "ENV", args: ["GREETING", "hi", "PATHY", "$GREETING-there"] },
    { type: "RUN", args: ["mkdir -p /opt/tool && echo built > /opt/tool/marker && rm /etc/group"] },
    { type: "WORKDIR", args: ["/srv/app"] },
    { type: "COPY", args: ["app", "dest/", "", "0755"], files_hash: HASH },
    { type: "RUN", args: ["echo \"$PATHY\" > env.txt; id -u > uid.txt"] },
  ];

  it("runs every step in the image, and a slot reset into the result sees each step's changes, its env and working directory", async () => {
    const events = await build(f, { from: f.refs.busybox, steps, allow_network: false });
    const d = done(events);
    expect(d.steps).toBe(5);
    expect(d.working_dir).toBe("/srv/app");
    expect(d.user).toBe("root");
    await resetInto(f.server, 1, d.reference);
    expect(await sh(f.server, 1, "cat /opt/tool/marker")).toBe("built");
    // A deletion in a step (an overlayfs whiteout) is an OCI whiteout in its layer: gone in the result.
    expect(await sh(f.server, 1, "test -e /etc/group && echo there || echo gone")).toBe("gone");
    expect(await sh(f.server, 1, "pwd; cat env.txt uid.txt; cat dest/main.sh dest/conf/x.txt; stat -c %a dest/main.sh")).toBe("/srv/app\nhi-there\n0\necho from-copied-file\nx\n755");
    expect(await sh(f.server, 1, 'echo "$GREETING"')).toBe("hi");
  }, 300_000);

  it("a second build of the same steps reuses every step and runs nothing; a changed step runs from there on", async () => {
    const again = done(await build(f, { from: f.refs.busybox, steps, allow_network: false }));
    expect(again.cached_steps).toBe(5);
    const first = done(await build(f, { from: f.refs.busybox, steps, allow_network: false }));
    expect(first.digest).toBe(again.digest);
    const changed = [...steps.slice(0, 4), { type: "RUN", args: ["echo changed > changed.txt"] }];
    const c = done(await build(f, { from: f.refs.busybox, steps: changed, allow_network: false }));
    expect(c.cached_steps).toBe(4);
    expect(c.digest).not.toBe(again.digest);
    const forced = done(await build(f, { from: f.refs.busybox, steps, allow_network: false, force: true }));
    expect(forced.cached_steps).toBe(0);
  }, 300_000);

  it.skipIf(!isRoot)("USER makes the user when the image lacks it, and later RUN steps run as that user (skipped without root: a non-root server has one uid)", async () => {
    const d = done(await build(f, { from: f.refs.busybox, steps: [{ type: "USER", args: ["builder"] }, { type: "RUN", args: ["id -u > /tmp/x; id -un > ~/who.txt"] }, { type: "RUN", args: ["id -u > /root-uid.txt", "root"] }], allow_network: false }));
    expect(d.user).toBe("builder");
    expect(d.working_dir).toBe("/home/builder");
    await resetInto(f.server, 1, d.reference);
    expect(await sh(f.server, 1, "cat /home/builder/who.txt /root-uid.txt; pwd")).toBe("builder\n0\n/home/builder");
  }, 300_000);

  it("a failing step ends the build with an error naming its step and the command's output", async () => {
    const events = await build(f, { from: f.refs.busybox, steps: [{ type: "RUN", args: ["true"] }, { type: "RUN", args: ["echo boom >&2; exit 3"] }], allow_network: false });
    const err = events.find((e) => e.type === "error");
    expect(err).toMatchObject({ type: "error", step: "1", code: "BUILD_STEP_FAILED" });
    expect(err?.type === "error" && err.message).toMatch(/exit code 3[\s\S]*boom/);
  }, 300_000);

  describe("a failed build's error says why with a stable code", () => {
    const failure = async (body: Record<string, unknown>) => {
      const events = await build(f, { from: f.refs.busybox, allow_network: false, ...body });
      expect(events.some((e) => e.type === "done")).toBe(false);
      return events.find((e) => e.type === "error");
    };

    it("BUILD_INVALID_STEP: a step that cannot run as given (ENV without a value)", async () => {
      expect(await failure({ steps: [{ type: "ENV", args: ["ONLY_A_NAME"] }] })).toMatchObject({ step: "0", code: "BUILD_INVALID_STEP", message: expect.stringMatching(/pairs of name and value/) });
    }, 300_000);

    it("BUILD_FILES_MISSING: a COPY whose files were never uploaded", async () => {
      expect(await failure({ steps: [{ type: "COPY", args: ["app", "/srv/"], files_hash: "b".repeat(64) }] })).toMatchObject({ step: "0", code: "BUILD_FILES_MISSING", message: expect.stringMatching(/were not uploaded/) });
    }, 300_000);

    it("BUILD_BASE_UNAVAILABLE: a base image the registry does not have", async () => {
      expect(await failure({ from: `${f.registry.host}/no-such-image:1`, steps: [{ type: "RUN", args: ["true"] }] })).toMatchObject({ step: "base", code: "BUILD_BASE_UNAVAILABLE", message: expect.stringMatching(/no-such-image/) });
    }, 300_000);

    it("BUILD_TIMEOUT: a build that outlasts its timeout stops before its next step", async () => {
      // The first step alone lasts longer than the whole build may (2 s of sleep against 1 s): load only lengthens it.
      expect(await failure({ timeout: 1, steps: [{ type: "RUN", args: ["sleep 2"] }, { type: "RUN", args: ["echo never"] }] })).toMatchObject({ step: "1", code: "BUILD_TIMEOUT" });
    }, 300_000);

    it("BUILD_PUSH_FAILED: the image was built but its destination cannot take it", async () => {
      expect(await failure({ steps: [{ type: "RUN", args: ["echo pushed > /etc/pushed.txt"] }], push: "oci:/proc/slotpool-no-such-dir:t" })).toMatchObject({ step: "finalize", code: "BUILD_PUSH_FAILED", message: expect.stringMatching(/pushing the image/) });
    }, 300_000);
  });
});
