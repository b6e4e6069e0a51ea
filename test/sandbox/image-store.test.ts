import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSandboxProcess, type SandboxProcess } from "../../src/pool/sandbox-process.js";
import { busyboxImage, noBashImage, whiteoutImage } from "../support/test-images.js";
import { imagesMissing, resetInto, sh } from "../support/image-server.js";
import { pushImage, REGISTRY_PASSWORD, REGISTRY_USER, startRegistry, type TestRegistry } from "../support/registry.js";
import { startServer, type TestServer } from "./helpers.js";

/**
 * The image store of a sandbox server (issue 36): references checked before anything runs,
 * failures to get an image answered `image_unavailable` (an infra failure, the slot left as
 * it was), one fetch for concurrent requests, a budget with LRU eviction of images no slot
 * uses, credentials never logged, plain HTTP only for registries named, and the store kept
 * across a restart.
 */
/** Whether a Docker engine answers here (the docker-daemon: source needs one). */
const dockerAnswers = spawnSync("docker", ["info", "--format", "{{.ServerVersion}}"], { encoding: "utf8", timeout: 10_000 }).status === 0;

describe.skipIf(imagesMissing !== undefined)(`the image store${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let registry: TestRegistry;
  const refs: Record<string, string> = {};

  beforeAll(async () => {
    registry = await startRegistry();
    refs.busybox = await pushImage(busyboxImage(), registry.host, "busybox:1");
    refs.nobash = await pushImage(noBashImage(), registry.host, "nobash:1");
    refs.whiteouts = await pushImage(whiteoutImage(), registry.host, "whiteouts:1");
  }, 240_000);
  afterAll(async () => {
    await registry?.stop();
  });

  describe("answers", () => {
    let s: TestServer;
    beforeAll(async () => {
      s = await startServer({ slots: 3, extraArgs: ["--insecure-registry", registry.host] });
    }, 120_000);
    afterAll(async () => {
      await s?.stop();
    });

    it("a reference that cannot name an image is a 400 naming it, before anything runs", async () => {
      const before = (await s.get("/slots")).json.slots[0].generation;
      for (const bad of ["Upper/Case", "x:bad tag", "oci:relative/dir", "dir:/some/dir", "a@sha256:1234", ""]) {
        const r = await s.post("/reset", { slot_id: "slot_0", image: bad });
        expect(r.status, bad).toBe(400);
        expect(r.json.field, bad).toBe("image");
        expect(r.json.error, bad).toMatch(/image reference/);
        const pull = await s.post("/images", { image: bad });
        expect(pull.status, bad).toBe(400);
      }
      const both = await s.post("/reset", { slot_id: "slot_0", image: refs.busybox, template: "t" });
      expect(both.status).toBe(400);
      expect(both.json.field).toBe("image");
      expect((await s.get("/slots")).json.slots[0].generation).toBe(before);
    });

    it("a missing image is an infra failure (code image_unavailable, reason not_found), the slot is as it was, the server lives on", async () => {
      await resetInto(s, 1, refs.busybox!);
      await sh(s, 1, "echo still-here > /etc/mark");
      const gen = (await s.get("/slots")).json.slots[1].generation;
      const r = await s.post("/reset", { slot_id: "slot_1", image: `${registry.host}/does-not-exist:1` });
      expect(r.status).toBe(404);
      expect(r.json).toMatchObject({ code: "image_unavailable", reason: "not_found", field: "image", image: `${registry.host}/does-not-exist:1` });
      expect(r.json.error).toMatch(/does-not-exist/);
      const tag = await s.post("/reset", { slot_id: "slot_1", image: `${registry.host}/busybox:no-such-tag` });
      expect(tag.json).toMatchObject({ code: "image_unavailable", reason: "not_found" });
      expect((await s.get("/slots")).json.slots[1].generation).toBe(gen);
      expect(await sh(s, 1, "cat /etc/mark")).toBe("still-here");
      expect((await s.get("/health")).status).toBe(200);
    });

    it("concurrent requests for one image fetch it once", async () => {
      const from = s.logs.length;
      const answers = await Promise.all([
        s.post("/images", { image: refs.whiteouts }),
        s.post("/reset", { slot_id: "slot_0", image: refs.whiteouts }),
        s.post("/reset", { slot_id: "slot_2", image: refs.whiteouts }),
        s.post("/images", { image: refs.whiteouts }),
      ]);
      expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200]);
      const fetched = s.logs.slice(from).filter((l) => l.includes('"image fetched"') && l.includes("whiteouts"));
      expect(fetched).toHaveLength(1);
      // Every one of them waited for that one fetch and says what it cost.
      expect(answers.every((a) => (a.json.fetched ?? a.json.image?.fetched) !== undefined)).toBe(true);
    });

    it("takes an OCI layout (oci:DIR:tag) and a docker-save archive (docker-archive:FILE) as sources, and a missing one is not_found", async () => {
      const layout = whiteoutImage();
      const fromLayout = await resetInto(s, 2, `oci:${layout}:latest`);
      expect(fromLayout.image!.runtime.working_dir).toBe("/opt");
      expect(await sh(s, 2, "cat /etc/replaced.txt")).toBe("new");
      const dir = mkdtempSync(join(tmpdir(), "slotpool-archive-"));
      try {
        const archive = join(dir, "nobash.tar");
        execFileSync("skopeo", ["--insecure-policy", "copy", "--quiet", `oci:${noBashImage()}:latest`, `docker-archive:${archive}:nobash:1`], { timeout: 120_000 });
        const fromArchive = await resetInto(s, 2, `docker-archive:${archive}`);
        expect(fromArchive.image!.runtime.user).toBe("app");
        expect(await sh(s, 2, "pwd")).toBe("/home/app");
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
      const missing = await s.post("/reset", { slot_id: "slot_2", image: `oci:${join(tmpdir(), "no-such-layout")}:latest` });
      expect(missing.json).toMatchObject({ code: "image_unavailable", reason: "not_found" });
    });

    it.skipIf(!dockerAnswers)("takes an image from the node's Docker engine (docker-daemon:name:tag) (skipped without a Docker engine that answers)", async () => {
      execFileSync("skopeo", ["--insecure-policy", "copy", "--quiet", `oci:${noBashImage()}:latest`, "docker-daemon:slotpool-test-nobash:1"], { timeout: 120_000 });
      const r = await resetInto(s, 2, "docker-daemon:slotpool-test-nobash:1");
      expect(r.image!.runtime.user).toBe("app");
      expect(await sh(s, 2, "cat secret.txt")).toBe("app's secret");
    });
  });

  it("keeps its budget by evicting the least recently used images no slot uses, and refuses one that does not fit beside those in use", async () => {
    // Sizes on the store's disk: nobash ≈ 3 MB, whiteouts ≈ 7 MB, busybox ≈ 10 MB (compressed blobs + unpacked layers).
    const s = await startServer({ slots: 2, extraArgs: ["--insecure-registry", registry.host, "--image-budget-mb", "11"] });
    try {
      const names = async () => ((await s.get("/images")).json.images as Array<{ reference: string }>).map((i) => i.reference).sort();
      expect((await s.post("/images", { image: refs.nobash })).status).toBe(200);
      expect((await s.post("/images", { image: refs.whiteouts })).status).toBe(200);
      expect(await names()).toEqual([refs.nobash, refs.whiteouts].sort());
      expect((await s.post("/images", { image: refs.busybox })).status).toBe(200);
      expect(await names()).toEqual([refs.busybox]);
      const store = join(s.dataDir, ".slotpool", "images");
      // Their layers and blobs are gone from the disk too (deleted in the background).
      for (let i = 0; i < 200 && readdirSync(join(store, "layers")).filter((n) => !n.endsWith(".bytes")).length !== 2; i++) await new Promise((r) => setTimeout(r, 50));
      expect(readdirSync(join(store, "layers")).filter((n) => !n.endsWith(".bytes"))).toHaveLength(2);
      const list = (await s.get("/images")).json;
      expect(list.used_bytes).toBeLessThanOrEqual(list.budget_bytes);
      await resetInto(s, 0, refs.busybox!);
      const full = await s.post("/reset", { slot_id: "slot_1", image: refs.nobash });
      expect(full.status).toBe(507);
      expect(full.json).toMatchObject({ code: "image_unavailable", reason: "store_full" });
      expect(await names()).toEqual([refs.busybox]);
      expect(await sh(s, 0, "cat /data/a.txt")).toBe("linked");
    } finally {
      await s.stop();
    }
  }, 120_000);

  it("a plain-HTTP registry is refused unless the server names it (--insecure-registry)", async () => {
    const s = await startServer({ slots: 1 });
    try {
      const r = await s.post("/reset", { slot_id: "slot_0", image: refs.nobash });
      expect(r.status).toBe(502);
      expect(r.json).toMatchObject({ code: "image_unavailable", reason: "insecure_registry" });
      expect(r.json.error).toContain(`--insecure-registry ${registry.host}`);
    } finally {
      await s.stop();
    }
  }, 120_000);

  describe("credentials and restarts", () => {
    let authRegistry: TestRegistry;
    let ref = "";
    let dataDir = "";
    const b64 = Buffer.from(`${REGISTRY_USER}:${REGISTRY_PASSWORD}`).toString("base64");
    const start = async (env: NodeJS.ProcessEnv, logs: string[]): Promise<SandboxProcess> =>
      startSandboxProcess({ slots: 1, dataDir, extraArgs: ["--insecure-registry", authRegistry.host], env: { SLOTPOOL_LOG_LEVEL: "debug", ...env }, onLog: (l) => logs.push(l), startTimeoutMs: 60_000 });
    const post = async (p: SandboxProcess, path: string, body: unknown) => {
      const r = await fetch(p.url + path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
      return { status: r.status, json: (await r.json()) as any };
    };

    beforeAll(async () => {
      authRegistry = await startRegistry({ auth: true });
      ref = await pushImage(noBashImage(), authRegistry.host, "private:1", { auth: true });
      dataDir = mkdtempSync(join(tmpdir(), "slotpool-img-restart-"));
    }, 120_000);
    afterAll(async () => {
      await authRegistry?.stop();
      rmSync(dataDir, { recursive: true, force: true });
    });

    it("without credentials a registry that wants them answers auth_failed; with SLOTPOOL_REGISTRY_AUTH it works, and the secret is in no log nor command line", async () => {
      const logs: string[] = [];
      const p1 = await start({}, logs);
      try {
        const r = await post(p1, "/reset", { slot_id: "slot_0", image: ref });
        expect(r.status).toBe(502);
        expect(r.json).toMatchObject({ code: "image_unavailable", reason: "auth_failed" });
      } finally {
        await p1.stop(10_000);
      }
      const auth = JSON.stringify({ auths: { [authRegistry.host]: { auth: b64 } } });
      const p2 = await start({ SLOTPOOL_REGISTRY_AUTH: auth }, logs);
      try {
        const r = await post(p2, "/reset", { slot_id: "slot_0", image: ref });
        expect(r.status).toBe(200);
        expect(r.json.image.fetched).toBeDefined();
        const file = join(dataDir, ".slotpool", "registry-auth.json");
        expect(statSync(file).mode & 0o777).toBe(0o600);
      } finally {
        await p2.stop(10_000);
      }
      // Or a Docker-style auth file named by REGISTRY_AUTH_FILE, which skopeo reads itself (a second image, so it is fetched).
      await pushImage(busyboxImage(), authRegistry.host, "private-2:1", { auth: true });
      const authFile = join(dataDir, "docker-config.json");
      writeFileSync(authFile, auth, { mode: 0o600 });
      const p3 = await start({ REGISTRY_AUTH_FILE: authFile }, logs);
      try {
        const r = await post(p3, "/reset", { slot_id: "slot_0", image: `${authRegistry.host}/private-2:1` });
        expect(r.status).toBe(200);
        expect(r.json.image.fetched).toBeDefined();
      } finally {
        await p3.stop(10_000);
      }
      const all = logs.join("\n");
      expect(all).not.toContain(REGISTRY_PASSWORD);
      expect(all).not.toContain(b64);
    }, 180_000);

    it("a restarted server keeps the images it fetched (no second pull) and nothing half-made", async () => {
      const logs: string[] = [];
      const p = await start({}, logs);
      try {
        const list = (await (await fetch(p.url + "/images")).json()) as { images: Array<{ reference: string }> };
        expect(list.images.map((i) => i.reference).sort()).toEqual([ref, `${authRegistry.host}/private-2:1`].sort());
        const r = await post(p, "/reset", { slot_id: "slot_0", image: ref });
        expect(r.status).toBe(200);
        expect(r.json.image.fetched).toBeUndefined();
        expect(existsSync(join(dataDir, ".slotpool", "images", "tmp"))).toBe(true);
        expect(readdirSync(join(dataDir, ".slotpool", "images", "tmp"))).toEqual([]);
      } finally {
        await p.stop(10_000);
      }
    }, 120_000);
  });
});
