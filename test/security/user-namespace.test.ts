/**
 * A non-root sandbox server runs in a user namespace of its own holding a mount namespace
 * (src/host/mount-namespace.ts): that is what lets it mount a tmpfs per slot (the disk
 * bound) and overlayfs views of templates. It keeps the user's uid, its capabilities are
 * over that namespace only, and no command of a slot holds any of them, sandboxed or not.
 * Its mounts are never seen on the host.
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, readlinkSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { descendants } from "../support/processes.js";
import { serversMayMount } from "../support/server-view.js";
import { isRoot, startCliServer, type CliServer } from "./support.js";

/** The sandbox-server process below `pid` (the CLI re-executes itself under unshare), in a user namespace other than ours. */
function serverBelow(pid: number): number | undefined {
  return descendants(pid).find((p) => {
    try {
      return readFileSync(`/proc/${p}/cmdline`, "utf8").includes("sandbox-server") && readlinkSync(`/proc/${p}/ns/user`) !== readlinkSync("/proc/self/ns/user");
    } catch {
      return false;
    }
  });
}

const capsOf = (status: string) => Object.fromEntries([...status.matchAll(/^(Cap(?:Inh|Prm|Eff|Amb)):\s*([0-9a-f]+)$/gm)].map((m) => [m[1]!, m[2]!]));
const NO_CAPS = { CapInh: "0000000000000000", CapPrm: "0000000000000000", CapEff: "0000000000000000", CapAmb: "0000000000000000" };

describe.runIf(!isRoot && serversMayMount)("not root: the server's own user namespace (skipped as root, or where servers may not mount)", () => {
  const servers: CliServer[] = [];
  let base: string;
  const start = async (extra: string[] = []) => {
    const s = await startCliServer(["sandbox-server", "--port", "0", "--slots", "1", "--data-dir", join(base, `data${servers.length}`), "--disk-mb", "20", ...extra], { startTimeoutMs: 60_000 });
    servers.push(s);
    return s;
  };
  beforeAll(() => {
    base = mkdtempSync(join(tmpdir(), "slotpool-userns-"));
  });
  afterAll(async () => {
    for (const s of servers) await s.stop();
    rmSync(base, { recursive: true, force: true });
  });

  it("keeps the user's uid, in a user and mount namespace other than the host's; its mounts never show on the host", async () => {
    const s = await start();
    const pid = serverBelow(s.pid);
    expect(pid, "no sandbox-server in a user namespace of its own below the CLI's process").toBeDefined();
    const status = readFileSync(`/proc/${pid}/status`, "utf8");
    expect(Number(/^Uid:\s+(\d+)/m.exec(status)?.[1])).toBe(process.getuid!());
    expect(readlinkSync(`/proc/${pid}/ns/mnt`)).not.toBe(readlinkSync("/proc/self/ns/mnt"));
    // Capabilities over its own namespace (to mount there); a process of the host's
    // namespace with the same uid has none.
    expect(capsOf(status)["CapEff"]).not.toBe(NO_CAPS.CapEff);
    expect(capsOf(readFileSync("/proc/self/status", "utf8"))["CapEff"]).toBe(NO_CAPS.CapEff);
    const health = (await (await fetch(`${s.url}/health`)).json()) as { limits: { disk: string } };
    expect(health.limits.disk).toBe("workspace_and_tmp");
    expect((await s.bash("df -k /workspace | tail -1")).output).toMatch(/^tmpfs\s+20480\s/);
    expect(readFileSync("/proc/self/mountinfo", "utf8")).not.toContain(base);
  }, 90_000);

  it("a slot's commands hold no capability, sandboxed (bubblewrap started through setpriv) or not (--no-sandbox --allow-unsandboxed)", async () => {
    const sandboxed = await (servers[0] ?? (await start())).bash("grep ^Cap /proc/self/status");
    expect(sandboxed.metadata.sandboxed).toBe(true);
    expect(capsOf(sandboxed.output)).toEqual(NO_CAPS);
    const open = await start(["--no-sandbox", "--allow-unsandboxed"]);
    const unsandboxed = await open.bash("grep ^Cap /proc/self/status");
    expect(unsandboxed.metadata.sandboxed).toBe(false);
    expect(capsOf(unsandboxed.output)).toEqual(NO_CAPS);
  }, 90_000);
});

describe.runIf(!isRoot && serversMayMount)("not root, where bubblewrap cannot run inside a user namespace (e.g. an AppArmor policy) (skipped as root, or where servers may not mount)", () => {
  let server: CliServer | undefined;
  let base: string;
  beforeAll(async () => {
    base = mkdtempSync(join(tmpdir(), "slotpool-userns-refused-"));
    // A bwrap that refuses in any user namespace but the host's, as such a policy would.
    const bin = join(base, "bin");
    mkdirSync(bin);
    writeFileSync(
      join(bin, "bwrap"),
      `#!/bin/sh\nif [ "$(awk '{print $3}' /proc/self/uid_map)" != 4294967295 ]; then echo "bwrap: setting up uid map: Permission denied" >&2; exit 1; fi\nexec /usr/bin/bwrap "$@"\n`,
    );
    chmodSync(join(bin, "bwrap"), 0o755);
    // --no-network: network on runs bubblewrap inside a user namespace of unshare's, where this bwrap refuses too.
    server = await startCliServer(["sandbox-server", "--port", "0", "--slots", "1", "--data-dir", join(base, "data"), "--disk-mb", "20", "--no-network"], {
      env: { PATH: `${bin}:${process.env["PATH"] ?? "/usr/bin:/bin"}` },
      startTimeoutMs: 60_000,
    });
  }, 90_000);
  afterAll(async () => {
    await server?.stop();
    rmSync(base, { recursive: true, force: true });
  });

  it("the server stays in the user's namespace, still sandboxes every slot, bounds /tmp only and says why", async () => {
    expect(serverBelow(server!.pid)).toBeUndefined();
    const health = (await (await fetch(`${server!.url}/health`)).json()) as { bwrap_available: boolean; limits: { disk: string } };
    expect(health.bwrap_available).toBe(true);
    expect(health.limits.disk).toBe("tmp_only");
    expect(server!.logs.some((l) => l.includes("not in a mount namespace of its own") && l.includes("unshare --user --mount refused") && l.includes("Permission denied"))).toBe(true);
    expect(await server!.bash("echo hi", { require_sandbox: true })).toMatchObject({ output: "hi", metadata: { sandboxed: true } });
  }, 60_000);
});
