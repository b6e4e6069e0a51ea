import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseToolBackendConfig } from "../../src/executor/backend-config.js";
import { createToolBackend, type ToolBackendParts } from "../../src/executor/tool-backend.js";
import { ImageReferenceError, ImageUnavailableError } from "../../src/pool/errors.js";
import { imagesMissing } from "../support/image-server.js";
import { pushImage, startRegistry, type TestRegistry } from "../support/registry.js";
import { busyboxImage, layoutDigest, noBashImage } from "../support/test-images.js";

/**
 * Task images through the pool on real sandbox servers (issue 36): the backend config's
 * `images.insecureRegistries` reaches every server the local provisioner starts; the pool sends
 * a trajectory to the container holding its image (from its own resets and from the servers'
 * /health); a template on an image is built once per container with its files in the image's
 * WorkingDir; what cannot be had is an ImageUnavailableError naming the reason.
 */
describe.skipIf(imagesMissing !== undefined)(`task images through the pool, on real sandbox servers${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let registry: TestRegistry;
  let backend: ToolBackendParts;
  const refs: Record<string, string> = {};

  beforeAll(async () => {
    registry = await startRegistry();
    refs.busybox = await pushImage(busyboxImage(), registry.host, "busybox:1");
    refs.nobash = await pushImage(noBashImage(), registry.host, "nobash:1");
    const config = parseToolBackendConfig({ pool: { slotsPerContainer: 2, minContainers: 2, maxContainers: 2, healthIntervalMs: 200 }, images: { insecureRegistries: [registry.host] } });
    backend = await createToolBackend(config);
  }, 300_000);
  afterAll(async () => {
    await backend?.close();
    await registry?.stop();
  });

  const bash = async (trajectoryId: string, command: string) => {
    const r = await backend.executor.execute(trajectoryId, { name: "bash", arguments: { command } });
    if (!r.success) throw new Error(`${command}: ${r.error} ${r.output}`);
    return r.output.trim();
  };
  const containerOf = (trajectoryId: string) => backend.executor.slotOf(trajectoryId)?.container.index;

  it("the image's root on the container that holds it; a plain trajectory packs as before", async () => {
    const { executor, pool } = backend;
    // Container 0 busy with two plain trajectories: the first busybox trajectory lands on container 1.
    await executor.claimSlot("plain-0");
    await executor.claimSlot("plain-1");
    await executor.prepareWorkspace("bb-0", { name: "bb", image: refs.busybox! });
    expect([containerOf("plain-0"), containerOf("plain-1"), containerOf("bb-0")]).toEqual([0, 0, 1]);
    // The image's files, Env and WorkingDir; root writes anywhere.
    expect(await bash("bb-0", "pwd; echo $GREETING; cat /data/a.txt; mkdir /solution && echo ok > /solution/x && cat /solution/x")).toBe("/srv/work\nhello from the image\nlinked\nok");
    await Promise.all(["plain-0", "plain-1", "bb-0"].map((t) => executor.release(t)));
    // Packing alone would take container 0: the image is on container 1.
    await executor.prepareWorkspace("bb-1", { name: "bb", image: refs.busybox! });
    expect(containerOf("bb-1")).toBe(1);
    // The reset dropped what the last trajectory wrote.
    expect(await bash("bb-1", "ls /solution 2>&1 || echo gone")).toMatch(/gone$/);
    await executor.claimSlot("plain-2");
    expect(containerOf("plain-2")).toBe(0);
    await Promise.all(["bb-1", "plain-2"].map((t) => executor.release(t)));
    expect(pool.images.holders(refs.busybox!)).toEqual([pool.containerList()[1]!.id]);
    expect(pool.images.used()).toContainEqual({ image: refs.busybox!, resets: 2, digest: layoutDigest(busyboxImage()) });
    expect(pool.images.pulls).toBe(1);
  }, 300_000);

  it("learns from /health an image fetched on a container by someone else", async () => {
    const { pool } = backend;
    const c0 = pool.containerList()[0]!;
    // POST /images on container 0's server directly (as an operator's pre-pull would).
    const res = await fetch(`${c0.url}/images`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${c0.token}` }, body: JSON.stringify({ image: refs.nobash }) });
    expect(res.status).toBe(200);
    // The periodic /health checks (every 200 ms here) tell the pool; the condition is what is awaited.
    while (!pool.images.holders(refs.nobash!).includes(c0.id)) await new Promise((r) => setTimeout(r, 20));
    await backend.executor.claimSlot("plain-3");
    await backend.executor.prepareWorkspace("nb-0", { name: "nb", image: refs.nobash! });
    // Container 0 has a free slot and the image: the trajectory goes there.
    expect(containerOf("nb-0")).toBe(0);
    expect(await bash("nb-0", "id -un; pwd")).toMatch(/^(app|root)\n\/home\/app$/);
    await Promise.all(["plain-3", "nb-0"].map((t) => backend.executor.release(t)));
  }, 300_000);

  it("a template on an image: its files in the image's WorkingDir, its setup in the image's root, built once per container", async () => {
    const { executor, pool } = backend;
    const spec = { name: "bb-task", image: refs.busybox!, files: { "task.txt": "the task\n" }, setup: ["echo built > /opt-built && cat task.txt > copied.txt"] };
    const ids = ["t-0", "t-1", "t-2", "t-3"];
    await Promise.all(ids.map((id) => executor.prepareWorkspace(id, spec)));
    for (const id of ids) expect(await bash(id, "pwd; cat task.txt copied.txt /opt-built; cat /data/a.txt")).toBe("/srv/work\nthe task\nthe task\nbuilt\nlinked");
    expect(pool.templates.builds).toBe(2); // two containers, one build each
    await Promise.all(ids.map((id) => executor.release(id)));
  }, 300_000);

  it("an image that cannot be had is an ImageUnavailableError naming it and its reason; a malformed one is refused before any slot", async () => {
    const { executor, pool } = backend;
    const missing = `${registry.host}/nope:1`;
    const err = await executor.prepareWorkspace("miss", { name: "miss", image: missing }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ImageUnavailableError);
    expect((err as ImageUnavailableError).reason).toBe("not_found");
    expect((err as Error).message).toContain(missing);
    await executor.release("miss");
    const held = pool.stats().slots.held;
    const bad = await executor.prepareWorkspace("bad", { name: "bad", image: "Upper/Case:1" }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(ImageReferenceError);
    expect(pool.stats().slots.held).toBe(held);
    await executor.release("bad");
    // The pool goes on: every slot free, none lost.
    expect(pool.stats().slots).toMatchObject({ free: 4, lost: 0 });
  }, 120_000);
});
