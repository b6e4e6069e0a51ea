import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { findExecutable } from "../../src/host/executables.js";
import { TEST_IMAGES_DIR } from "../support/oci-image.js";
import { debianPythonImage } from "../support/test-images.js";
import { call, imageFixture, imagesMissing, resetInto, sh, type ImageFixture } from "../support/image-server.js";

/**
 * A real distribution image: Debian bookworm minbase with python3, made by mmdebstrap from
 * the Debian mirror (once: a few minutes; cached under .build/test-images). Where mmdebstrap
 * is missing or the mirror cannot be reached (checked with one request), the tests skip,
 * saying so.
 */
const mirror = process.env["SLOTPOOL_DEBIAN_MIRROR"] ?? "http://deb.debian.org/debian";
function debianMissing(): string | undefined {
  if (imagesMissing) return imagesMissing;
  if (existsSync(join(TEST_IMAGES_DIR, "debian-python-rootfs.tar"))) return undefined;
  if (!findExecutable("mmdebstrap")) return "mmdebstrap is not installed";
  const probe = spawnSync("curl", ["-fsSI", "--max-time", "10", `${mirror}/dists/bookworm/Release`], { encoding: "utf8", timeout: 15_000 });
  if (probe.status !== 0) return `the Debian mirror ${mirror} cannot be reached (${(probe.stderr || probe.error?.message || `curl exit ${probe.status}`).trim().slice(0, 200)})`;
  return undefined;
}
const missing = debianMissing();

describe.skipIf(missing !== undefined)(`a Debian image with python3${missing ? ` (skipped: ${missing})` : ""}`, () => {
  let f: ImageFixture;

  beforeAll(async () => {
    const built = debianPythonImage();
    if ("reason" in built) throw new Error(built.reason);
    f = await imageFixture({ debian: built.layout }, { slots: 2 });
    await resetInto(f.server, 0, f.refs.debian!);
  }, 1_200_000);
  afterAll(async () => {
    await f?.stop();
  });

  it("runs the image's python3 in its WorkingDir, as root of the slot, with the image's users", async () => {
    expect(await sh(f.server, 0, "pwd; python3 -c 'import sys, os; print(sys.version_info[:2] >= (3, 11), os.getuid())'; getent passwd _apt | cut -d: -f1")).toBe("/testbed\nTrue 0\n_apt");
    expect(await sh(f.server, 0, "stat -c '%U %a' /usr/bin/python3.11 /etc/shadow")).toBe("root 755\nroot 640");
  });

  it("root installs into /usr and /etc of its own root; a reset puts the image back", async () => {
    await sh(f.server, 0, "echo 'print(\"patched\")' > /usr/lib/python3/dist-packages/slotpool_probe.py && echo 'x' >> /etc/hosts");
    expect(await sh(f.server, 0, "python3 -c 'import slotpool_probe'")).toBe("patched");
    await resetInto(f.server, 0, f.refs.debian!);
    expect((await call(f.server, 0, "bash", { command: "python3 -c 'import slotpool_probe'" })).success).toBe(false);
  });

  it("the terminal and an E2B-style session run the image's own bash", async () => {
    const t = await call(f.server, 0, "bash_stateful", { command: "cd /tmp && python3 -c 'print(2+2)'" });
    expect(t.output).toBe("4");
    const res = await fetch(`${f.server.url}/processes/start`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ slot_id: "slot_0", cmd: "/bin/bash", args: ["-l", "-c", "readlink /proc/$$/exe; python3 --version"], envs: {}, stdin: false }),
    });
    const text = await res.text();
    const out = text.split("\n").filter(Boolean).map((l) => JSON.parse(l) as { type: string; data?: string }).filter((e) => e.type === "stdout").map((e) => Buffer.from(e.data!, "base64").toString()).join("");
    expect(out).toMatch(/^\/usr\/bin\/bash\nPython 3\.11/);
  });
});
