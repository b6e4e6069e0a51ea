/**
 * Disk bounded per slot (issue 11, hole 3). `--disk-mb` bounds /tmp and /var/tmp of every
 * slot (a tmpfs of that size in the slot's namespaces, root or not); by default, where the
 * server may mount (root; not root, in a user namespace of its own), the workspace (a
 * template view's writes included), /tmp and /var/tmp share one tmpfs of that size per slot. A slot that writes past it gets a write error (ENOSPC), the other
 * slots and the server keep working, and reset frees the space.
 */
import { execFileSync } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { serversMayMount, serverView } from "../support/server-view.js";
import { isRoot, startAttackServer, startCliServer, type AttackServer, type CliServer } from "./support.js";

const write = (path: string, mb: number) => `dd if=/dev/zero of=${path} bs=1M count=${mb} 2>&1; echo "rc=$?"`;

/**
 * A one-slot `slotpool sandbox-server` (`--disk-mb 20`) on a data dir under a fresh base dir
 * (made traversable), for the enclosing describe; `opts` as for startCliServer.
 */
function cliServerFor(dirPrefix: string, opts: { env?: NodeJS.ProcessEnv; prefix?: string[] }): { server: () => CliServer; base: () => string } {
  let server: CliServer | undefined;
  let base: string | undefined;
  beforeAll(async () => {
    base = mkdtempSync(join(tmpdir(), dirPrefix));
    chmodSync(base, 0o755);
    server = await startCliServer(["sandbox-server", "--port", "0", "--slots", "1", "--data-dir", join(base, "data"), "--disk-mb", "20"], { ...opts, startTimeoutMs: 60_000 });
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
    if (base) rmSync(base, { recursive: true, force: true });
  });
  return { server: () => server!, base: () => base! };
}

/** An attack server for the enclosing describe: started before its tests, stopped after them. */
function serverFor(extraArgs: string[], slots = 2): () => AttackServer {
  let server: AttackServer | undefined;
  beforeAll(async () => {
    server = await startAttackServer({ slots, extraArgs });
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
  });
  return () => server!;
}

describe("--disk-mb bounds a slot's /tmp (any user)", () => {
  const server = serverFor(["--disk-mb", "20"]);

  it("a write past the bound fails with ENOSPC; the slot's next namespace (after reset) has the space again", async () => {
    const r = await server().bash(0, write("/tmp/big", 30));
    expect(r.output).toMatch(/No space left on device/);
    expect(r.output).toMatch(/rc=1/);
    expect((await server().reset(0)).json?.success).toBe(true);
    const again = await server().bash(0, write("/tmp/fits", 15));
    expect(again.output).toMatch(/rc=0/);
  }, 60_000);
});

describe.runIf(serversMayMount)("by default (root, or not root in a user namespace of the server's own): workspace, /tmp and /var/tmp share one bound per slot", () => {
  const server = serverFor(["--disk-mb", "20"]);

  it("workspace + /tmp past the bound: ENOSPC in that slot only; the other slot and the server keep working; reset frees it", async () => {
    expect((await server().bash(0, write("/workspace/a", 12))).output).toMatch(/rc=0/);
    const over = await server().bash(0, write("/tmp/b", 12));
    expect(over.output).toMatch(/No space left on device/);
    // write_file through the server is bounded too.
    const viaTool = await server().tool(0, "write_file", { path: "c.txt", content: "x".repeat(9 * 1024 * 1024) });
    expect(viaTool.success).toBe(false);
    // The other slot has its own bound, untouched.
    expect((await server().bash(1, write("/workspace/a", 15))).output).toMatch(/rc=0/);
    expect((await server().health()).status).toBe(200);
    expect((await server().reset(0)).json?.success).toBe(true);
    const df = await server().bash(0, "df -k /workspace | tail -1 | awk '{print $3}'");
    expect(Number(df.output.trim())).toBeLessThan(1024);
    expect((await server().bash(0, write("/workspace/again", 15))).output).toMatch(/rc=0/);
  }, 60_000);
});

/** Checksum of a tree's paths, modes and file contents (run inside it). */
const TREE_SUM = "(find . -mindepth 1 -printf '%p %y %m\\n' | LC_ALL=C sort; find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-64";

describe.runIf(serversMayMount)("templates under the disk bound: a view's writes count against the slot's tmpfs", () => {
  const server = serverFor(["--disk-mb", "20"]);
  let store: string;
  beforeAll(async () => {
    // 8 MB of template: read through the view, it must not count against the slot's 20 MB.
    const built = await server().request("POST", "/templates", { name: "tpl", files: { "src/app.py": "print(1)\n" }, setup: ["head -c 8M /dev/urandom > blob && chmod 444 blob"] });
    expect(built.json?.success, built.text).toBe(true);
    const root = join(server().dataDir, ".slotpool", "templates", "store");
    store = join(root, readdirSync(root).find((n) => n.startsWith("tpl-"))!);
  }, 120_000);
  const resetInto = (slot: number) => server().request("POST", "/reset", { slot_id: `slot_${slot}`, template: "tpl" });
  const hostSum = () => execFileSync("bash", ["-c", TREE_SUM], { cwd: store, encoding: "utf8" }).trim();

  it("writing 30 MB into the view fails with ENOSPC; the template, the other slot and the server are untouched; reset gives the template back and frees the space", async () => {
    const sum = hostSum();
    expect((await resetInto(0)).json?.success).toBe(true);
    expect((await server().bash(0, TREE_SUM)).output).toBe(sum);
    // The view's writable layer is on the slot's bounded disk, in a dir of the server's own
    // (root's as root), which no namespace of the slot has.
    const mount = (await server().bash(0, "grep ' /workspace ' /proc/self/mountinfo")).output;
    const upper = /upperdir=([^,\s]+)/.exec(mount)?.[1] ?? "";
    expect(upper.startsWith(join(server().dataDir, ".slotpool", "disk_0", "views") + "/"), mount).toBe(true);
    const views = statSync(serverView(server().proc.pid, join(server().dataDir, ".slotpool", "disk_0", "views")));
    expect({ mode: views.mode & 0o777, uid: views.uid }).toEqual({ mode: 0o700, uid: process.getuid!() });
    expect((await server().bash(0, `ls ${upper} || echo absent; echo x > ${upper}/evil || echo refused`)).output).toMatch(/absent[\s\S]*refused/);

    const over = await server().bash(0, `echo edit >> src/app.py; rm -f blob; ${write("/workspace/big", 30)}`);
    expect(over.output).toMatch(/No space left on device/);
    expect(over.output).toMatch(/rc=1/);
    expect(hostSum()).toBe(sum);
    // The other slot (in the same template) has its own bound, untouched.
    expect((await resetInto(1)).json?.success).toBe(true);
    expect((await server().bash(1, write("/workspace/other", 15))).output).toMatch(/rc=0/);
    expect((await server().health()).status).toBe(200);

    expect((await resetInto(0)).json?.success).toBe(true);
    expect((await server().bash(0, TREE_SUM)).output).toBe(sum);
    expect((await server().bash(0, write("/workspace/fits", 15))).output).toMatch(/rc=0/);
    // Still bounded after a reset from one view into the next (the bound lies under the view).
    expect((await server().bash(0, write("/workspace/more", 10))).output).toMatch(/No space left on device/);
    expect(hostSum()).toBe(sum);
  }, 90_000);
});

describe.runIf(serversMayMount)("--no-disk-workspace: the way out, said in /health", () => {
  const server = serverFor(["--disk-mb", "20", "--no-disk-workspace"], 1);

  it("only /tmp is bounded: 30 MB fit in the workspace, not in /tmp", async () => {
    const health = (await server().health()).json;
    expect(health.limits.disk).toBe("tmp_only");
    expect(health.limits.gaps.join("\n")).toMatch(/workspace disk use.*--no-disk-workspace/);
    expect((await server().bash(0, write("/workspace/big", 30))).output).toMatch(/rc=0/);
    expect((await server().bash(0, write("/tmp/big", 30))).output).toMatch(/No space left on device/);
  }, 60_000);
});

describe.runIf(!isRoot)("not root, without a user namespace of its own: /tmp-only, and it says so (skipped as root)", () => {
  // The marker says "already in namespaces of its own": the CLI does not re-execute itself,
  // so the server runs where it was started, as a server started in-process would.
  const { server } = cliServerFor("slotpool-nouserns-", { env: { SLOTPOOL_OWN_MOUNT_NS: "1" } });

  it("bounds /tmp only; /health names why the workspace is not bounded; templates are copied", async () => {
    const health = (await (await fetch(`${server().url}/health`)).json()) as { limits: { disk: string; gaps: string[] } };
    expect(health.limits.disk).toBe("tmp_only");
    expect(health.limits.gaps.join("\n")).toMatch(/workspace disk use.*not root and runs in no user namespace of its own/);
    const templates = (await (await fetch(`${server().url}/templates`)).json()) as { mode: string };
    expect(templates.mode).toBe("copy");
    expect((await server().bash(write("/tmp/big", 30), { require_sandbox: true })).output).toMatch(/No space left on device/);
    expect((await server().bash(write("/workspace/big", 30), { require_sandbox: true })).output).toMatch(/rc=0/);
  }, 60_000);
});

describe.runIf(isRoot && existsSync("/usr/bin/setpriv"))("root without CAP_SYS_ADMIN (a default Docker container): /tmp-only, and it says so", () => {
  // The capability leaves the bounding set: `unshare --mount` and every mount are refused.
  const { server, base } = cliServerFor("slotpool-nocap-", { prefix: ["/usr/bin/setpriv", "--bounding-set", "-sys_admin", "--"] });

  it("falls back to bounding /tmp and /var/tmp only; /health, the start-up line and a warning name the reason", async () => {
    const health = (await (await fetch(`${server().url}/health`)).json()) as { limits: { disk: string; gaps: string[] } };
    expect(health.limits.disk).toBe("tmp_only");
    expect(health.limits.gaps.join("\n")).toMatch(/workspace disk use.*cannot mount a tmpfs per slot/);
    const listening = server().logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l["msg"] === "listening");
    expect(String(listening?.["disk_reason"])).toMatch(/cannot mount a tmpfs per slot/);
    expect(server().logs.some((l) => l.includes("not in a mount namespace of its own") && l.includes("unshare --mount refused"))).toBe(true);
    expect((await server().bash(write("/tmp/big", 30), { require_sandbox: true })).output).toMatch(/No space left on device/);
    expect((await server().bash(write("/workspace/big", 30), { require_sandbox: true })).output).toMatch(/rc=0/);
  }, 60_000);
  it("the local launcher (LocalProvisioner) without it starts servers too, without a mount namespace of their own", () => {
    const data = join(base(), "launched");
    const out = execFileSync("/usr/bin/setpriv", ["--bounding-set", "-sys_admin", "--", process.execPath, "--import", "tsx", "test/security/fixtures/launch-sandbox.ts", data], { encoding: "utf8", timeout: 90_000 });
    const health = JSON.parse(out.trim().split("\n").pop()!) as { status: string; limits: { disk: string } };
    expect(health.status).toBe("ok");
    expect(health.limits.disk).toBe("tmp_only");
  }, 120_000);
});
