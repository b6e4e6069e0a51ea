import { Sandbox, SandboxError } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { imagesMissing } from "../support/image-server.js";
import { pushImage, startRegistry, type TestRegistry } from "../support/registry.js";
import { busyboxImage, noBashImage } from "../support/test-images.js";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * `Sandbox.create(<image reference>)` through the real `e2b` JS SDK (issue 36): a template id
 * that is no template of the server but an image reference gives a sandbox whose root is that
 * image, fetched from a registry on loopback. What E2B code sees: the image's files, Env and
 * WorkingDir; root writing /etc and a new /solution, seen by no other sandbox; a fork carrying
 * it; a missing image a 404 naming it, after which the server goes on.
 */
describe.skipIf(imagesMissing !== undefined)(`E2B sandboxes from task images${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let registry: TestRegistry;
  let h: E2bHarness;
  const refs: Record<string, string> = {};

  beforeAll(async () => {
    registry = await startRegistry();
    refs.busybox = await pushImage(busyboxImage(), registry.host, "e2b/busybox:1");
    refs.nobash = await pushImage(noBashImage(), registry.host, "e2b/nobash:1");
    h = await startE2b({ slots: 5, sandboxServerArgs: ["--insecure-registry", registry.host] });
  }, 300_000);
  afterAll(async () => {
    await h?.stop();
    await registry?.stop();
  });

  it("the image's files, Env and WorkingDir; getInfo names the image as the template", async () => {
    const sbx = await Sandbox.create(refs.busybox!, h.opts);
    try {
      const r = await sbx.commands.run("pwd; echo $GREETING; cat /data/a.txt; readlink /data/rel-link");
      expect(r).toMatchObject({ exitCode: 0, stdout: "/srv/work\nhello from the image\nlinked\na.txt\n" });
      // The filesystem API reaches the image's files too (absolute paths), as its commands do.
      expect(await sbx.files.read("/data/a.txt")).toBe("linked\n");
      expect((await sbx.getInfo()).templateId).toBe(refs.busybox);
      // An image without bash: E2B's commands (which ask for /bin/bash) still run, as the image's User.
      const nb = await Sandbox.create(refs.nobash!, h.opts);
      try {
        expect((await nb.commands.run("pwd; ls /bin/bash 2>&1 || echo no-bash-in-image")).stdout).toMatch(/^\/home\/app\n.*no-bash-in-image\n$/s);
      } finally {
        await nb.kill();
      }
    } finally {
      await sbx.kill();
    }
  }, 120_000);

  it("root writes /etc and a new /solution; no other sandbox of the image sees it; a fork carries it", async () => {
    const a = await Sandbox.create(refs.busybox!, h.opts);
    const b = await Sandbox.create(refs.busybox!, h.opts);
    try {
      const w = await a.commands.run("id -u; echo mine > /etc/mine.conf && mkdir /solution && echo answer > /solution/out.txt && cat /etc/mine.conf /solution/out.txt", { user: "root" });
      expect(w.stdout).toBe("0\nmine\nanswer\n");
      await a.files.write("/solution/from-sdk.txt", "written through the SDK\n");
      const other = await b.commands.run("cat /etc/mine.conf 2>&1 || echo none; ls /solution 2>&1 || echo no-solution");
      expect(other.stdout).toMatch(/none\n.*no-solution\n$/s);
      const [f] = (await a.fork({ count: 1 })) as Sandbox[];
      try {
        const seen = await f!.commands.run("pwd; cat /etc/mine.conf /solution/out.txt /solution/from-sdk.txt; echo $GREETING");
        expect(seen.stdout).toBe("/srv/work\nmine\nanswer\nwritten through the SDK\nhello from the image\n");
        expect((await f!.getInfo()).templateId).toBe(refs.busybox);
        // From then on each is on its own.
        await f!.commands.run("echo fork-only > /etc/fork.conf");
        expect((await a.commands.run("cat /etc/fork.conf 2>&1 || echo absent")).stdout).toMatch(/absent\n$/);
      } finally {
        await f?.kill();
      }
    } finally {
      await Promise.all([a.kill(), b.kill()]);
    }
  }, 180_000);

  it("a missing image is a 404 naming it; the server goes on; a killed sandbox's slot is reset for the next image", async () => {
    const missing = `${registry.host}/e2b/not-pushed:1`;
    const err = await Sandbox.create(missing, h.opts).catch((e: unknown) => e);
    // The SDK's error for a create the API answered 404.
    expect(err).toBeInstanceOf(SandboxError);
    expect((err as Error).message).toMatch(/^404: /);
    expect((err as Error).message).toContain(missing);
    expect((err as Error).message).toContain("not_found");
    // A bare name is a template name (no registry is asked for it).
    await expect(Sandbox.create("no-such-template", h.opts)).rejects.toThrow(/template 'no-such-template' not found: .*a task image is named with a tag, a digest or a registry/);
    const ok = await Sandbox.create(refs.busybox!, h.opts);
    try {
      expect((await ok.commands.run("ls /etc/mine.conf /solution 2>&1 | wc -l; echo $GREETING")).stdout).toBe("2\nhello from the image\n");
    } finally {
      await ok.kill();
    }
    expect(h.pool.stats().slots).toMatchObject({ held: 0, lost: 0 });
  }, 120_000);
});
