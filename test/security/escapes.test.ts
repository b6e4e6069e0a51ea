import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gunzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import type { ContainerInfo } from "../../src/pool/types.js";
import { eventually, processesWithMarker, startAttackServer, within, type AttackServer } from "./support.js";
import { serverView } from "../support/server-view.js";

/**
 * Escape attempts against a real sandbox server: every file route (read_file / write_file
 * through /execute) and artifact route (/artifacts/read|list|archive), other slots' files
 * and processes, the host's /proc, the server's token and environment, and the network when
 * a call says allow_network: false. A secret lives in slot_1; slot_0 attacks.
 */
const SECRET = `slot1-secret-${randomBytes(8).toString("hex")}`;
const ENV_CANARY = `env-canary-${randomBytes(8).toString("hex")}`;

let server: AttackServer;
/** Host dir outside the data dir holding a canary file that writes must never reach. */
let outside: string;
let canaryFile: string;
let slot1Host: string;

beforeAll(async () => {
  server = await startAttackServer({ slots: 3, env: { SLOTPOOL_TEST_CANARY: ENV_CANARY } });
  expect((await server.health()).json.bwrap_available).toBe(true);
  slot1Host = join(server.dataDir, "slot_1");
  outside = mkdtempSync(join(tmpdir(), "slotpool-sec-outside-"));
  canaryFile = join(outside, "canary.txt");
  writeFileSync(canaryFile, "untouched");
  const w = await server.tool(1, "write_file", { path: "secret.txt", content: SECRET });
  expect(w.success, w.error).toBe(true);
  // Symlinks planted by slot_0's own commands: relative, absolute-host, absolute-sandbox, loops, chains.
  const plant = await server.bash(
    0,
    [
      "ln -s ../slot_1 l_sibling",
      "ln -s ../slot_1/secret.txt l_sibling_file",
      `ln -s ${slot1Host} l_host_dir`,
      `ln -s ${slot1Host}/secret.txt l_host_file`,
      `ln -s ${outside} l_outside_dir`,
      `ln -s ${canaryFile} l_canary`,
      "ln -s /etc/passwd l_etc_passwd",
      "ln -s / l_root",
      "ln -s l_loop l_loop",
      "ln -s l_sibling/secret.txt l_chain",
      "mkdir -p d/e && ln -s ../../../slot_1 d/e/l_deep",
      "echo planted",
    ].join(" && "),
  );
  expect(plant.output, JSON.stringify(plant)).toBe("planted");
});

afterAll(async () => {
  await server?.stop();
  if (outside) rmSync(outside, { recursive: true, force: true });
});

const TRAVERSALS = [
  "../slot_1/secret.txt",
  "/workspace/../slot_1/secret.txt",
  "a/../../slot_1/secret.txt",
  "./../slot_1/secret.txt",
  "..",
  "../",
  "/etc/passwd",
  "/proc/1/environ",
  "/proc/self/environ",
];
const SYMLINKS = ["l_sibling/secret.txt", "l_sibling_file", "l_host_dir/secret.txt", "l_host_file", "l_etc_passwd", "l_root/etc/passwd", "l_loop", "l_chain", "d/e/l_deep/secret.txt"];

/** Paths naming host locations are written with placeholders: the dirs exist only once beforeAll ran. */
function at(path: string): string {
  return path.replace("@SLOT1@", slot1Host).replace("@OUTSIDE@", outside);
}
/** Errors may echo a symlink's own target (text the slot wrote itself); other host paths must not appear. */
function echoesOwnTarget(path: string): boolean {
  return path.includes("l_host") || path.includes("@");
}

function noLeak(text: string): void {
  expect(text).not.toContain(SECRET);
  expect(text).not.toContain(server.token);
  expect(text).not.toContain(ENV_CANARY);
  expect(text).not.toMatch(/root:x:0:0/);
}

/**
 * A file tool call on slot_0 that must be refused: a path that leaves the workspace as
 * written (or holds a NUL) gets 400 naming args.path before anything is touched (issue 20);
 * one that escapes through a symlink is refused where it is opened (200, success: false).
 */
async function refusedFileTool(tool: string, args: Record<string, unknown>): Promise<{ text: string }> {
  const r = await server.request("POST", "/execute", { slot_id: "slot_0", tool, args });
  if (r.status === 400) expect(r.json.field, r.text).toBe("args.path");
  else {
    expect(r.status, r.text).toBe(200);
    expect(r.json.success, r.text).toBe(false);
  }
  expect(String(r.json.error).length).toBeGreaterThan(10);
  return r;
}

describe("file tools refuse traversal and symlink escapes", () => {
  it("the host paths are real (control: the secret is where the attacks aim)", () => {
    expect(readFileSync(serverView(server.proc.pid, join(slot1Host, "secret.txt")), "utf8")).toBe(SECRET);
    expect(existsSync(serverView(server.proc.pid, join(server.dataDir, "slot_0", "l_sibling")))).toBe(true);
  });

  for (const path of [...TRAVERSALS, ...SYMLINKS, "@SLOT1@/secret.txt", "secret.txt\u0000../x"]) {
    it(`read_file ${JSON.stringify(path)} is refused with a clear error`, async () => {
      const r = await refusedFileTool("read_file", { path: at(path) });
      noLeak(r.text);
      // Host paths never reach the client.
      if (!echoesOwnTarget(path)) expect(r.text).not.toContain(server.dataDir);
    });
  }

  for (const path of ["../slot_1/pwned.txt", "/workspace/../slot_1/pwned.txt", "l_sibling/pwned.txt", "l_host_dir/pwned.txt", "l_outside_dir/pwned.txt", "l_canary", "l_sibling_file", "d/e/l_deep/pwned.txt", "@OUTSIDE@/pwned.txt", "@SLOT1@/pwned.txt"]) {
    it(`write_file ${JSON.stringify(path)} is refused and writes nothing outside the workspace`, async () => {
      const r = await refusedFileTool("write_file", { path: at(path), content: "pwned" });
      if (!echoesOwnTarget(path)) expect(r.text).not.toContain(server.dataDir);
      expect(readFileSync(canaryFile, "utf8")).toBe("untouched");
      expect(readFileSync(serverView(server.proc.pid, join(slot1Host, "secret.txt")), "utf8")).toBe(SECRET);
      expect(readdirSync(serverView(server.proc.pid, slot1Host)).sort()).toEqual(["secret.txt"]);
      expect(readdirSync(outside)).toEqual(["canary.txt"]);
    });
  }
});

describe("artifact routes refuse traversal and symlink escapes", () => {
  for (const path of [...TRAVERSALS, ...SYMLINKS, "@SLOT1@/secret.txt"]) {
    it(`/artifacts/read ${JSON.stringify(path)} is refused`, async () => {
      const r = await server.artifact("read", { slot_id: "slot_0", path: at(path) });
      expect(r.status).toBeLessThan(500);
      expect(r.json?.success ?? false).toBe(false);
      noLeak(r.text);
      if (!echoesOwnTarget(path)) expect(r.text).not.toContain(server.dataDir);
    });
  }

  for (const path of ["..", "../slot_1", "l_sibling", "l_host_dir", "l_root", "l_outside_dir", "d/e/l_deep", "@SLOT1@"]) {
    it(`/artifacts/list and /artifacts/archive of ${JSON.stringify(path)} are refused`, async () => {
      const list = await server.artifact("list", { slot_id: "slot_0", path: at(path), recursive: true });
      expect(list.status).toBeLessThan(500);
      expect(list.json?.success ?? false, list.text.slice(0, 300)).toBe(false);
      expect(list.text).not.toContain("secret.txt");
      const arch = await server.artifact("archive", { slot_id: "slot_0", path: at(path), format: "tar.gz" });
      expect(arch.status).toBeLessThan(500);
      expect(arch.json?.success ?? false, arch.text.slice(0, 300)).toBe(false);
    });
  }

  it("a recursive list and an archive of the whole workspace do not follow planted symlinks", async () => {
    const list = await server.artifact("list", { slot_id: "slot_0", path: ".", recursive: true });
    expect(list.status).toBe(200);
    const paths: string[] = list.json.entries.map((e: { path: string }) => e.path);
    expect(paths).toContain("l_sibling");
    expect(paths.some((p) => p.includes("secret.txt"))).toBe(false);
    expect(list.text).not.toContain(server.dataDir);
    const arch = await server.artifact("archive", { slot_id: "slot_0", path: ".", format: "tar.gz" });
    expect(arch.status).toBe(200);
    const b64: string = arch.json.content ?? arch.json.archive ?? arch.json.data;
    const tar = gunzipSync(Buffer.from(b64, "base64")).toString("latin1");
    expect(tar).toContain("l_sibling");
    noLeak(tar);
  });
});

describe("commands cannot see or touch other slots", () => {
  it("bash sees neither the other workspaces nor the data dir", async () => {
    const r = await server.bash(
      0,
      `cat /workspace/../slot_1/secret.txt; cat ${slot1Host}/secret.txt; cat l_host_file; cat l_sibling_file; ls /workspace/.. ${server.dataDir}; find / -xdev -name secret.txt 2>/dev/null; echo done`,
    );
    expect(r.output).toContain("done");
    noLeak(r.output);
    const stdout = r.output.split("\n[stderr]\n")[0]!;
    expect(stdout).not.toContain("slot_1");
  });

  it("another slot's process can be neither seen nor signalled (kill by host pid, kill -9 -1, /proc/<pid>)", async () => {
    const marker = `slotpool-victim-${randomBytes(4).toString("hex")}`;
    const victim = server.bash(1, `exec -a ${marker} sleep 3`, { timeout: 20 });
    expect(await eventually(() => processesWithMarker(marker).length > 0, 10_000)).toBe(true);
    const hostPid = processesWithMarker(marker)[0]!.pid;
    const attack = await server.bash(0, `echo procs: $(ls -d /proc/[0-9]* | wc -l); for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done 2>/dev/null; ls -d /proc/${hostPid} 2>&1; cat /proc/${hostPid}/cmdline 2>&1; kill -9 ${hostPid} 2>&1; kill -9 -1; echo attacked`);
    expect(attack.output).toMatch(/procs: \d+/);
    expect(attack.output).not.toContain(marker);
    const v = await within(15_000, "victim call", victim);
    expect(v.success, JSON.stringify(v)).toBe(true);
    expect(v.metadata.exit_code).toBe(0);
    expect(Number(v.metadata.duration_ms)).toBeGreaterThan(2_500);
  });

  it("system directories are read-only and /sys, the host /proc and its processes are invisible", async () => {
    const r = await server.bash(0, "touch /etc/x /usr/x /bin/x 2>&1 | wc -l; ls /sys 2>&1 | head -3; ls /proc | grep -c '^[0-9]'; cat /proc/1/cmdline | tr '\\0' ' '; echo");
    const [roErrors, ...rest] = r.output.split("\n");
    expect(Number(roErrors)).toBe(3);
    const text = rest.join("\n");
    expect(text).toMatch(/No such file|cannot access/);
    const pidCount = Number(rest.find((l) => /^\d+$/.test(l)));
    expect(pidCount).toBeLessThan(10);
    expect(text).toContain("spawner");
    expect(text).not.toContain(String(server.proc.pid) + " ");
  });
});

describe("the token and the server's environment stay outside", () => {
  it("env, /proc/*/environ, /proc/<server pid>, mountinfo and a filesystem grep do not reveal the token or host environment", async () => {
    const pid = server.proc.pid;
    const r = await server.bash(
      0,
      [
        "env",
        "cat /proc/1/environ /proc/self/environ /proc/*/environ 2>/dev/null | tr '\\0' '\\n'",
        `cat /proc/${pid}/environ /proc/${pid}/cmdline 2>&1`,
        "cat /proc/self/mountinfo",
        `grep -rsl -e ${server.token.slice(0, 12)} -e ${ENV_CANARY.slice(0, 12)} /workspace /tmp /run /etc /proc/[0-9]*/environ 2>/dev/null`,
        "echo end",
      ].join("; "),
    );
    expect(r.output).toMatch(/end$/);
    noLeak(r.output);
    expect(r.output).not.toContain("SANDBOX_TOKEN");
    expect(r.output).not.toContain("SLOTPOOL_TEST_CANARY");
    // The other slot's workspace is not mounted here.
    expect(r.output).not.toContain(slot1Host);
  });

  it("a slot with network cannot reach its own server's API at all (network on = the internet, never the host)", async () => {
    const port = new URL(server.url).port;
    const req = `exec 3<>/dev/tcp/127.0.0.1/${port} && printf 'POST /reset HTTP/1.0\\r\\ncontent-type: application/json\\r\\ncontent-length: 21\\r\\n\\r\\n{"slot_id":"slot_1"}' >&3 && head -1 <&3`;
    const withNet = await server.bash(0, req, { allowNetwork: true });
    expect(withNet.metadata.network_isolated).toBe(false);
    expect(withNet.output).not.toMatch(/HTTP/);
    expect(readFileSync(serverView(server.proc.pid, join(slot1Host, "secret.txt")), "utf8")).toBe(SECRET);
    const noNet = await server.bash(0, req, { allowNetwork: false });
    expect(noNet.output).not.toMatch(/HTTP/);
  });
});

describe("allow_network: false cuts the network", () => {
  let listener: Server;
  let port = 0;
  let accepted = 0;
  beforeAll(async () => {
    listener = createServer((s) => {
      accepted++;
      s.end("hello-from-host\n");
    });
    await new Promise<void>((r) => listener.listen(0, "127.0.0.1", () => r()));
    port = (listener.address() as { port: number }).port;
  });
  afterAll(() => new Promise<void>((r) => listener.close(() => r())));

  it("a listener on the host's 127.0.0.1 is unreachable, with network off and (issue 11) with network on too", async () => {
    const cmd = `(exec 3<>/dev/tcp/127.0.0.1/${port} && head -1 <&3) 2>&1; echo rc=$?`;
    const off = await server.bash(0, cmd, { allowNetwork: false });
    expect(off.metadata.network_isolated).toBe(true);
    expect(off.output).not.toContain("hello-from-host");
    expect(off.output).toMatch(/rc=[1-9]/);
    expect(accepted).toBe(0);
    const on = await server.bash(0, `${cmd}; ip -o link | grep -c tap0`, { allowNetwork: true });
    expect(on.metadata.network_isolated).toBe(false);
    expect(on.output).not.toContain("hello-from-host");
    // The network is there (slirp4netns's tap0), only the host is not reachable.
    expect(on.output.trim().split("\n").at(-1)).toBe("1");
    const again = await server.bash(0, cmd, { allowNetwork: false });
    expect(again.output).not.toContain("hello-from-host");
    expect(accepted).toBe(0);
  });

  it("only a loopback interface exists without network", async () => {
    const r = await server.bash(0, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '");
    expect(r.output.trim()).toBe("lo");
  });
});

describe("sandboxing is not silently lost", () => {
  it("containers started by LocalProvisioner run their commands sandboxed (data dir under mkdtemp's 0700)", async () => {
    const prov = new LocalProvisioner({ slotsPerContainer: 1 });
    const up = new Promise<ContainerInfo>((resolve, reject) => {
      void prov.start(
        {
          containerStarting() {},
          containerUp: (info) => resolve(info),
          containerGone() {},
          problem: (e) => reject(e),
        },
        1,
      );
    });
    try {
      const info = await within(30_000, "local container", up);
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (info.token) headers["authorization"] = `Bearer ${info.token}`;
      const res = await fetch(`${info.url}/execute`, {
        method: "POST",
        headers,
        body: JSON.stringify({ slot_id: "slot_0", tool: "bash", args: { command: "true", require_sandbox: true } }),
      });
      const body = (await res.json()) as { success: boolean; error: string; metadata: { sandboxed?: boolean } };
      expect(body.error).toBe("");
      expect(body.metadata.sandboxed).toBe(true);
    } finally {
      await prov.stop({ purge: true });
    }
  });
});

describe("special files planted by a command do not wedge the server", () => {
  it("FIFOs: read_file, write_file and every artifact route answer at once; other slots are unaffected", async () => {
    expect((await server.bash(0, "mkfifo fifo_r fifo_w && echo made")).output).toBe("made");
    const r = await within(20_000, "read_file on a FIFO", server.tool(0, "read_file", { path: "fifo_r" }));
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/not a regular file/);
    const w = await within(20_000, "write_file on a FIFO", server.tool(0, "write_file", { path: "fifo_w", content: "x" }));
    expect(w.success).toBe(false);
    const ar = await within(20_000, "/artifacts/read on a FIFO", server.artifact("read", { slot_id: "slot_0", path: "fifo_r" }));
    expect(ar.json.success).toBe(false);
    const arch = await within(20_000, "/artifacts/archive over FIFOs", server.artifact("archive", { slot_id: "slot_0", path: ".", format: "tar.gz" }));
    expect(arch.status).toBe(200);
    const list = await within(20_000, "/artifacts/list over FIFOs", server.artifact("list", { slot_id: "slot_0", path: ".", recursive: false }));
    expect(list.json.entries.find((e: { path: string }) => e.path === "fifo_r")?.type).toBe("other");
    expect((await within(20_000, "other slot", server.bash(2, "echo alive"))).output).toBe("alive");
  });
});
