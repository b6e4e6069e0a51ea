import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isRoot, readEvents } from "./helpers.js";
import { openSlotPort } from "../../src/pool/slot-port.js";
import type { LeasedSlot } from "../../src/pool/types.js";
import { noBashImage, whiteoutImage } from "../support/test-images.js";
import { call, imageFixture, imagesMissing, resetInto, sh, type ImageFixture } from "../support/image-server.js";

/**
 * The tools work in any image (issue 36): the image `nobash` has busybox and nothing else
 * (no bash, no libc, no tmux, no coreutils) and names the user app. The tools never run the
 * image's programs: a static spawner and bash, busybox and a tmux with its own loader are
 * bound in read-only at /run/slotpool.
 */
describe.skipIf(imagesMissing !== undefined)(`the tools in an image without bash or libc${imagesMissing ? ` (skipped without ${imagesMissing})` : ""}`, () => {
  let f: ImageFixture;

  beforeAll(async () => {
    f = await imageFixture({ nobash: noBashImage(), whiteouts: whiteoutImage() }, { slots: 3 });
    await resetInto(f.server, 0, f.refs.nobash!);
  }, 240_000);
  afterAll(async () => {
    await f?.stop();
  });

  it("the image really has no bash: the bash tool runs the static one of the image tools", async () => {
    expect(await sh(f.server, 0, "ls /bin/bash /usr/bin/bash 2>&1; readlink /proc/$$/exe; echo ${BASH_VERSINFO[0]}")).toBe("ls: /bin/bash: No such file or directory\nls: /usr/bin/bash: No such file or directory\n/run/slotpool/bash\n5");
    const r = await call(f.server, 0, "bash", { command: "for i in 1 2 3; do printf '%s,' $i; done; echo; exit 3" });
    expect(r).toMatchObject({ success: false, output: "1,2,3,", error: "Exit code: 3" });
  });

  it("every call as the image's user (app) has the slot's limits, the CPU limit included, call after call", async () => {
    // A call's RLIMIT_CPU is its timeout + 1 s (30 s by default): set before the user switch, never left unlimited.
    // Back to back: a bash started ahead for an image user was refused its /dev/fd/3 now and then (the spawner no longer starts one for them).
    for (let i = 0; i < 30; i++) expect(await sh(f.server, 0, "ulimit -t; ulimit -u; id -u")).toBe(`31\n256\n${isRoot ? 1000 : 0}`);
  });

  it("bash_stateful keeps its directory and variables between calls, and tmux drives the same terminal", async () => {
    const a = await call(f.server, 0, "bash_stateful", { command: "cd /tmp && export STATE=kept && echo started" });
    expect(a).toMatchObject({ success: true, output: "started" });
    const b = await call(f.server, 0, "bash_stateful", { command: "pwd; echo $STATE; id -u; echo $PATH" });
    expect(b.output).toBe(`/tmp\nkept\n${isRoot ? 1000 : 0}\n/bin`);
    expect((await call(f.server, 0, "bash_stateful", { command: "false" })).error).toBe("Exit code: 1");
    expect((await call(f.server, 0, "tmux", { action: "send_keys", keys: "echo typed-$((6*7))" })).success).toBe(true);
    let screen = "";
    // The keys are typed into a live shell: wait (bounded by the call count, not time) until it has run them.
    for (let i = 0; i < 50 && !/typed-42/.test(screen); i++) screen = (await call(f.server, 0, "tmux", { action: "capture", lines: 20 })).output;
    expect(screen).toMatch(/typed-42/);
  });

  it("read_file and write_file work from the image's working directory and anywhere in its root", async () => {
    expect((await call(f.server, 0, "write_file", { path: "dir/new.txt", content: "written\n" })).metadata["path"]).toBe("/home/app/dir/new.txt");
    expect((await call(f.server, 0, "read_file", { path: "/home/app/dir/new.txt" })).output).toBe("written\n");
    expect((await call(f.server, 0, "read_file", { path: "../../etc/group" })).output).toMatch(/^root:x:0:/);
    const missing = await call(f.server, 0, "read_file", { path: "/nope/x" });
    expect(missing).toMatchObject({ success: false, metadata: { path_problem: "not_found" } });
  });

  it("artifacts list, read and archive the image root", async () => {
    const list = await f.server.post("/artifacts/list", { slot_id: "slot_0", path: "/etc" });
    expect(list.json.entries.map((e: { path: string }) => e.path)).toEqual(expect.arrayContaining(["/etc/passwd", "/etc/group"]));
    const read = await f.server.post("/artifacts/read", { slot_id: "slot_0", path: "secret.txt" });
    expect(read.json).toMatchObject({ success: true, content: "app's secret\n", path: "/home/app/secret.txt" });
    const archive = await f.server.post("/artifacts/archive", { slot_id: "slot_0", path: "/etc" });
    expect(archive.json).toMatchObject({ success: true, format: "tar.gz" });
    expect(archive.json.entries).toBeGreaterThanOrEqual(3);
  });

  it("a process session starts /bin/bash -l -c as E2B's SDK does, as E2B's user, which the image does not have", async () => {
    const res = await fetch(`${f.server.url}/processes/start`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ slot_id: "slot_0", cmd: "/bin/bash", args: ["-l", "-c", "echo $HOME $USER; pwd; id -u; echo hi > ~/f && cat ~/f"], envs: { E2B_X: "1" }, stdin: false, workspace_alias: "/home/user" }),
    });
    const events: Array<{ type: string; data?: string; exit_code?: number }> = [];
    await readEvents(res, events);
    const out = events.filter((e) => e.type === "stdout").map((e) => Buffer.from(e.data!, "base64").toString()).join("");
    expect(out).toBe(`/home/user user\n/home/app\n${isRoot ? 1000 : 0}\nhi\n`);
    expect(events.at(-1)).toMatchObject({ type: "end", exit_code: 0 });
    expect(await sh(f.server, 0, "grep -c '^user:' /etc/passwd || true")).toBe("0");
  });

  it("two process sessions of a slot share its loopback; another slot's is not theirs", async () => {
    const start = (slot: number, cmd: string) =>
      fetch(`${f.server.url}/processes/start`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: `slot_${slot}`, cmd: "/bin/sh", args: ["-c", cmd], envs: {}, stdin: false }) });
    await resetInto(f.server, 1, f.refs.nobash!);
    const server = start(0, "echo served | nc -l -p 8089");
    const serverEvents: Array<{ type: string }> = [];
    const served = server.then((r) => readEvents(r, serverEvents));
    // The listener is up once nc has bound the port: a client retries until it answers (bounded by tries).
    const client = async (slot: number): Promise<string> => {
      for (let i = 0; i < 100; i++) {
        const events: Array<{ type: string; data?: string }> = [];
        await readEvents(await start(slot, "nc -w 2 127.0.0.1 8089 </dev/null"), events);
        const out = events.filter((e) => e.type === "stdout").map((e) => Buffer.from(e.data!, "base64").toString()).join("");
        if (out || slot !== 0) return out;
      }
      return "";
    };
    expect(await client(1)).toBe("");
    expect(await client(0)).toBe("served\n");
    await served;
  });

  it("an image whose User is root: the terminal and sessions run as root of the slot", async () => {
    await resetInto(f.server, 2, f.refs.whiteouts!);
    expect((await call(f.server, 2, "bash_stateful", { command: "id -u; pwd" })).output).toBe("0\n/opt");
  });

  it("a port tunnel reaches a server a process session runs in the image (the relay joins the slot's own user namespace)", async () => {
    await resetInto(f.server, 1, f.refs.nobash!);
    const started = fetch(`${f.server.url}/processes/start`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: "slot_1", cmd: "/bin/sh", args: ["-c", "while :; do echo from-image-port | nc -l -p 8091; done"], envs: {}, stdin: false }) });
    const lease = { slotId: "slot_1", container: { id: "c", index: 0, url: f.server.url, token: undefined, slots: 3 }, touch: () => undefined } as unknown as LeasedSlot;
    let got = "";
    // nc binds the port a moment after the session starts: retried (bounded by tries, not time).
    for (let i = 0; i < 100 && !got.includes("from-image-port"); i++) {
      const socket = await openSlotPort(lease, 8091, { allowNetwork: false }).catch(() => undefined);
      if (!socket) {
        // wait: nc binds the port a moment after the session starts, and no event says when (bounded by the tries).
        await new Promise((r) => setTimeout(r, 50));
        continue;
      }
      got = await new Promise<string>((resolve) => {
        let buf = "";
        socket.on("data", (d: Buffer) => (buf += d.toString()));
        socket.on("close", () => resolve(buf));
        socket.on("error", () => resolve(buf));
      });
    }
    expect(got).toBe("from-image-port\n");
    await f.server.post("/processes/kill-all", { slot_id: "slot_1" });
    await started.then((r) => r.body?.cancel()).catch(() => undefined);
  });
});
