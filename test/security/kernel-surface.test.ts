/**
 * The kernel surface (issue 28): every slot process runs under the slots' seccomp filter
 * (src/sandbox/native/seccomp-filter.c, installed by bubblewrap's --seccomp), wherever the
 * server starts one: the per-slot spawner's commands, the one-bubblewrap-per-call fallback,
 * the stateful terminal, process sessions and template builds. The kernel probe
 * (fixtures/kernel-probe.c) tries each primitive the filter refuses; a server started with
 * --no-seccomp shows the same probe seeing them allowed, so these tests can fail.
 * Runs as whoever runs the suite: as root the slots have uids of their own, as a user they
 * share the user's.
 */
import { spawnSync } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { release, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseProbe, probeCommand, probeProblems } from "./kernel-probe.js";
import { startAttackServer, type AttackServer } from "./support.js";

describe("the slots' seccomp filter", () => {
  let server: AttackServer;
  beforeAll(async () => {
    server = await startAttackServer({ slots: 2 });
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("/health and the start-up line say a filter is in force, ptrace on", async () => {
    const h = (await server.health()).json;
    expect(h).toMatchObject({ bwrap_available: true, seccomp: "filter", ptrace: true });
    expect(h.isolation).toMatchObject({ seccomp: "filter", ptrace: true });
    expect(h.isolation.summary).toContain("seccomp filter (ptrace on)");
    const listening = server.logs.find((l) => l.includes('"listening"'));
    expect(listening).toContain('"seccomp":"filter"');
  });

  it("a command (the per-slot spawner) sees every primitive refused, network off and on", async () => {
    const off = await server.bash(0, probeCommand(), { timeout: 60 });
    expect(off.metadata.exit_code, off.output).toBe(0);
    expect(probeProblems(parseProbe(off.output))).toEqual([]);
    const h = (await server.health()).json;
    if (h.internet === "slirp4netns") {
      const on = await server.bash(0, "/workspace/kernel-probe", { allowNetwork: true });
      expect(on.metadata.network_isolated).toBe(false);
      expect(probeProblems(parseProbe(on.output))).toEqual([]);
    }
    // The pre-forked bash and the spawner itself (the namespace's processes) are filtered too.
    const all = await server.bash(0, "for s in /proc/[0-9]*/status; do awk '/^Name:/{n=$2} /^Seccomp:/{print n, $2}' $s; done | sort -u");
    expect(all.output.split("\n").filter((l) => !l.endsWith(" 2")), all.output).toEqual([]);
  });

  it("the stateful terminal runs under it", async () => {
    const r = await server.tool(1, "bash_stateful", { command: "awk '/^Seccomp:/{print $2}' /proc/self/status; unshare -U true 2>&1 || echo refused" });
    expect(r.output).toMatch(/^2\n[\s\S]*refused$/);
  });

  it("process sessions run under it", async () => {
    await server.bash(1, probeCommand() + " > /dev/null");
    const res = await fetch(`${server.url}/processes/start`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${server.token}` },
      body: JSON.stringify({ slot_id: "slot_1", cmd: "/workspace/kernel-probe" }),
    });
    expect(res.status).toBe(200);
    const events = (await res.text()).split("\n").filter((l) => l).map((l) => JSON.parse(l) as { type: string; data?: string });
    const out = events.filter((e) => e.type === "stdout").map((e) => Buffer.from(e.data!, "base64").toString("utf8")).join("");
    expect(probeProblems(parseProbe(out))).toEqual([]);
  });

  it("template builds run under it", async () => {
    const b = await server.request("POST", "/templates", {
      name: "seccomp-check",
      setup: ["test \"$(awk '/^Seccomp:/{print $2}' /proc/self/status)\" = 2", "! unshare -U true", "! python3 -c 'import socket; socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)'"],
    });
    expect(b.status, b.text).toBe(200);
    expect(b.json.error).toBe("");
    expect(b.json.success).toBe(true);
  });
});

describe("one bubblewrap per call (no spawner), ptrace off", () => {
  let server: AttackServer;
  beforeAll(async () => {
    server = await startAttackServer({ slots: 1, extraArgs: ["--no-ptrace"], env: { SLOTPOOL_SPAWNER: "/nonexistent/slotpool-spawner" } });
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("each call's bubblewrap installs the filter; ptrace is refused and /health says so", async () => {
    const h = (await server.health()).json;
    expect(h).toMatchObject({ fast_path: false, seccomp: "filter", ptrace: false });
    expect(h.isolation.summary).toContain("seccomp filter (ptrace off)");
    const r = await server.bash(0, probeCommand(), { timeout: 60 });
    expect(probeProblems(parseProbe(r.output))).toEqual([]);
    const t = await server.bash(0, "strace -f -qq -e trace=none true 2>&1; echo exit=$?");
    expect(t.output).toMatch(/Operation not permitted[\s\S]*exit=[1-9]/);
  });
});

describe("--no-seccomp (benchmarks only): the same probe sees the kernel surface open", () => {
  let server: AttackServer;
  beforeAll(async () => {
    server = await startAttackServer({ slots: 1, extraArgs: ["--no-seccomp"] });
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
  });

  it("says UNFILTERED in /health and the log, and nested user namespaces (with nf_tables, packet and raw sockets, mounts), SysV queues and unlisted syscalls are allowed", async () => {
    const h = (await server.health()).json;
    expect(h).toMatchObject({ seccomp: "off" });
    expect(h.isolation.summary).toContain("UNFILTERED");
    expect(server.logs.some((l) => l.includes("UNFILTERED (--no-seccomp"))).toBe(true);
    const r = parseProbe((await server.bash(0, probeCommand(), { timeout: 60 })).output);
    expect(r.seccompMode).toBe(0);
    expect(r.lines.get("unshare-user")).toBe("ALLOWED");
    expect(r.lines.get("msgget")).toBe("ALLOWED");
    // Inside a nested user namespace: nf_tables, packet and raw sockets, tmpfs and overlay mounts.
    for (const p of ["userns-nftables", "userns-af_packet", "userns-inet-raw", "userns-mount-tmpfs", "userns-mount-overlay"]) expect(r.lines.get(p), p).toBe("ALLOWED");
    // A syscall the filter does not list answers where the kernel has it (lsm_list_modules: 6.8 and later, as on CI).
    expect(r.lines.get("new-syscall-lsm_list_modules")).toBe(kernelAtLeast(6, 8) ? "ALLOWED" : "refused ENOSYS");
    expect(probeProblems(r).length).toBeGreaterThan(2);
  });
});

describe("fail closed", () => {
  it("a server that cannot build the filter refuses to start and names why", () => {
    const dir = mkdtempSync(join(tmpdir(), "slotpool-seccomp-closed-"));
    chmodSync(dir, 0o755);
    try {
      const main = fileURLToPath(new URL("../../dist/src/cli/main.js", import.meta.url));
      const r = spawnSync(process.execPath, [main, "sandbox-server", "--port", "0", "--slots", "1", "--data-dir", join(dir, "data")], {
        encoding: "utf8",
        timeout: 60_000,
        env: { ...process.env, SLOTPOOL_SECCOMP_FILTER: "/bin/false" },
      });
      expect(r.status).not.toBe(0);
      expect(r.stdout + r.stderr).toMatch(/cannot build the slots' seccomp filter: \/bin\/false failed[\s\S]*libseccomp/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** Whether the running kernel is at least major.minor (`uname -r`). */
function kernelAtLeast(major: number, minor: number): boolean {
  const [a = 0, b = 0] = release().split(".").map((n) => parseInt(n, 10));
  return a > major || (a === major && b >= minor);
}
