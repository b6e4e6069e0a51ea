import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot } from "./helpers.js";
import { busyboxImage, layoutDigest, noBashImage, whiteoutImage } from "../support/test-images.js";
import { call, imageFixture, imagesMissing, resetInto, sh, type ImageFixture } from "../support/image-server.js";

/**
 * A slot's root is the image (issue 36): the image's layers as overlayfs lowers, the slot's
 * changes in an upper layer on its own disk. Each rule of docs/images.md, on a real sandbox
 * server with images from a real registry on loopback. As root the image's users are real
 * users inside (uid 0 the slot's own host uid, others a block of host uids only the slot has);
 * not root, the server has one uid, and the whole image is root's inside.
 */
describe.skipIf(imagesMissing !== undefined)(`a slot whose root is an image${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let f: ImageFixture;

  beforeAll(async () => {
    f = await imageFixture({ busybox: busyboxImage(), whiteouts: whiteoutImage(), nobash: noBashImage() }, { slots: 4, extraArgs: ["--disk-mb", "64", "--no-network"] });
  }, 240_000);
  afterAll(async () => {
    await f?.stop();
  });

  it("a reset into an image answers its reference, digest and runtime, and what fetching it cost only when it had to", async () => {
    const first = await resetInto(f.server, 0, f.refs.busybox!);
    expect(first.success).toBe(true);
    expect(first.image).toMatchObject({ reference: f.refs.busybox, digest: layoutDigest(busyboxImage()), runtime: { working_dir: "/srv/work", uid: 0, gid: 0, home: "/root" } });
    expect(first.image!.fetched).toMatchObject({ layers: 2, layers_reused: 0 });
    expect(first.image!.fetched!.pull_ms).toBeGreaterThan(0);
    expect(first.image!.fetched!.unpack_ms).toBeGreaterThan(0);
    const again = await resetInto(f.server, 1, f.refs.busybox!);
    expect(again.image!.digest).toBe(first.image!.digest);
    expect(again.image!.fetched).toBeUndefined();
  });

  it("a later layer's whiteout hides the earlier file, an opaque directory hides its old contents, a replaced file is the new one", async () => {
    await resetInto(f.server, 0, f.refs.whiteouts!);
    const out = await sh(f.server, 0, "ls /etc; echo --; ls /opt /opt/old; echo --; cat /etc/replaced.txt; test -e /opt/dir-gone && echo dir-still-there || echo dir-gone");
    const [etc, opt, rest] = out.split("--\n");
    expect(etc).not.toMatch(/gone\.txt/);
    expect(etc).toMatch(/kept\.txt/);
    expect(opt).toMatch(/fresh/);
    expect(opt).not.toMatch(/^a$|^b$/m);
    expect(rest).toBe("new\ndir-gone");
    // A whiteout is no file the slot can see or trip over: it can create the name again.
    expect(await sh(f.server, 0, "echo back > /etc/gone.txt && cat /etc/gone.txt")).toBe("back");
  });

  it("symlinks, hard links, modes, owners and setuid bits are as the image has them", async () => {
    await resetInto(f.server, 0, f.refs.busybox!);
    const stat = (p: string) => sh(f.server, 0, `stat -c '%a %u %g %h %F' ${p}`);
    // As root the image's owners are real users inside; not root every file is the one uid's: root's inside.
    const app = isRoot ? "1000 1000" : "0 0";
    expect(await stat("/home/app")).toBe(`700 ${app} 2 directory`);
    expect(await stat("/data/a.txt")).toBe(`640 ${app} 2 regular file`);
    expect(await stat("/data/b.txt")).toBe(`640 ${app} 2 regular file`);
    expect(await sh(f.server, 0, "[ /data/a.txt -ef /data/b.txt ] && echo same-inode")).toBe("same-inode");
    expect(await sh(f.server, 0, "readlink /data/rel-link; readlink /data/abs-link; cat /data/rel-link /data/abs-link")).toBe("a.txt\n/data/a.txt\nlinked\nlinked");
    expect(await stat("/usr/local/suid/busybox")).toBe("4755 0 0 1 regular file");
    expect(await stat("/data/exec.sh")).toBe(`750 0 ${isRoot ? 1000 : 0} 1 regular file`);
    expect(await sh(f.server, 0, "/data/exec.sh")).toBe("from-image-script");
  });

  it("the image's Env, WorkingDir and User apply to commands and to relative file paths", async () => {
    await resetInto(f.server, 0, f.refs.busybox!);
    expect(await sh(f.server, 0, 'pwd; echo "$GREETING"; echo "$PATH"; id -u; echo "$HOME"')).toBe("/srv/work\nhello from the image\n/usr/local/bin:/bin\n0\n/root");
    const w = await call(f.server, 0, "write_file", { path: "notes.txt", content: "hi\n" });
    expect(w.metadata["path"]).toBe("/srv/work/notes.txt");
    expect(await sh(f.server, 0, "cat /srv/work/notes.txt; stat -c '%u' /srv/work/notes.txt")).toBe("hi\n0");
    // The image names User app: uid 1000 inside (not root: the server's one uid, root inside).
    const r = await resetInto(f.server, 1, f.refs.nobash!);
    expect(r.image!.runtime).toMatchObject({ user: "app", working_dir: "/home/app", uid: isRoot ? 1000 : 0 });
    expect(await sh(f.server, 1, "pwd; id -u; id -g; echo $HOME; cat secret.txt")).toBe(`/home/app\n${isRoot ? 1000 : 0}\n${isRoot ? 1000 : 0}\n/home/app\napp's secret`);
    expect((await call(f.server, 1, "read_file", { path: "secret.txt" })).output).toBe("app's secret\n");
    await call(f.server, 1, "write_file", { path: "made.txt", content: "x" });
    expect(await sh(f.server, 1, "stat -c '%u:%g' /home/app/made.txt")).toBe(isRoot ? "1000:1000" : "0:0");
  });

  it("root writes /etc and creates /solution: every path of the root is writable", async () => {
    await resetInto(f.server, 0, f.refs.busybox!);
    const out = await sh(f.server, 0, "echo hack >> /etc/passwd && tail -1 /etc/passwd; mkdir /solution && echo ok > /solution/a && cat /solution/a; touch /bin/new /usr/local/bin/x /root/r && echo touched; rm /bin/ls && echo removed");
    expect(out).toBe("hack\nok\ntouched\nremoved");
    // The file tools too, anywhere in the root.
    expect((await call(f.server, 0, "write_file", { path: "/solution/b.txt", content: "b" })).success).toBe(true);
    expect((await call(f.server, 0, "read_file", { path: "/solution/b.txt" })).output).toBe("b");
    if (isRoot) {
      // Root inside reads what the image keeps from it (a container's root overrides file modes).
      expect(await sh(f.server, 0, "cat /home/app/secret.txt")).toBe("app's secret");
    }
  });

  it("an image without /etc/hosts gets Docker's (localhost both ways, the sandbox's name), which root may change until the reset", async () => {
    await resetInto(f.server, 0, f.refs.busybox!);
    expect(await sh(f.server, 0, "cat /etc/hosts")).toBe("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tsandbox");
    expect(await sh(f.server, 0, "echo '10.1.2.3 db' >> /etc/hosts && tail -1 /etc/hosts")).toBe("10.1.2.3 db");
    await resetInto(f.server, 0, f.refs.busybox!);
    expect(await sh(f.server, 0, "grep -q 10.1.2.3 /etc/hosts && echo kept || echo gone")).toBe("gone");
  });

  it("what a slot writes anywhere in its root counts against its disk bound (64 MB here)", async () => {
    await resetInto(f.server, 0, f.refs.busybox!);
    const r = await call(f.server, 0, "bash", { command: "dd if=/dev/zero of=/etc/big bs=1M count=100 2>&1" });
    expect(r.success).toBe(false);
    expect(r.output).toMatch(/No space left on device/);
    expect(await sh(f.server, 0, "du -m /etc/big | cut -f1")).toMatch(/^(6[0-4]|5\d)$/);
    // The bound is the slot's, not the image's: after a reset it is free again.
    await resetInto(f.server, 0, f.refs.busybox!);
    expect(await sh(f.server, 0, "dd if=/dev/zero of=/etc/fits bs=1M count=20 2>/dev/null && echo fits")).toBe("fits");
  });

  it("a reset drops every change (the upper layer), and the image is as it was", async () => {
    await resetInto(f.server, 2, f.refs.busybox!);
    await sh(f.server, 2, "echo x > /etc/changed; rm /data/a.txt; mkdir -p /tmp/t/u");
    await resetInto(f.server, 2, f.refs.busybox!);
    expect(await sh(f.server, 2, "ls /etc/changed 2>&1; cat /data/a.txt; ls /tmp")).toBe("ls: /etc/changed: No such file or directory\nlinked");
    // And a reset without an image gives the server's own system view back.
    const plain = await f.server.post("/reset", { slot_id: "slot_2" });
    expect(plain.status).toBe(200);
    expect(plain.json.image).toBeUndefined();
    expect(await sh(f.server, 2, "pwd; test -e /data && echo has-data || echo no-data")).toBe("/workspace\nno-data");
  });

  it("two slots on one image are apart: files, processes and the image itself", async () => {
    await resetInto(f.server, 0, f.refs.busybox!);
    await resetInto(f.server, 1, f.refs.busybox!);
    await sh(f.server, 0, "echo mine > /etc/slot0; rm /data/b.txt");
    expect(await sh(f.server, 1, "cat /etc/slot0 2>&1; cat /data/b.txt")).toBe("cat: can't open '/etc/slot0': No such file or directory\nlinked");
    const ps = await sh(f.server, 1, "ps -o pid,comm | grep -v ps");
    expect(ps).not.toMatch(/sleep/);
    // Each slot's root (uid 0) is its own host uid; the image's other users are its own too (root).
    const maps = await Promise.all([0, 1].map((s) => sh(f.server, s, "cat /proc/self/uid_map")));
    // Not root, the server has one uid: every slot's root is it (docs/images.md).
    if (isRoot) {
      expect(maps[0]).not.toBe(maps[1]);
      const lines = maps.map((m) => m.split("\n").map((l) => l.trim().split(/\s+/).map(Number)));
      for (const l of lines) expect(l).toHaveLength(2);
      expect(lines[0]![0]![1]).not.toBe(0);
      expect(lines[0]![1]![1]).toBeGreaterThanOrEqual(2 ** 31);
      expect(lines[0]![1]![1]).not.toBe(lines[1]![1]![1]);
    }
  });

  it("root of the slot has no capability over the host: its uid 0 is not the host's, setuid gives nothing, the filter and no_new_privs hold", async () => {
    await resetInto(f.server, 0, f.refs.busybox!);
    const map = await sh(f.server, 0, "cat /proc/self/uid_map");
    expect(map.trim().split(/\s+/).slice(0, 2)).not.toEqual(["0", "0"]);
    expect(await sh(f.server, 0, "grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status | tr -s '\\t ' ' '")).toBe("NoNewPrivs: 1\nSeccomp: 2");
    // Not even root of its own namespace may mount or make namespaces (the slots' filter).
    const mount = await call(f.server, 0, "bash", { command: "mount -t tmpfs x /mnt 2>&1 || mkdir /mnt2; unshare -U true 2>&1; echo done" });
    expect(mount.output).not.toMatch(/^$/);
    expect(await sh(f.server, 0, "grep -c ' /mnt ' /proc/self/mounts || true")).toBe("0");
    // app runs the setuid-root busybox: still app.
    await resetInto(f.server, 3, f.refs.nobash!);
    await resetInto(f.server, 0, f.refs.busybox!);
    if (isRoot) expect(await sh(f.server, 0, "su -s /bin/sh app -c '/usr/local/suid/busybox id -u'")).toBe("1000");
  });

  it("network is off unless asked: only the slot's own loopback", async () => {
    await resetInto(f.server, 0, f.refs.busybox!);
    const r = await call(f.server, 0, "bash", { command: `ip -o addr 2>/dev/null | awk '{print $2}'; wget -q -T 3 -O- http://${f.registry.host}/v2/ 2>&1; echo rc=$?` });
    expect(r.output).toMatch(/rc=[1-9]/);
    expect(r.output).not.toMatch(/^\{\}/m);
    expect(r.metadata["network_isolated"]).toBe(true);
  });

  it("/health lists the cached images and which image each slot's root is", async () => {
    expect((await f.server.post("/images", { image: f.refs.whiteouts })).status).toBe(200);
    await resetInto(f.server, 0, f.refs.busybox!);
    await resetInto(f.server, 1, f.refs.nobash!);
    await f.server.post("/reset", { slot_id: "slot_2" });
    const h = (await f.server.get("/health")).json;
    expect(h.images.available).toBe(true);
    expect(h.images.cached.map((i: { reference: string }) => i.reference).sort()).toEqual([f.refs.busybox, f.refs.nobash, f.refs.whiteouts].sort());
    expect(h.slot_images[0]).toEqual({ reference: f.refs.busybox, digest: layoutDigest(busyboxImage()) });
    expect(h.slot_images[1]).toEqual({ reference: f.refs.nobash, digest: layoutDigest(noBashImage()) });
    expect(h.slot_images[2]).toBeNull();
    const slots = (await f.server.get("/slots")).json.slots;
    expect(slots[0].image).toEqual({ reference: f.refs.busybox, digest: layoutDigest(busyboxImage()), working_dir: "/srv/work" });
    expect(slots[2].image).toBeUndefined();
    const list = (await f.server.get("/images")).json;
    expect(list.images.find((i: { reference: string }) => i.reference === f.refs.busybox)).toMatchObject({ in_use: 1, layers: 2 });
  });

  it("a fork of an image slot gives each child the image with the parent's changes, owners mapped to the child, while the parent keeps running", async () => {
    await resetInto(f.server, 0, f.refs.busybox!);
    // Not root, a slot has one uid: no su to app (the file is root's inside, as every file).
    const asApp = isRoot ? "su -s /bin/sh app -c 'echo mine > /home/app/by-app'" : "echo mine > /home/app/by-app";
    await sh(f.server, 0, `echo parent > /etc/forked; rm /data/b.txt; mkdir -p /solution && echo s > /solution/s; ${asApp}`);
    await call(f.server, 0, "bash_stateful", { command: "cd /solution && export FROM_PARENT=yes" });
    const started = await fetch(`${f.server.url}/processes/start`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: "slot_0", cmd: "/bin/sh", args: ["-c", "i=0; while :; do i=$((i+1)); echo $i > /tmp/tick; sleep 0.05; done"], envs: {}, stdin: false, tag: "bg" }) });
    const reader = started.body!.getReader();
    await reader.read();
    const fork = await f.server.post("/fork", { slot_id: "slot_0", into: ["slot_1", "slot_2"] });
    expect(fork.status).toBe(200);
    expect(fork.json).toMatchObject({ success: true, mode: "copy", into: ["slot_1", "slot_2"] });
    for (const c of [1, 2]) {
      expect(await sh(f.server, c, "cat /etc/forked /solution/s; test -e /data/b.txt && echo b-back || echo b-gone; cat /data/a.txt; stat -c '%u' /home/app/by-app")).toBe(`parent\ns\nb-gone\nlinked\n${isRoot ? 1000 : 0}`);
      expect((await call(f.server, c, "bash_stateful", { command: "pwd; echo $FROM_PARENT" })).output).toBe("/solution\nyes");
    }
    const h = (await f.server.get("/health")).json;
    expect(h.slot_images[1]).toEqual(h.slot_images[0]);
    await sh(f.server, 1, "echo child > /etc/forked");
    expect(await sh(f.server, 0, "cat /etc/forked")).toBe("parent");
    expect(await sh(f.server, 2, "cat /etc/forked")).toBe("parent");
    // The parent was thawed: its background process still runs (its counter moves; bounded by tries, not time).
    const list = await f.server.post("/processes/list", { slot_id: "slot_0" });
    expect(list.json.processes.map((p: { tag?: string }) => p.tag)).toContain("bg");
    const first = await sh(f.server, 0, "cat /tmp/tick");
    let moved = false;
    for (let i = 0; i < 200 && !moved; i++) moved = (await sh(f.server, 0, "sleep 0.02; cat /tmp/tick")) !== first;
    expect(moved).toBe(true);
    await f.server.post("/processes/kill-all", { slot_id: "slot_0" });
    await reader.cancel().catch(() => undefined);
  });
});
