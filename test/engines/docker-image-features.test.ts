import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Socket } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openSlotPort } from "../../src/pool/slot-port.js";
import type { LeasedSlot } from "../../src/pool/types.js";
import { readEvents } from "../sandbox/helpers.js";
import { pushImage, startRegistry, type TestRegistry } from "../support/registry.js";
import { busyboxImage, busyboxMissing } from "../support/test-images.js";
import { SANDBOX_CONTAINER_OPTIONS, dockerSkipReason, freePort, removeContainers, sandboxImage, startContainer, waitHealthy } from "./support/docker.js";
import { findExecutable } from "../../src/host/executables.js";

/**
 * What the fifth round added, served by the sandbox image in a real Docker engine
 * (docs/supported-setups.md says what each set-up gets): task images (a reset into an image
 * from a registry on the host's loopback), port tunnels into a slot, a slot's browser
 * (the image's Chromium) and volumes. Task images need two things the documented options
 * leave out: CAP_SYS_PTRACE and a data dir off the container's overlayfs root (a volume);
 * without them /health says why and a reset into an image is refused saying so.
 */

const skip = dockerSkipReason() ?? busyboxMissing ?? (["docker-registry", "skopeo"].map((t) => (findExecutable(t) ? undefined : `${t} is not installed (scripts/setup.sh)`)).find(Boolean) as string | undefined);
const title = (name: string): string => (skip ? `${name} (skipped: ${skip})` : name);
const TOKEN = "docker-features-token";
const auth = { authorization: `Bearer ${TOKEN}` };

let image = "";
let registry: TestRegistry | undefined;
let busybox = "";

beforeAll(async () => {
  if (skip) return;
  image = await sandboxImage();
  registry = await startRegistry();
  busybox = await pushImage(busyboxImage(), registry.host, "busybox:1");
}, 900_000);

afterAll(async () => {
  await removeContainers();
  await registry?.stop();
});

async function post(url: string, path: string, body: unknown): Promise<{ status: number; json: any; text: string }> {
  const res = await fetch(url + path, { method: "POST", headers: { "content-type": "application/json", ...auth }, body: JSON.stringify(body) });
  const text = await res.text();
  let json: any;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, json, text };
}

async function bash(url: string, slot: number, command: string): Promise<{ success: boolean; output: string }> {
  const r = await post(url, "/execute", { slot_id: `slot_${slot}`, tool: "bash", args: { command }, timeout: 60 });
  expect(r.status, r.text).toBe(200);
  return r.json;
}

/** A process session of `slot` running `script`; its output so far and its end. */
async function session(url: string, slot: number, script: string, volumes: Array<{ volume_id: string; path: string }> = []) {
  const res = await fetch(url + "/processes/start", {
    method: "POST",
    headers: { "content-type": "application/json", ...auth },
    body: JSON.stringify({ slot_id: `slot_${slot}`, cmd: "/bin/bash", args: ["-c", script], volumes }),
  });
  // (Not the body in the message: a session's stream ends only with its process.)
  expect(res.status).toBe(200);
  const events: Array<{ type: string; data?: string; exit_code?: number }> = [];
  const done = readEvents(res, events);
  const out = (): string =>
    events
      .filter((e) => e.type === "stdout" || e.type === "stderr")
      .map((e) => Buffer.from(e.data!, "base64").toString("utf8"))
      .join("");
  return { done, out, code: () => events.find((e) => e.type === "end")?.exit_code };
}

describe.skipIf(skip !== undefined)(title("the sandbox image in a real Docker engine: this round's features"), () => {
  describe("with the documented options plus --cap-add SYS_PTRACE and the data dir on a volume (-v DIR:/var/lib/slotpool)", () => {
    let url = "";
    let dataDir = "";

    beforeAll(async () => {
      dataDir = mkdtempSync(join(tmpdir(), "slotpool-docker-data-"));
      // As a host directory would be: the slot uids must search it (mkdtemp makes it 0700, which the server refuses, naming it).
      chmodSync(dataDir, 0o755);
      const port = await freePort();
      url = `http://127.0.0.1:${port}`;
      const name = await startContainer([
        "--network", "host", ...SANDBOX_CONTAINER_OPTIONS, "--cap-add", "SYS_PTRACE", "-v", `${dataDir}:/var/lib/slotpool`, image,
        "--host", "127.0.0.1", "--port", String(port), "--slots", "3", "--token", TOKEN, "--memory-mb", "512",
        // The test registry is plain HTTP on the host's loopback, which --network host shares.
        "--insecure-registry", registry!.host,
      ]);
      await waitHealthy(name, url);
    }, 120_000);

    afterAll(() => {
      if (dataDir) rmSync(dataDir, { recursive: true, force: true });
    });

    it("task images: /health offers them; a reset into an image from a registry on the host's loopback gives the slot the image's root (its files, its env, writable, root of its own); a plain reset drops it", async () => {
      const health = (await (await fetch(`${url}/health`)).json()) as Record<string, any>;
      expect(health["images"], JSON.stringify(health["images"])).toMatchObject({ available: true });
      expect(health).toMatchObject({ cgroups: "v1", limits: { memory: "cgroup", pids: "cgroup" } });
      const reset = await post(url, "/reset", { slot_id: "slot_0", image: busybox });
      expect(reset.status, reset.text).toBe(200);
      expect(reset.json.image).toMatchObject({ reference: busybox, runtime: { working_dir: "/srv/work", uid: 0 } });
      const r = await bash(url, 0, 'echo "$GREETING"; id -u; echo written > /usr/new-file && cat /usr/new-file; ls /srv');
      expect(r.success, r.output).toBe(true);
      expect(r.output.split("\n")).toEqual(expect.arrayContaining(["hello from the image", "0", "written"]));
      expect((await post(url, "/reset", { slot_id: "slot_0" })).status).toBe(200);
      expect((await bash(url, 0, "test -e /usr/new-file && echo kept || echo gone; test -e /srv && echo image || echo plain")).output).toBe("gone\nplain");
    }, 180_000);

    it("port tunnels: a server a process session starts in a slot answers through GET /ports/connect", async () => {
      const port = 41_000 + Math.floor(Math.random() * 1000);
      const srv = await session(url, 1, `exec /usr/bin/python3 -u -c '
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", ${port})); s.listen(4)
print("listening", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"hello from docker\\n"); c.close()'`);
      for (let i = 0; i < 1200 && !srv.out().includes("listening"); i++) await new Promise((r) => setTimeout(r, 25));
      expect(srv.out()).toContain("listening");
      const lease = { slotId: "slot_1", container: { id: "c", index: 0, url, token: TOKEN, slots: 3 }, touch: () => undefined } as unknown as LeasedSlot;
      const sock: Socket = await openSlotPort(lease, port, { allowNetwork: false });
      const got = await new Promise<string>((resolve, reject) => {
        let text = "";
        sock.on("data", (d: Buffer) => (text += d.toString("utf8")));
        sock.once("end", () => resolve(text));
        sock.once("error", reject);
      });
      expect(got).toBe("hello from docker\n");
      expect((await post(url, "/reset", { slot_id: "slot_1" })).status).toBe(200);
      await srv.done;
    }, 120_000);

    it("the browser: a slot's Chromium (the image's) opens a page and snapshots it", async () => {
      const page = "data:text/html,<title>docker</title><h1>hello from a slot's browser</h1>";
      const nav = await post(url, "/execute", { slot_id: "slot_2", tool: "browser_navigate", args: { url: page }, timeout: 90 });
      expect(nav.status, nav.text).toBe(200);
      expect(nav.json, nav.text).toMatchObject({ success: true, metadata: { title: "docker" } });
      const snap = await post(url, "/execute", { slot_id: "slot_2", tool: "browser_snapshot", args: {}, timeout: 60 });
      expect(snap.json.output).toContain('heading "hello from a slot\'s browser"');
      expect((await post(url, "/reset", { slot_id: "slot_2" })).status).toBe(200);
    }, 180_000);

    it("volumes: what one slot's session writes into a volume another slot's reads, and the API sees it", async () => {
      expect((await post(url, "/volumes/create", { volume_id: "vol-docker", name: "docker", token: "d".repeat(32) })).status).toBe(200);
      const mount = [{ volume_id: "vol-docker", path: "/mnt/data" }];
      const w = await session(url, 0, "echo from-slot-0 > /mnt/data/note.txt", mount);
      await w.done;
      expect(w.code(), w.out()).toBe(0);
      const r = await session(url, 1, "cat /mnt/data/note.txt", mount);
      await r.done;
      expect(r.out()).toBe("from-slot-0\n");
      const api = await fetch(`${url}/volumes/file?volume_id=vol-docker&path=${encodeURIComponent("/note.txt")}`, { headers: auth });
      expect(await api.text()).toBe("from-slot-0\n");
    }, 120_000);
  });

  it("with the documented options only: /health says task images are unavailable and why (CAP_SYS_PTRACE), a reset into an image is refused saying so, plain slots serve", async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const name = await startContainer(["--network", "host", ...SANDBOX_CONTAINER_OPTIONS, image, "--host", "127.0.0.1", "--port", String(port), "--slots", "1", "--token", TOKEN, "--insecure-registry", registry!.host]);
    const health = (await waitHealthy(name, url)) as Record<string, any>;
    expect(health["images"]).toMatchObject({ available: false, unavailable_reason: expect.stringMatching(/without CAP_SYS_PTRACE.*--cap-add SYS_PTRACE/) });
    const reset = await post(url, "/reset", { slot_id: "slot_0", image: busybox });
    expect(reset.status).toBeGreaterThanOrEqual(400);
    expect(reset.json).toMatchObject({ code: "image_unavailable", reason: "unsupported", field: "image" });
    expect(reset.json.error).toMatch(/without CAP_SYS_PTRACE/);
    expect((await bash(url, 0, "echo plain")).output).toBe("plain");
  }, 120_000);
});
