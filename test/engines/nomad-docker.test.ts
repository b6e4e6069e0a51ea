/**
 * The docker driver on a REAL Nomad agent (test/support/nomad-agent.ts) with a real Docker
 * engine and the sandbox image: `nomad job run` of the shipped nomad/sandbox.nomad.hcl with
 * the docs' variables, and `slotpool process` on the docker driver. Runs when `nomad` is on
 * PATH (as root), a Docker engine answers and SLOTPOOL_SANDBOX_IMAGE names a built image
 * (CI builds it with scripts/build-sandbox-image.sh); says why it skips otherwise.
 */
import { execFile } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { allocationHttpAddress } from "../../src/nomad/allocation.js";
import { NomadProvisioner } from "../../src/pool/nomad-provisioner.js";
import { SandboxClient } from "../../src/pool/sandbox-client.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { dockerSkipReason, nomadVersion, repoRoot, startNomadAgent, type NomadAgent } from "../support/nomad-agent.js";

const skip = dockerSkipReason();
const run = promisify(execFile);
const main = `${repoRoot}/dist/src/cli/main.js`;
const image = process.env["SLOTPOOL_SANDBOX_IMAGE"] ?? "";

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 90_000, diagnose?: () => Promise<string>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms${diagnose ? `; ${await diagnose()}` : ""}`);
    await new Promise((r) => setTimeout(r, 500));
  }
}

describe.skipIf(skip !== undefined)(`the docker driver on a real Nomad agent (${skip ? `skipped: ${skip}` : `${nomadVersion()}, image ${image}`})`, () => {
  let agent: NomadAgent;

  beforeAll(async () => {
    agent = await startNomadAgent({ docker: true });
  }, 90_000);
  afterAll(async () => {
    await agent?.stop();
  }, 120_000);

  it("nomad job run of nomad/sandbox.nomad.hcl with the docs' variables: the server is healthy and sandboxed, an unauthenticated call is refused", async () => {
    const token = randomBytes(24).toString("base64url");
    // docs/nomad.md step 3, with this run's image.
    await run("nomad", ["job", "run", "-var", `image=${image}`, "-var", `token=${token}`, "-var", `seccomp_profile=${join(repoRoot, "sandbox-image", "seccomp.json")}`, join(repoRoot, "nomad", "sandbox.nomad.hcl")], { env: agent.env, cwd: repoRoot, timeout: 120_000 });
    const jobId = "slotpool-sandbox";
    try {
      // Why an allocation does not serve: its task's stderr (e.g. the server refusing to run unsandboxed).
      const diagnose = async () => {
        const { allocations } = await agent.client.jobAllocations(jobId);
        const last = allocations.at(-1);
        if (!last) return "no allocation";
        const logs = await run("nomad", ["alloc", "logs", "-stderr", "-tail", "-n", "3", last.ID], { env: agent.env }).catch((e: Error) => ({ stdout: e.message }));
        return `allocation ${last.ID} ${last.ClientStatus}; its stderr: ${logs.stdout.trim()}`;
      };
      const alloc = await until(
        "a running allocation",
        async () => {
          const { allocations } = await agent.client.jobAllocations(jobId);
          const up = allocations.find((a) => a.ClientStatus === "running");
          return up ? ((await agent.client.readAllocation(up.ID)) ?? undefined) : undefined;
        },
        90_000,
        diagnose,
      );
      const address = allocationHttpAddress(alloc);
      expect(address).not.toBeNull();
      const url = address!.url;
      const health = await until(
        "/health",
        async () => {
          const res = await fetch(`${url}/health`).catch(() => undefined);
          return res?.ok ? ((await res.json()) as Record<string, unknown>) : undefined;
        },
        60_000,
        diagnose,
      );
      expect(health["bwrap_available"]).toBe(true);
      // The container runs under the shipped profile, its slots under their own filter.
      expect(health["seccomp"]).toBe("filter");
      expect(health["slots"]).toBe(4);
      // Sandboxed, with each slot's share of the HCL's default 1024 MB for 4 slots.
      const isolation = health["isolation"] as { sandboxed: boolean; memory_mb: number; disk_mb: number; summary: string } | undefined;
      expect(isolation, JSON.stringify(health)).toBeDefined();
      expect(isolation!, isolation!.summary).toMatchObject({ sandboxed: true, memory_mb: 224, disk_mb: 112 });

      const anon = await fetch(`${url}/execute`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ slot_id: "slot_0", tool: "bash", args: { command: "id" } }) });
      expect(anon.status).toBe(401);

      const client = new SandboxClient({ containerId: alloc.ID, url, token });
      try {
        const res = await client.execute({ slot_id: "slot_0", tool: "bash", args: { command: "cat /proc/[0-9]*/comm 2>/dev/null | sort -u | tr '\\n' ' '; echo; id -u" } });
        const [comms, uid] = res.output.trim().split("\n");
        // Its own PID namespace: neither the server (node) nor tini is visible; not root.
        expect(comms).not.toMatch(/\bnode\b|\btini\b/);
        expect(Number(uid)).toBeGreaterThan(0);
        expect(res.metadata?.["sandboxed"] ?? true).not.toBe(false);
      } finally {
        await client.close?.();
      }
    } finally {
      await run("nomad", ["job", "stop", "-purge", jobId], { env: agent.env }).catch(() => undefined);
    }
  }, 240_000);

  it("slotpool process examples/shell-tasks/env.js --provisioner nomad (docker driver) solves every task, sandboxed", async () => {
    const dir = mkdtempSync(join(tmpdir(), "engines-docker-process-"));
    try {
      const jobId = `engines-docker-${process.pid}`;
      // requireSandbox: a call on a server without bubblewrap fails, so 100 % means sandboxed.
      writeFileSync(join(dir, "config.json"), JSON.stringify({ pool: { nomad: { driver: "docker", image, jobId } }, executor: { requireSandbox: true } }));
      const out = join(dir, "out.jsonl");
      const { stdout } = await run(
        process.execPath,
        [main, "process", "examples/shell-tasks/env.js", "--provisioner", "nomad", "--config", join(dir, "config.json"), "--out", out, "--no-progress", "--no-report"],
        { env: agent.env, cwd: repoRoot, timeout: 300_000 },
      );
      expect(stdout).toMatch(/success rate\s+100\.0%/);
      expect(stdout).not.toMatch(/unsandboxed|not sandboxed/i);
      expect(readFileSync(out, "utf8").trim().split("\n").length).toBeGreaterThanOrEqual(1);
      expect(await agent.client.readJob(jobId)).toBeNull();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 360_000);

  it("the pool on the docker driver: a container killed is a loss seen at once, and the restarted task serves", async () => {
    const jobId = `engines-docker-pool-${process.pid}`;
    const provisioner = new NomadProvisioner({ slotsPerContainer: 1, client: agent.client, job: { jobId, driver: "docker", image }, blockingWaitMs: 10_000 });
    const pool = new SlotPool({ slotsPerContainer: 1, minContainers: 1, maxContainers: 1, tickMs: 100, startTimeoutMs: 90_000, provisioner });
    try {
      await pool.start();
      const held = await pool.acquire({ trajectoryId: "held", timeoutMs: 90_000 });
      expect((await held.execute({ tool: "bash", args: { command: "echo in-docker" } })).output.trim()).toBe("in-docker");
      // Nomad names the task's container <task>-<allocation id>.
      const { stdout } = await run("docker", ["ps", "-q", "--filter", `name=${held.container.id}`]);
      const container = stdout.trim();
      expect(container).not.toBe("");
      const lost: number[] = [];
      pool.on("slot-lost", () => lost.push(Date.now()));
      const killedAt = Date.now();
      await run("docker", ["kill", container]);
      await until("slot-lost", async () => (lost.length ? true : undefined), 15_000);
      expect(lost[0]! - killedAt).toBeLessThan(5_000);
      const next = await pool.acquire({ trajectoryId: "next", timeoutMs: 90_000 });
      expect(next.container.id).toBe(`${held.container.id}/restart-1`);
      expect((await next.execute({ tool: "bash", args: { command: "echo again" } })).output.trim()).toBe("again");
    } finally {
      await pool.stop({ purge: true });
    }
    expect(await agent.client.readJob(jobId)).toBeNull();
  }, 240_000);
});
