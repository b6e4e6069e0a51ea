/**
 * The pool on a REAL Nomad agent (`nomad agent -dev`, see test/support/nomad-agent.ts), with
 * the local-development driver: raw_exec running this checkout's own slotpool (no image).
 * Runs when a `nomad` binary is on PATH and the tests run as root; says why it skips
 * otherwise. What the emulator (test/support/nomad-emulator.ts) stands in for elsewhere is
 * checked here against the real thing: deployments blocking scale calls, stopped and killed
 * allocations, purge, and the CLI's status and jobs prune.
 */
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { allocationHttpAddress } from "../../src/nomad/allocation.js";
import { NomadClient } from "../../src/nomad/client.js";
import { NomadScaleBlockedError } from "../../src/nomad/errors.js";
import { sandboxJob } from "../../src/nomad/job.js";
import { NomadProvisioner, type NomadProvisionerOptions } from "../../src/pool/nomad-provisioner.js";
import { SlotPool, type SlotPoolOptions } from "../../src/pool/slot-pool.js";
import type { LeasedSlot } from "../../src/pool/types.js";
import { nomadSkipReason, nomadVersion, repoRoot, startNomadAgent, type NomadAgent } from "../support/nomad-agent.js";

const skip = nomadSkipReason();
const run = promisify(execFile);
const main = `${repoRoot}/dist/src/cli/main.js`;

/** Records the scale calls Nomad refused for an active deployment. */
class RecordingClient extends NomadClient {
  blocked: string[] = [];
  override async scaleTaskGroup(...args: Parameters<NomadClient["scaleTaskGroup"]>): ReturnType<NomadClient["scaleTaskGroup"]> {
    try {
      return await super.scaleTaskGroup(...args);
    } catch (err) {
      if (err instanceof NomadScaleBlockedError) this.blocked.push(`${args[2]}: ${err.nomadMessage}`);
      throw err;
    }
  }
}

const bash = async (slot: LeasedSlot, command: string) => (await slot.execute({ tool: "bash", args: { command } })).output.trim();

async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 60_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined && v !== false) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Pids of the sandbox servers of one allocation (its data dir names the allocation). */
function serverPids(allocId: string): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const argv = readFileSync(`/proc/${name}/cmdline`, "utf8").split("\0");
      if (argv.includes("sandbox-server") && argv.some((a) => a.includes(allocId))) pids.push(Number(name));
    } catch {
      /* exited */
    }
  }
  return pids;
}

describe.skipIf(skip !== undefined)(`the pool on a real Nomad agent (${skip ? `skipped: ${skip}` : nomadVersion()}), raw_exec running this checkout's slotpool`, () => {
  let agent: NomadAgent;
  const pools: SlotPool[] = [];
  let n = 0;

  beforeAll(async () => {
    agent = await startNomadAgent();
  }, 90_000);
  afterEach(async () => {
    for (const p of pools.splice(0)) await p.stop().catch(() => undefined);
  }, 60_000);
  afterAll(async () => {
    await agent?.stop();
  }, 90_000);

  function realPool(config: Partial<SlotPoolOptions> = {}, prov: Partial<NomadProvisionerOptions> = {}) {
    const jobId = `engines-pool-${process.pid}-${++n}`;
    const client = new RecordingClient({ address: agent.address, retry: { attempts: 3, baseMs: 100, maxMs: 1_000 } });
    const slotsPerContainer = config.slotsPerContainer ?? 2;
    const provisioner = new NomadProvisioner({ slotsPerContainer, client, job: { jobId, driver: "raw_exec" }, blockingWaitMs: 10_000, ...prov });
    const pool = new SlotPool({ slotsPerContainer, minContainers: 1, maxContainers: 3, tickMs: 100, startTimeoutMs: 60_000, ...config, provisioner });
    pools.push(pool);
    return { pool, client, jobId };
  }

  const running = async (jobId: string) =>
    (await agent.client.jobAllocations(jobId)).allocations.filter((a) => a.DesiredStatus === "run" && a.ClientStatus === "running");

  it("scales 1 → 3 → 1 with demand; every slot is sandboxed (bubblewrap, the server invisible)", async () => {
    const { pool, jobId } = realPool({ idleTimeoutMs: 500 });
    await pool.start();
    expect(await running(jobId)).toHaveLength(1);
    const slots = await Promise.all(Array.from({ length: 6 }, (_, i) => pool.acquire({ trajectoryId: `t${i}`, timeoutMs: 90_000 })));
    expect(new Set(slots.map((s) => s.container.index))).toEqual(new Set([0, 1, 2]));
    expect(await running(jobId)).toHaveLength(3);
    const containers = [...new Map(slots.map((s) => [s.container.id, s.container])).values()];
    for (const c of containers) {
      const health = (await (await fetch(`${c.url}/health`)).json()) as Record<string, unknown>;
      expect(health["bwrap_available"]).toBe(true);
      // The job's per-slot bounds, derived from the allocation (128 + 2 x 224 MB), reach the server.
      const isolation = health["isolation"] as { sandboxed: boolean; memory_mb: number; disk_mb: number; summary: string } | undefined;
      if (isolation) expect(isolation, isolation.summary).toMatchObject({ sandboxed: true, memory_mb: 224, disk_mb: 112 });
      else expect((health["limits"] as { disk_mb?: number } | undefined)?.disk_mb).toBe(112);
      // An unauthenticated call is refused.
      const anon = await fetch(`${c.url}/execute`, { method: "POST", headers: { "content-type": "application/json" }, body: "{}" });
      expect(anon.status).toBe(401);
    }
    for (const s of slots) {
      expect(await bash(s, `echo ${s.trajectoryId}`)).toBe(s.trajectoryId);
      // Its own PID namespace: the server (node) and other slots are not there.
      const comms = await bash(s, "cat /proc/[0-9]*/comm 2>/dev/null | sort -u | tr '\\n' ' '");
      expect(comms).not.toMatch(/\bnode\b|nomad/);
    }
    for (const s of slots) await pool.release(s);
    await until("back to one allocation", async () => ((await running(jobId)).length === 1 ? true : undefined));
    expect(pool.stats().containers.lost).toBe(0);
  }, 180_000);

  it("datacenters the agent does not have: start() fails at once, naming them (Nomad 1.1 takes \"*\" literally too)", async () => {
    for (const datacenters of [["nowhere"], ["*"]]) {
      const { pool } = realPool({ slotsPerContainer: 1, maxContainers: 1 }, { job: { jobId: `engines-dc-${process.pid}-${datacenters[0] === "*" ? "star" : "nowhere"}`, driver: "raw_exec", datacenters } });
      const started = Date.now();
      const err = await pool.start().catch((e: unknown) => e);
      expect(err, String(err)).toBeInstanceOf(Error);
      expect((err as Error).message).toContain(`no nodes available in the datacenters "${datacenters[0]}"`);
      expect((err as Error).message).toMatch(/Check the job's datacenters \(pool\.nomad\.datacenters/);
      // bound: it fails from the evaluation at once, not after the pool's start timeout (120 s by default); 30 s is far from both.
      expect(Date.now() - started).toBeLessThan(30_000);
      await pool.stop({ purge: true }).catch(() => undefined);
    }
  }, 120_000);

  it("a scale refused with 'job scaling blocked due to active deployment' right after a register is made once the deployment ends", async () => {
    const { pool, client, jobId } = realPool();
    await pool.start();
    const first = await pool.acquire({ trajectoryId: "first" });
    // An operator registers a version of the job with an update strategy (slotpool's own has
    // max_parallel = 0): Nomad starts a deployment, and refuses scale calls while it runs.
    const job = sandboxJob({ jobId, driver: "raw_exec", slots: 2, count: 1, token: first.container.token! });
    const withUpdate = { ...job, Update: { MaxParallel: 1, MinHealthyTime: 5e9, HealthyDeadline: 60e9, ProgressDeadline: 120e9, HealthCheck: "task_states" } };
    await agent.client.registerJob(withUpdate, { preserveCounts: true });
    // The scheduler creates the deployment a moment after the register answers.
    await until("the deployment", async () => ((await agent.client.latestDeployment(jobId)).deployment?.Status === "running" ? true : undefined), 10_000);
    // Demand right after the register: 2 more containers.
    const more = await Promise.all(Array.from({ length: 3 }, (_, i) => pool.acquire({ trajectoryId: `m${i}`, timeoutMs: 120_000 })));
    expect(client.blocked.length).toBeGreaterThanOrEqual(1);
    expect(client.blocked[0]).toBe("2: job scaling blocked due to active deployment");
    expect(new Set([first, ...more].map((s) => s.container.index))).toEqual(new Set([0, 1]));
    for (const s of more) expect(await bash(s, "echo served")).toBe("served");
    expect((await agent.client.readJob(jobId))?.TaskGroups?.[0]?.Count).toBe(2);
  }, 240_000);

  it("an allocation stopped through Nomad: the loss is seen at once and a replacement serves", async () => {
    const { pool, jobId } = realPool({ slotsPerContainer: 1, maxContainers: 1 });
    await pool.start();
    const held = await pool.acquire({ trajectoryId: "held" });
    const lost: Array<{ at: number; reason: string }> = [];
    pool.on("slot-lost", (e) => lost.push({ at: Date.now(), reason: e.reason }));
    const stoppedAt = Date.now();
    await run("nomad", ["alloc", "stop", "-detach", held.container.id], { env: agent.env });
    await until("slot-lost", () => (lost.length ? true : undefined), 15_000);
    expect(lost[0]!.at - stoppedAt).toBeLessThan(5_000);
    const next = await pool.acquire({ trajectoryId: "next", timeoutMs: 90_000 });
    expect(next.container.id).not.toBe(held.container.id);
    expect(await bash(next, "echo replacement")).toBe("replacement");
    const live = await running(jobId);
    expect(live.map((a) => a.ID)).toEqual([next.container.id]);
  }, 180_000);

  it("its server killed: the loss is seen at once, the task restarts in place and serves again", async () => {
    const { pool } = realPool({ slotsPerContainer: 1, maxContainers: 1 });
    await pool.start();
    const held = await pool.acquire({ trajectoryId: "held" });
    const pids = serverPids(held.container.id);
    expect(pids.length).toBeGreaterThanOrEqual(1);
    const lost: number[] = [];
    pool.on("slot-lost", () => lost.push(Date.now()));
    const killedAt = Date.now();
    for (const pid of pids) process.kill(pid, "SIGKILL");
    await until("slot-lost", () => (lost.length ? true : undefined), 15_000);
    expect(lost[0]! - killedAt).toBeLessThan(5_000);
    await expect(bash(held, "true")).rejects.toThrow();
    const next = await pool.acquire({ trajectoryId: "next", timeoutMs: 90_000 });
    // Same allocation, a new server instance (restart policy: in place).
    expect(next.container.id).toMatch(new RegExp(`^${held.container.id}/restart-1$`));
    expect(await bash(next, "echo again")).toBe("again");
  }, 180_000);

  it("purges the job at shutdown: no job, no server left, no workspace files left under /tmp/slotpool-nomad", async () => {
    const { pool, jobId } = realPool({ slotsPerContainer: 1, maxContainers: 1 });
    await pool.start();
    const s = await pool.acquire({ trajectoryId: "t" });
    const alloc = s.container.id;
    expect(serverPids(alloc).length).toBeGreaterThanOrEqual(1);
    // Files in the workspace, as a trajectory leaves them.
    expect(await bash(s, "head -c 200000 /dev/urandom > left.bin && echo written")).toBe("written");
    const dir = `/tmp/slotpool-nomad/${alloc}`;
    expect(existsSync(dir)).toBe(true);
    await pool.stop({ purge: true });
    expect(await agent.client.readJob(jobId)).toBeNull();
    await until("server gone", () => (serverPids(alloc).length === 0 ? true : undefined), 40_000);
    // The job's poststop task removed the allocation's dir once the server had stopped.
    await until(`${dir} removed`, () => (existsSync(dir) ? undefined : true), 40_000);
  }, 120_000);

  it("slotpool status and slotpool jobs prune against it", async () => {
    const jobId = `engines-left-behind-${process.pid}`;
    await agent.client.registerJob(sandboxJob({ jobId, driver: "raw_exec", slots: 1, count: 1, owner: "crashed@run", created: "2020-01-01T00:00:00Z" }));
    await until("left-behind job running", async () => ((await running(jobId)).length === 1 ? true : undefined), 60_000);

    const status = await run(process.execPath, [main, "status", "--nomad"], { env: agent.env, cwd: repoRoot });
    expect(status.stdout).toContain(`nomad ${agent.address}`);
    expect(status.stdout).toContain(jobId);
    expect(status.stdout).toContain("crashed@run");

    const dry = await run(process.execPath, [main, "jobs", "prune", "--dry-run", "--prefix", jobId], { env: agent.env, cwd: repoRoot });
    expect(dry.stdout).toContain(jobId);
    expect((await agent.client.readJob(jobId))?.Stop).toBe(false);

    const pruned = await run(process.execPath, [main, "jobs", "prune", "--prefix", jobId, "--older-than-min", "60", "--purge"], { env: agent.env, cwd: repoRoot });
    expect(pruned.stdout).toContain(jobId);
    expect(await agent.client.readJob(jobId)).toBeNull();
  }, 120_000);

  it("slotpool process examples/shell-tasks/env.js --provisioner nomad (local-development driver) solves every task, sandboxed", async () => {
    const dir = mkdtempSync(join(tmpdir(), "engines-process-"));
    try {
      const jobId = `engines-process-${process.pid}`;
      // The env's config places the job: a namespace of its own (every call must name it) and
      // the datacenter. requireSandbox: a call on a server without bubblewrap fails, so 100 %
      // means sandboxed.
      await run("nomad", ["namespace", "apply", "-description", "slotpool real-engine test", "engines"], { env: agent.env });
      writeFileSync(
        join(dir, "config.json"),
        JSON.stringify({ pool: { nomad: { driver: "raw_exec", jobId, namespace: "engines", datacenters: ["dc1"] } }, executor: { requireSandbox: true } }),
      );
      let seenIn: string | undefined;
      const watcher = setInterval(() => {
        void fetch(`${agent.address}/v1/jobs?namespace=*&prefix=${jobId}`)
          .then((r) => r.json() as Promise<Array<{ Namespace: string }>>)
          .then((jobs) => (seenIn ??= jobs[0]?.Namespace))
          .catch(() => undefined);
      }, 300);
      const out = join(dir, "out.jsonl");
      const { stdout } = await run(
        process.execPath,
        [main, "process", "examples/shell-tasks/env.js", "--provisioner", "nomad", "--config", join(dir, "config.json"), "--out", out, "--no-progress", "--no-report"],
        { env: agent.env, cwd: repoRoot, timeout: 240_000 },
      );
      clearInterval(watcher);
      expect(seenIn).toBe("engines");
      expect(stdout).toMatch(/nomad provisioner/);
      expect(stdout).toMatch(/success rate\s+100\.0%/);
      expect(stdout).not.toMatch(/unsandboxed|not sandboxed/i);
      expect(readFileSync(out, "utf8").trim().split("\n").length).toBeGreaterThanOrEqual(1);
      // The run purged its job.
      const inNamespace = new NomadClient({ address: agent.address, namespace: "engines" });
      expect(await inNamespace.readJob(jobId)).toBeNull();
      await inNamespace.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);

  it("slotpool process examples/web-form/env.js --provisioner nomad (local-development driver): every booking made through the slots' browsers, sized for a browser each", async () => {
    const dir = mkdtempSync(join(tmpdir(), "engines-web-form-"));
    try {
      const jobId = `engines-web-form-${process.pid}`;
      // Two slots a container: the env's browser toolset sizes them (pool.nomad.browser): 128 + 192 + 2 × 608 MB.
      writeFileSync(join(dir, "config.json"), JSON.stringify({ groupSize: 2, totalGroups: 2, pool: { slotsPerContainer: 2, nomad: { driver: "raw_exec", jobId, datacenters: ["dc1"] } }, executor: { requireSandbox: true } }));
      let memoryMb: number | undefined;
      const watcher = setInterval(() => {
        void agent.client
          .readJob(jobId)
          .then((job) => (memoryMb ??= (job as { TaskGroups?: Array<{ Tasks?: Array<{ Resources?: { MemoryMB?: number } }> }> } | null)?.TaskGroups?.[0]?.Tasks?.[0]?.Resources?.MemoryMB))
          .catch(() => undefined);
      }, 300);
      const out = join(dir, "out.jsonl");
      const { stdout } = await run(
        process.execPath,
        [main, "process", "examples/web-form/env.js", "--provisioner", "nomad", "--config", join(dir, "config.json"), "--out", out, "--no-progress", "--no-report"],
        { env: agent.env, cwd: repoRoot, timeout: 240_000 },
      );
      clearInterval(watcher);
      expect(stdout).toMatch(/success rate\s+100\.0%/);
      expect(stdout).not.toMatch(/unsandboxed|not sandboxed/i);
      expect(memoryMb).toBe(128 + 192 + 2 * (224 + 384));
      expect(readFileSync(out, "utf8").trim().split("\n")).toHaveLength(2);
      expect(await agent.client.readJob(jobId)).toBeNull();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);

  it("slotpool job render --format hcl: nomad job run of the rendered file serves on Nomad 1.1.2 (raw_exec), the docker one validates", async () => {
    const dir = mkdtempSync(join(tmpdir(), "engines-render-"));
    const jobId = `engines-render-${process.pid}`;
    try {
      const token = "render-token-0123456789";
      const raw = await run(process.execPath, [main, "job", "render", "--format", "hcl", "--driver", "raw_exec", "--job-id", jobId, "--slots", "2", "--token", token], { cwd: repoRoot });
      writeFileSync(join(dir, "raw.nomad.hcl"), raw.stdout);
      await run("nomad", ["job", "run", join(dir, "raw.nomad.hcl")], { env: agent.env, timeout: 120_000 });
      const alloc = await until("a running allocation", async () => {
        const up = (await running(jobId))[0];
        return up ? ((await agent.client.readAllocation(up.ID)) ?? undefined) : undefined;
      });
      const url = allocationHttpAddress(alloc)!.url;
      const health = await until("/health", async () => {
        const res = await fetch(`${url}/health`).catch(() => undefined);
        return res?.ok ? ((await res.json()) as { isolation?: { sandboxed: boolean; memory_mb: number } }) : undefined;
      });
      expect(health.isolation).toMatchObject({ sandboxed: true, memory_mb: 224 });
      const anon = await fetch(`${url}/execute`, { method: "POST", body: "{}" });
      expect(anon.status).toBe(401);
      const authed = await fetch(`${url}/execute`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ slot_id: "slot_0", tool: "bash", args: { command: "echo rendered" } }),
      });
      expect(((await authed.json()) as { output: string }).output.trim()).toBe("rendered");

      // The docker job (default options) as the 1.1.2 CLI parses and the agent validates it.
      const docker = await run(process.execPath, [main, "job", "render", "--format", "hcl", "--job-id", `${jobId}-docker`], { cwd: repoRoot });
      expect(docker.stderr).toMatch(/a random sandbox token was generated/);
      writeFileSync(join(dir, "docker.nomad.hcl"), docker.stdout);
      const validated = await run("nomad", ["job", "validate", join(dir, "docker.nomad.hcl")], { env: agent.env });
      expect(validated.stdout).toMatch(/Job validation successful/);
    } finally {
      await run("nomad", ["job", "stop", "-purge", jobId], { env: agent.env }).catch(() => undefined);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 180_000);
});
