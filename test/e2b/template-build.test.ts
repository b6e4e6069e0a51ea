import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Sandbox, SandboxError, Template, waitForTimeout } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BuiltTemplates } from "../../src/e2b/template-build/built-templates.js";
import { TemplateBuilds } from "../../src/e2b/template-build/template-builds.js";
import { TemplateFiles } from "../../src/e2b/template-build/template-files.js";
import { silentLogger } from "../../src/observability/logger.js";
import { imagesMissing } from "../support/image-server.js";
import { pushImage, startRegistry, type TestRegistry } from "../support/registry.js";
import { busyboxImage } from "../support/test-images.js";
import { startE2b, type E2bHarness } from "./helpers.js";

/**
 * E2B's template build API through the real `e2b` JS SDK: `Template.build()` of the SDK's
 * steps (from an image, copy, run, env, workdir, user, start command with a ready check), its
 * files uploaded by hash, its status and logs polled as the SDK does; the result used as a
 * sandbox template by name. The base image comes from a registry on loopback, also as
 * Docker Hub's `e2bdev/base` through `--registry-mirror` (what `fromBaseImage()` names).
 */
describe.skipIf(imagesMissing !== undefined)(`E2B template builds${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let registry: TestRegistry;
  let h: E2bHarness;
  let base = "";
  let ctx = "";

  beforeAll(async () => {
    registry = await startRegistry();
    base = await pushImage(busyboxImage(), registry.host, "e2b/busybox:1");
    await pushImage(busyboxImage(), registry.host, "e2bdev/base:latest");
    h = await startE2b({ slots: 3, sandboxServerArgs: ["--insecure-registry", registry.host, "--registry-mirror", `docker.io=${registry.host}`] });
    ctx = mkdtempSync(join(tmpdir(), "slotpool-tpl-ctx-"));
    mkdirSync(join(ctx, "site"));
    writeFileSync(join(ctx, "site", "index.html"), "hello from a copied file\n");
    writeFileSync(join(ctx, "serve.sh"), "#!/bin/sh\nexec busybox httpd -f -p 8080 -h /srv/site\n");
  }, 300_000);
  afterAll(async () => {
    await h?.stop();
    await registry?.stop();
    if (ctx) rmSync(ctx, { recursive: true, force: true });
  });

  const template = () =>
    Template({ fileContextPath: ctx })
      .fromImage(base)
      .setEnvs({ APP_MODE: "test" })
      .copy("site", "/srv/site")
      .copy("serve.sh", "/usr/local/bin/serve.sh", { mode: 0o755 })
      .runCmd("echo built-in-image > /etc/built.txt && echo $APP_MODE > /etc/mode.txt")
      .setWorkdir("/srv/site");

  it("Template.build runs the steps, polls status and logs; Sandbox.create(name) starts from the result", async () => {
    const logs: string[] = [];
    const info = await Template.build(template(), "tpl-basic", { ...h.opts, onBuildLogs: (l) => logs.push(l.message) });
    expect(info.templateId).toMatch(/^tpl/);
    expect(logs.join("\n")).toMatch(/\[5\/5\] WORKDIR \/srv\/site/);
    expect(await Template.exists("tpl-basic", h.opts)).toBe(true);
    const sbx = await Sandbox.create("tpl-basic", h.opts);
    try {
      const r = await sbx.commands.run("pwd; cat /etc/built.txt /etc/mode.txt index.html; echo $APP_MODE; ls -l /usr/local/bin/serve.sh | cut -c1-10");
      expect(r.stdout).toBe("/srv/site\nbuilt-in-image\ntest\nhello from a copied file\ntest\n-rwxr-xr-x\n");
    } finally {
      await sbx.kill();
    }
  }, 300_000);

  it("a rebuild of the unchanged template reuses every step; a changed file runs its COPY again", async () => {
    const logs: string[] = [];
    await Template.build(template(), "tpl-basic", { ...h.opts, onBuildLogs: (l) => logs.push(l.message) });
    expect(logs.join("\n")).toMatch(/5 of 5 steps from the cache/);
    writeFileSync(join(ctx, "site", "index.html"), "changed\n");
    const again: string[] = [];
    await Template.build(template(), "tpl-basic", { ...h.opts, onBuildLogs: (l) => again.push(l.message) });
    expect(again.join("\n")).toMatch(/1 of 5 steps from the cache/);
    const sbx = await Sandbox.create("tpl-basic", h.opts);
    try {
      expect((await sbx.commands.run("cat index.html")).stdout).toBe("changed\n");
    } finally {
      await sbx.kill();
    }
  }, 300_000);

  it("a start command runs when a sandbox starts, which is handed out once its ready check passes: its server answers through the E2B server at once", async () => {
    const get = "printf 'GET /index.html HTTP/1.0\\r\\n\\r\\n' | nc -w 2 127.0.0.1 8080";
    await Template.build(template().setStartCmd("/usr/local/bin/serve.sh", `${get} | grep -q '200 OK'`), "tpl-start", h.opts);
    const sbx = await Sandbox.create("tpl-start", h.opts);
    try {
      expect((await sbx.commands.run(`${get} | tail -1`)).stdout).toBe("changed\n");
      // The sandbox's port from outside, as E2B's SDKs address it (the E2b-Sandbox-Id / -Port headers).
      const res = await fetch(`${h.url}/index.html`, { headers: { "e2b-sandbox-id": sbx.sandboxId, "e2b-sandbox-port": "8080" } });
      expect(res.status).toBe(200);
      expect(await res.text()).toBe("changed\n");
    } finally {
      await sbx.kill();
    }
  }, 300_000);

  it("a start command that fails before its ready check passes fails the create, with the command's output", async () => {
    await Template.build(template().setStartCmd("echo cannot-start >&2; exit 4", waitForTimeout(60_000)), "tpl-broken", h.opts);
    const err = await Sandbox.create("tpl-broken", h.opts).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(SandboxError);
    expect(String(err)).toMatch(/exited 4[\s\S]*cannot-start/);
  }, 300_000);

  it("fromBaseImage() (Docker Hub's e2bdev/base, through the mirror) and fromTemplate(name) build; a failing step is the SDK's BuildError naming it", async () => {
    await Template.build(Template().fromBaseImage().runCmd("echo base > /base.txt"), "tpl-from-base", h.opts);
    await Template.build(Template().fromTemplate("tpl-from-base").runCmd("cat /base.txt > /child.txt"), "tpl-child", h.opts);
    const sbx = await Sandbox.create("tpl-child", h.opts);
    try {
      expect((await sbx.commands.run("cat /child.txt")).stdout).toBe("base\n");
    } finally {
      await sbx.kill();
    }
    await expect(Template.build(Template().fromImage(base).runCmd("echo nope >&2; exit 7"), "tpl-fail", h.opts)).rejects.toThrow(/exit code 7[\s\S]*nope/);
  }, 300_000);
});

/**
 * Templates built on one container serve every container of the pool: with
 * `--template-registry`, the build's image is pushed there (PREFIX/<template id>:<build id>)
 * and the other containers fetch it from there like any task image.
 */
describe.skipIf(imagesMissing !== undefined)(`E2B template builds with a template registry${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let registry: TestRegistry;
  let h: E2bHarness;
  let base = "";

  beforeAll(async () => {
    registry = await startRegistry();
    base = await pushImage(busyboxImage(), registry.host, "e2b/busybox:1");
    h = await startE2b({ slots: 1, containers: 2, templateRegistry: `${registry.host}/templates`, sandboxServerArgs: ["--insecure-registry", registry.host] });
  }, 300_000);
  afterAll(async () => {
    await h?.stop();
    await registry?.stop();
  });

  it("the built image is pushed to the registry, and sandboxes of the template start on both containers (one slot each) from it", async () => {
    const logs: string[] = [];
    const info = await Template.build(Template().fromImage(base).runCmd("echo pushed > /etc/where.txt"), "tpl-pushed", { ...h.opts, onBuildLogs: (l) => logs.push(l.message) });
    expect(logs.join("\n")).toContain(`Pushing the image to ${registry.host}/templates/${info.templateId}:${info.buildId}`);
    const tags = (await (await fetch(`http://${registry.host}/v2/templates/${info.templateId}/tags/list`)).json()) as { tags: string[] };
    expect(tags.tags).toEqual([info.buildId]);
    const sandboxes = await Promise.all([Sandbox.create("tpl-pushed", h.opts), Sandbox.create("tpl-pushed", h.opts)]);
    try {
      expect(h.pool.containerList().map((c) => c.busySlots)).toEqual([1, 1]);
      for (const sbx of sandboxes) expect((await sbx.commands.run("cat /etc/where.txt")).stdout).toBe("pushed\n");
    } finally {
      await Promise.all(sandboxes.map((s) => s.kill()));
    }
  }, 300_000);
});

/**
 * Failures of builds and of start commands carry slotpool's stable codes: a build's status
 * `reason.errorCode` (protocol/image-build.ts's BUILD_FAILURE_CODES), a create's error answer
 * `errorCode` (`{code: <HTTP status>, message, errorCode}`), beside E2B's own fields.
 */
describe.skipIf(imagesMissing !== undefined)(`E2B template failures' stable codes${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let registry: TestRegistry;
  let h: E2bHarness;
  let base = "";
  let filesDir = "";
  const headers = () => ({ "x-api-key": h.apiKey, "content-type": "application/json" });

  beforeAll(async () => {
    registry = await startRegistry();
    base = await pushImage(busyboxImage(), registry.host, "e2b/busybox:1");
    // A ready check that never passes fails the create after 2 s (the product's bound under test, not a wait of the test's).
    h = await startE2b({ slots: 2, templateStartTimeoutMs: 2000, sandboxServerArgs: ["--insecure-registry", registry.host] });
    filesDir = mkdtempSync(join(tmpdir(), "slotpool-tpl-files-"));
  }, 300_000);
  afterAll(async () => {
    await h?.stop();
    await registry?.stop();
    if (filesDir) rmSync(filesDir, { recursive: true, force: true });
  });

  /** A build started through E2B's routes as the SDKs call them; its status once it ended. */
  async function rawBuild(name: string, start: Record<string, unknown>): Promise<{ status: string; reason?: { message: string; step?: string; errorCode?: string } }> {
    const created = (await (await fetch(`${h.url}/v3/templates`, { method: "POST", headers: headers(), body: JSON.stringify({ name }) })).json()) as { templateID: string; buildID: string };
    const started = await fetch(`${h.url}/v2/templates/${created.templateID}/builds/${created.buildID}`, { method: "POST", headers: headers(), body: JSON.stringify(start) });
    expect(started.status).toBe(202);
    for (;;) {
      const s = (await (await fetch(`${h.url}/templates/${created.templateID}/builds/${created.buildID}/status`, { headers: headers() })).json()) as { status: string; reason?: { message: string; step?: string; errorCode?: string } };
      if (s.status === "ready" || s.status === "error") return s;
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async function rawCreate(templateID: string): Promise<{ status: number; body: { code: number; message: string; errorCode?: string } }> {
    const res = await fetch(`${h.url}/sandboxes`, { method: "POST", headers: headers(), body: JSON.stringify({ templateID }) });
    return { status: res.status, body: (await res.json()) as { code: number; message: string; errorCode?: string } };
  }

  async function until(done: () => boolean): Promise<void> {
    while (!done()) await new Promise((r) => setTimeout(r, 50));
  }

  it("BUILD_STEP_FAILED: a step whose command fails", async () => {
    const s = await rawBuild("tpl-code-step", { fromImage: base, steps: [{ type: "RUN", args: ["echo nope >&2; exit 7"] }] });
    expect(s).toMatchObject({ status: "error", reason: { step: "0", errorCode: "BUILD_STEP_FAILED", message: expect.stringMatching(/exit code 7[\s\S]*nope/) } });
  }, 300_000);

  it("BUILD_BASE_UNAVAILABLE: fromTemplate of a template never built here", async () => {
    const s = await rawBuild("tpl-code-base", { fromTemplate: "no-such-template", steps: [{ type: "RUN", args: ["true"] }] });
    expect(s).toMatchObject({ status: "error", reason: { errorCode: "BUILD_BASE_UNAVAILABLE", message: expect.stringMatching(/'no-such-template' not found/) } });
  }, 300_000);

  it("BUILD_FILES_MISSING: a COPY whose files were never uploaded", async () => {
    const s = await rawBuild("tpl-code-files", { fromImage: base, steps: [{ type: "COPY", args: ["app", "/srv/"], filesHash: "c".repeat(64) }] });
    expect(s).toMatchObject({ status: "error", reason: { errorCode: "BUILD_FILES_MISSING", message: expect.stringMatching(/never uploaded/) } });
  }, 300_000);

  /** Builds of the harness's pool outside its E2B server, for the cases that drive them directly. */
  const ownBuilds = () => {
    const templates = new BuiltTemplates();
    return { templates, builds: new TemplateBuilds({ pool: h.pool, templates, files: new TemplateFiles(filesDir, 1 << 20), logger: silentLogger() }) };
  };

  it("BUILD_CANCELLED: a build under way when the server closes its builds", async () => {
    const { templates, builds } = ownBuilds();
    const { build } = templates.request("tpl-code-cancelled", []);
    builds.start(build, { fromImage: base, force: true, steps: [{ type: "RUN", args: ["sleep 600"], force: false }] });
    await until(() => build.status !== "building" || build.logs.some((l) => l.message.includes("[1/1] RUN")));
    expect(build.status).toBe("building");
    builds.close();
    await until(() => build.status !== "building");
    expect(build).toMatchObject({ status: "error", reason: { code: "BUILD_CANCELLED" } });
  }, 300_000);

  it("BUILD_FAILED: anything else, here a build the sandbox server refuses (a step the E2B API would not have passed on)", async () => {
    const { templates, builds } = ownBuilds();
    const { build } = templates.request("tpl-code-refused", []);
    builds.start(build, { fromImage: base, force: false, steps: [{ type: "RUN", args: ["nul\0byte"], force: false }] });
    await until(() => build.status !== "building");
    expect(build).toMatchObject({ status: "error", reason: { code: "BUILD_FAILED", message: expect.stringMatching(/refused the build: HTTP 400/) } });
  }, 300_000);

  it("START_COMMAND_FAILED: a start command that exits with a failure before its ready check passed", async () => {
    await Template.build(Template().fromImage(base).setStartCmd("echo cannot-start >&2; exit 4", waitForTimeout(60_000)), "tpl-code-start", h.opts);
    const r = await rawCreate("tpl-code-start");
    expect(r.status).toBe(500);
    expect(r.body).toMatchObject({ code: 500, errorCode: "START_COMMAND_FAILED", message: expect.stringMatching(/exited 4[\s\S]*cannot-start/) });
  }, 300_000);

  it("START_COMMAND_NOT_READY: a ready check that does not pass in time (here the server's 2 s); the sandbox is ended", async () => {
    await Template.build(Template().fromImage(base).setStartCmd("sleep 600", "echo not-yet; false"), "tpl-code-ready", h.opts);
    const r = await rawCreate("tpl-code-ready");
    expect(r.status).toBe(500);
    expect(r.body).toMatchObject({ code: 500, errorCode: "START_COMMAND_NOT_READY", message: expect.stringMatching(/did not pass within 2 s[\s\S]*not-yet/) });
    expect(h.server.registry.list()).toEqual([]);
  }, 300_000);
});
