import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ExecuteResponse } from "../../src/protocol/sandbox.js";
import { parseProbe, probeCommand, probeProblems } from "../security/kernel-probe.js";
import { SANDBOX_CONTAINER_OPTIONS, docker, dockerSkipReason, freePort, logs, removeContainers, repo, sandboxImage, startContainer, waitExit, waitHealthy } from "./support/docker.js";

/**
 * The sandbox image in a real Docker engine (Debian's docker.io; CI starts one with
 * .ci/docker-engine.sh and builds the image with scripts/build-sandbox-image.sh): it refuses
 * to start unsandboxed, and with the documented options (no --privileged) every slot is
 * sandboxed with its bounds; tini reaps what resets leave.
 * Containers use the host's network and the server listens on 127.0.0.1 only.
 */

const skip = dockerSkipReason();
const title = (name: string): string => (skip ? `${name} (skipped: ${skip})` : name);

let image = "";

beforeAll(async () => {
  if (!skip) image = await sandboxImage();
}, 900_000);

afterAll(async () => {
  await removeContainers();
});

async function execute(url: string, body: Record<string, unknown>, timeoutS = 30): Promise<ExecuteResponse> {
  const res = await fetch(`${url}/execute`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ timeout: timeoutS, ...body }) });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as ExecuteResponse;
}

const bash = (url: string, slot: number, command: string, extra: Record<string, unknown> = {}): Promise<ExecuteResponse> =>
  execute(url, { slot_id: `slot_${slot}`, tool: "bash", args: { command, ...extra } });

async function reset(url: string, slot: number): Promise<void> {
  const res = await fetch(`${url}/reset`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: `slot_${slot}` }) });
  expect(res.status).toBe(200);
}

describe.skipIf(skip !== undefined)(title("the sandbox image in a real Docker engine"), () => {
  it("documents the container options these tests use, in the Dockerfile's header", () => {
    const header = readFileSync(join(repo, "sandbox-image", "Dockerfile"), "utf8").split("\n").filter((l) => l.startsWith("#")).join("\n");
    // (The profile as the header names it: relative to the repository.)
    for (let i = 0; i < SANDBOX_CONTAINER_OPTIONS.length; i += 2) expect(header).toContain(`${SANDBOX_CONTAINER_OPTIONS[i]} ${SANDBOX_CONTAINER_OPTIONS[i + 1]!.replace(`${repo}/`, "")}`);
    expect(header).not.toContain("seccomp=unconfined");
  });

  it("without those options the server refuses to start: one error naming what is missing and the fix", async () => {
    const port = await freePort();
    const name = await startContainer(["--network", "host", image, "--host", "127.0.0.1", "--port", String(port), "--slots", "1"]);
    expect(await waitExit(name)).toBe(1);
    const out = await logs(name);
    const errors = out.split("\n").filter((l) => l.startsWith("slotpool sandbox-server:"));
    expect(errors, out).toHaveLength(1);
    expect(errors[0]).toMatch(/cannot sandbox commands here: bubblewrap cannot create namespaces here: .*Fix: in a container, run it with --cap-add SYS_ADMIN --security-opt seccomp=sandbox-image\/seccomp.json/);
    expect(errors[0]).toMatch(/--allow-unsandboxed/);
  }, 90_000);

  describe("with the documented options (" + SANDBOX_CONTAINER_OPTIONS.join(" ") + ")", () => {
    let url = "";
    let name = "";
    let outsideIp = "";
    const outsidePort = 8000;

    beforeAll(async () => {
      // "The internet" for network-on: a container of its own on Docker's bridge, serving one page.
      const outside = await startContainer(["--entrypoint", "node", image, "-e", `require("http").createServer((q, s) => s.end("outside-ok\\n")).listen(${outsidePort})`]);
      outsideIp = (await docker(["inspect", "-f", "{{.NetworkSettings.IPAddress}}", outside])).trim();
      expect(outsideIp).toMatch(/^\d+\.\d+\.\d+\.\d+$/);
      const port = await freePort();
      url = `http://127.0.0.1:${port}`;
      name = await startContainer([
        "--network", "host", ...SANDBOX_CONTAINER_OPTIONS, image,
        "--host", "127.0.0.1", "--port", String(port), "--slots", "3",
        "--memory-mb", "64", "--max-processes", "16", "--disk-mb", "16",
        // The outside container's bridge address is private: allowed explicitly, as an operator would.
        "--net-allow-ranges", `${outsideIp}/32`,
      ]);
      await waitHealthy(name, url);
    }, 120_000);

    it("/health: sandboxed, memory and pids cgroups, the disk bound on workspace and /tmp, network on through slirp4netns", async () => {
      const health = (await (await fetch(`${url}/health`)).json()) as Record<string, any>;
      expect(health, JSON.stringify(health)).toMatchObject({
        bwrap_available: true,
        fast_path: true,
        internet: "slirp4netns",
        limits: { per_slot_uids: true, memory: "cgroup", pids: "cgroup", disk: "workspace_and_tmp", disk_mb: 16 },
        isolation: { sandboxed: true, memory: "cgroup", memory_mb: 64, pids: "cgroup", max_processes: 16, disk: "workspace_and_tmp", network: "slirp4netns" },
      });
      expect(["v1", "v2"]).toContain(health["cgroups"]);
      // PID 1 is tini, not Node.
      expect((await docker(["exec", name, "cat", "/proc/1/comm"])).trim()).toBe("tini");
    });

    it("the container runs under the shipped seccomp profile, not unconfined; every slot process under the slots' filter: the kernel probe sees each primitive refused", async () => {
      const opts = await docker(["inspect", "-f", "{{json .HostConfig.SecurityOpt}}", name]);
      expect(opts).not.toContain("seccomp=unconfined");
      expect(opts).toContain("pivot_root");
      // The server (and everything in the container) is filtered by Docker: mode 2.
      expect((await docker(["exec", name, "awk", "/^Seccomp:/{print $2}", "/proc/1/status"])).trim()).toBe("2");
      const health = (await (await fetch(`${url}/health`)).json()) as Record<string, any>;
      expect(health).toMatchObject({ seccomp: "filter", ptrace: true, isolation: { seccomp: "filter" } });
      const r = await bash(url, 0, probeCommand(), { timeout: 60 });
      expect(probeProblems(parseProbe(r.output)), r.output).toEqual([]);
    });

    it("a slot sees only its own processes, never the server's (its own pid namespace and /proc)", async () => {
      const r = await bash(url, 0, "ps -e -o comm= | sort -u | tr '\\n' ' '; echo; cat /proc/1/comm; id -u");
      expect(r.metadata.sandboxed).toBe(true);
      const [comms, pid1, uid] = r.output.split("\n");
      // The call's own shell (the image's bash-static, docs/performance.md) and ps.
      expect(comms!.split(" ").filter(Boolean).sort()).toEqual(expect.arrayContaining(["bash-static", "ps"]));
      for (const server of ["node", "tini", "slirp4netns"]) expect(comms).not.toContain(server);
      expect(pid1).toBe("bwrap");
      expect(Number(uid)).toBeGreaterThanOrEqual(1000);
      // The container itself does run them: the slot's view is what hides them.
      expect(await docker(["exec", name, "ps", "-e", "-o", "comm="])).toContain("node");
    });

    it("a slot has python and python3 (the image's python-is-python3)", async () => {
      const r = await bash(url, 2, "python -c 'import sys; print(sys.version_info[0])'; python3 -c 'print(2 + 2)'");
      expect(r.output).toBe("3\n4");
      await reset(url, 2);
    });

    it("memory: a slot's 300 MB hog is killed at its 64 MB cgroup, 30 MB passes, the server lives on", async () => {
      const r = await bash(url, 1, "head -c 300M /dev/zero | tail > /dev/null; echo big=$?; head -c 30M /dev/zero | tail > /dev/null; echo small=$?");
      expect(r.output).toContain("big=137"); // SIGKILL by the OOM killer
      expect(r.output).toContain("small=0");
      expect((await fetch(`${url}/health`)).status).toBe(200);
      await reset(url, 1);
    });

    it("processes: a fork loop hits the slot's bound of 16 (pids cgroup, and RLIMIT_NPROC of its uid); the other slots fork freely meanwhile", async () => {
      // perl's fork fails at once where bash's retries and may give up (exit 254) racily.
      const forker = "my ($ok, $fail) = (0, 0); for (1..40) { my $p = fork(); if (!defined $p) { $fail++ } elsif ($p == 0) { sleep 3; exit 0 } else { $ok++ } } print \"ok=$ok fail=$fail\\n\"; 1 while wait() > 0";
      const bomb = bash(url, 2, `perl -e '${forker}'`, { timeout: 60 });
      const other = await bash(url, 0, "for i in $(seq 10); do true & done; wait; echo forks-ok");
      expect(other.output).toBe("forks-ok");
      const r = await bomb;
      const m = /^ok=(\d+) fail=(\d+)$/.exec(r.output);
      expect(m, JSON.stringify(r)).not.toBeNull();
      const [ok, fail] = [Number(m![1]), Number(m![2])];
      expect(ok + fail).toBe(40);
      // 16 for the whole slot: its bwrap, spawner, bash and perl hold some of them.
      expect(ok).toBeLessThan(16);
      expect(fail).toBeGreaterThan(24);
      await reset(url, 2);
    }, 90_000);

    it("disk: 30 MB into /workspace or /tmp hits the slot's 16 MB tmpfs", async () => {
      const r = await bash(url, 0, "head -c 30M /dev/zero > /workspace/big; echo ws=$?; head -c 30M /dev/zero > /tmp/big; echo tmp=$?; df -m /workspace | tail -1");
      expect(r.output).toContain("ws=1");
      expect(r.output).toContain("tmp=1");
      expect(r.output).toMatch(/No space left on device/);
      expect(r.output).toMatch(/^tmpfs\s+16\s/m);
      await reset(url, 0);
    });

    it("network on works (no CAP_SYS_PTRACE): a slot reaches the outside container at once, never the host", async () => {
      const started = performance.now();
      const r = await bash(url, 1, `curl -sS -m 5 http://${outsideIp}:${outsidePort}/; curl -sS -m 2 ${url}/health || echo host-loopback-blocked`, { allow_network: true });
      // bound: "at once": a blocked first request would take its full 5 s (-m 5) and the second its 2 s; 6.5 s still catches that, with room for a loaded box.
      expect(performance.now() - started).toBeLessThan(6_500);
      expect(r.metadata).toMatchObject({ sandboxed: true, network_isolated: false });
      expect(r.output).toContain("outside-ok");
      expect(r.output).toContain("host-loopback-blocked");
      // Network off: nothing outside.
      const off = await bash(url, 2, `curl -sS -m 2 http://${outsideIp}:${outsidePort}/ || echo no-network`, { allow_network: false });
      expect(off.output).toContain("no-network");
    });

    it("tini reaps: 0 zombies in the container after 100 resets of slots that leave orphans (network off and on)", async () => {
      for (let i = 0; i < 50; i++) {
        await bash(url, 0, "sleep 100 & echo x");
        await bash(url, 1, "sleep 100 & echo x", { allow_network: true });
        await reset(url, 0);
        await reset(url, 1);
      }
      // wait: the last reset's orphans being reaped by tini (no event shows it); a zombie left would stay.
      await new Promise((r) => setTimeout(r, 500));
      const zombies = (await docker(["exec", name, "ps", "-e", "-o", "stat=,pid=,ppid=,comm="])).split("\n").filter((l) => l.trim().startsWith("Z"));
      expect(zombies).toEqual([]);
    }, 300_000);
  });

  it("without /dev/net/tun: sandboxed, /health says network on is unavailable and why, a network-on call runs loopback-only at once and says why", async () => {
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const noTun = SANDBOX_CONTAINER_OPTIONS.filter((o, i, all) => o !== "--device" && all[i - 1] !== "--device");
    const name = await startContainer(["--network", "host", ...noTun, image, "--host", "127.0.0.1", "--port", String(port), "--slots", "1"]);
    const health = (await waitHealthy(name, url)) as Record<string, any>;
    expect(health).toMatchObject({ bwrap_available: true, internet: "unavailable", isolation: { sandboxed: true, network: "loopback_only" } });
    expect(health["internet_unavailable_reason"]).toMatch(/\/dev\/net\/tun is missing/);
    const started = performance.now();
    const r = await bash(url, 0, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", { allow_network: true });
    // bound: loopback-only at once, not after waiting for a network stack that cannot start: 5 s (a bash call takes a fraction of that) leaves a loaded box room.
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(r.output).toBe("lo");
    expect(r.metadata["network_unavailable"]).toMatch(/\/dev\/net\/tun is missing/);
  }, 90_000);
});
