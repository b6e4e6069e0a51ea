import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { request } from "undici";
import { parseToolBackendConfig } from "../../src/executor/backend-config.js";
import { ExecutorServer } from "../../src/executor/executor-server.js";
import { createToolBackend, type ToolBackendParts } from "../../src/executor/tool-backend.js";
import { imagesMissing } from "../support/image-server.js";
import { pushImage, startRegistry, type TestRegistry } from "../support/registry.js";
import { busyboxImage } from "../support/test-images.js";

const TOKEN = "executor-images-token";

/**
 * Task images through the executor service's HTTP API (issue 36), as a remote trainer uses it:
 * `POST /prepare_workspace` with `template.image` puts the trajectory's slot in the image (its
 * files, Env and WorkingDir), a template's files and setup on an image are built there; an
 * image the container cannot get is `success: false` with `image_unavailable` (the reason an
 * infrastructure failure is counted by), and a reference that cannot name an image is a 400
 * naming `template.image`. Real sandbox servers from the local provisioner, a registry on
 * loopback.
 */
describe.skipIf(imagesMissing !== undefined)(`the executor service's /prepare_workspace with task images${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let registry: TestRegistry;
  let backend: ToolBackendParts;
  let server: ExecutorServer;
  let url: string;
  let busybox: string;

  const post = async (path: string, body: unknown) => {
    const res = await request(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json", authorization: `Bearer ${TOKEN}` }, body: JSON.stringify(body) });
    return { status: res.statusCode, body: (await res.body.json()) as Record<string, any> };
  };
  const bash = async (trajectoryId: string, command: string) => {
    const r = await post("/execute", { trajectory_id: trajectoryId, tool: { name: "bash", arguments: { command } } });
    expect(r.body, command).toMatchObject({ success: true });
    return String(r.body.output).trim();
  };

  beforeAll(async () => {
    registry = await startRegistry();
    busybox = await pushImage(busyboxImage(), registry.host, "svc/busybox:1");
    const config = parseToolBackendConfig({ pool: { slotsPerContainer: 3, minContainers: 1, maxContainers: 1 }, images: { insecureRegistries: [registry.host] } });
    backend = await createToolBackend(config);
    server = new ExecutorServer({ executor: backend.executor, pool: backend.pool, token: TOKEN });
    url = await server.listen(0, "127.0.0.1");
  }, 300_000);
  afterAll(async () => {
    await server?.close();
    await backend?.close();
    await registry?.stop();
  });

  it("template.image puts the trajectory in the image: its files, Env and WorkingDir, root writing /etc", async () => {
    const prep = await post("/prepare_workspace", { trajectory_id: "img-1", template: { name: "busybox", image: busybox } });
    expect(prep).toMatchObject({ status: 200, body: { success: true, error: "" } });
    expect(await bash("img-1", "pwd; echo $GREETING; cat /data/a.txt; id -u; echo mine > /etc/mine.conf && cat /etc/mine.conf")).toBe("/srv/work\nhello from the image\nlinked\n0\nmine");
    expect(await post("/release", { trajectory_id: "img-1", reset_workspace: true })).toMatchObject({ status: 200 });
  }, 120_000);

  it("a template's files and setup on an image are built in the image's WorkingDir", async () => {
    const template = { name: "on-busybox", image: busybox, files: { "task.txt": "the task\n" }, setup: ["echo built-by-setup > built.txt"] };
    const prep = await post("/prepare_workspace", { trajectory_id: "img-2", template });
    expect(prep.body).toMatchObject({ success: true });
    expect(await bash("img-2", "pwd; cat task.txt built.txt; echo $GREETING")).toBe("/srv/work\nthe task\nbuilt-by-setup\nhello from the image");
    await post("/release", { trajectory_id: "img-2", reset_workspace: true });
  }, 120_000);

  it("an image the container cannot get is success: false with image_unavailable naming the reason; the service goes on", async () => {
    const missing = `${registry.host}/svc/not-pushed:1`;
    const prep = await post("/prepare_workspace", { trajectory_id: "img-3", template: { name: "missing", image: missing } });
    expect(prep.status).toBe(200);
    expect(prep.body).toMatchObject({ success: false, image_unavailable: "not_found" });
    expect(prep.body.error).toContain(missing);
    await post("/release", { trajectory_id: "img-3", reset_workspace: true });
    const again = await post("/prepare_workspace", { trajectory_id: "img-4", template: { name: "busybox", image: busybox } });
    expect(again.body).toMatchObject({ success: true });
    expect(await bash("img-4", "cat /data/a.txt")).toBe("linked");
    await post("/release", { trajectory_id: "img-4", reset_workspace: true });
  }, 120_000);

  it("a reference that cannot name an image is a 400 naming template.image, before any slot is held", async () => {
    const held = backend.pool.stats().slots.held;
    const bad = await post("/prepare_workspace", { trajectory_id: "img-5", template: { name: "bad", image: "Not An Image!!" } });
    expect(bad.status).toBe(400);
    expect(bad.body.field).toBe("template.image");
    expect(backend.pool.stats().slots.held).toBe(held);
  });
});
