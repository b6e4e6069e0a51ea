/**
 * `slotpool status` against the Nomad API emulator and a real executor service, and its
 * errors when neither answers.
 */
import { spawn } from "node:child_process";
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { NomadClient } from "../../src/nomad/client.js";
import { sandboxJob } from "../../src/nomad/job.js";
import { HEARTBEAT_MESSAGE } from "../../src/nomad/ownership.js";
import { NomadProvisioner } from "../../src/pool/nomad-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { startNomadEmulator, type NomadEmulator } from "../support/nomad-emulator.js";
import { startCliServer, within, type CliServer } from "../security/support.js";

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** The built CLI, asynchronously (the emulator answers from this process). */
function status(argv: string[], env: NodeJS.ProcessEnv = {}): Promise<Run> {
  const { command, args } = slotpoolCommand();
  const base = { ...process.env };
  for (const k of Object.keys(base)) if (k.startsWith("NOMAD_") || k === "TOOL_EXECUTOR_TOKEN") delete base[k];
  const t0 = Date.now();
  const child = spawn(command, [...args, "status", ...argv], { env: { ...base, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return within(30_000, "slotpool status", new Promise((resolve) => child.once("exit", (code) => resolve({ code, stdout, stderr, ms: Date.now() - t0 }))));
}

describe("slotpool status from Nomad", () => {
  let nomad: NomadEmulator;
  let pool: SlotPool;
  const jobId = `status-${process.pid}`;
  beforeAll(async () => {
    // A stopped allocation's server gets long to exit: one frozen stays "stopping" while looked at.
    nomad = await startNomadEmulator({ rescheduleDelayMs: -1, token: "status-acl-token", killTimeoutMs: 120_000 });
    const client = new NomadClient({ address: nomad.address, token: "status-acl-token" });
    const provisioner = new NomadProvisioner({ slotsPerContainer: 2, client, job: { jobId }, blockingWaitMs: 2_000 });
    pool = new SlotPool({ slotsPerContainer: 2, minContainers: 2, maxContainers: 2, provisioner });
    await pool.start();
    // A job that is not slotpool's: status must not list it.
    const foreign = sandboxJob({ jobId: `foreign-${process.pid}`, slots: 1, count: 0 }) as { Meta?: Record<string, string> };
    foreign.Meta = { team: "other" };
    await client.registerJob(foreign as Parameters<NomadClient["registerJob"]>[0]);
  }, 60_000);
  afterAll(async () => {
    await pool?.stop({ purge: true });
    await nomad?.stop();
  });

  it("lists slotpool's jobs by Meta with allocations by status and the scale status", async () => {
    const env = { NOMAD_ADDR: nomad.address, NOMAD_TOKEN: "status-acl-token" };
    const text = await status([], env);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toContain(jobId);
    expect(text.stdout).not.toContain(`foreign-${process.pid}`);
    expect(text.stdout).toMatch(/running 2/);
    expect(text.stdout).toMatch(/2\/2\/2\//);
    const json = await status(["--json"], env);
    const report = JSON.parse(json.stdout);
    const job = report.nomad.jobs.find((j: { id: string }) => j.id === jobId);
    expect(job.allocations).toEqual({ running: 2 });
    expect(job.scale.desired).toBe(2);
    expect(job.slotsPerContainer).toBe("2");
    // A killed allocation shows up as failed (no rescheduling in this emulator).
    const alloc = nomad.allocations(jobId)[0]!;
    await nomad.killAllocation(String(alloc["ID"]));
    await nomad.waitForAllocations(jobId, (as) => as.some((a) => a["ClientStatus"] === "failed"), 10_000);
    const after = JSON.parse((await status(["--json"], env)).stdout);
    expect(after.nomad.jobs.find((j: { id: string }) => j.id === jobId).allocations).toMatchObject({ running: 1, failed: 1 });
  }, 60_000);

  it("shows the newest scale event as the last one, never an owner heartbeat", async () => {
    const client = new NomadClient({ address: nomad.address, token: "status-acl-token" });
    await client.scaleTaskGroup(jobId, "sandbox", 2, { message: "older scale" });
    await client.scaleTaskGroup(jobId, "sandbox", 2, { message: "newest scale" });
    await client.recordScaleEvent(jobId, "sandbox", { message: HEARTBEAT_MESSAGE, meta: { "slotpool.run": "x" } });
    const report = JSON.parse((await status(["--json"], { NOMAD_ADDR: nomad.address, NOMAD_TOKEN: "status-acl-token" })).stdout);
    expect(report.nomad.jobs.find((j: { id: string }) => j.id === jobId).scale.lastEvent).toBe("newest scale (count 2 → 2)");
  }, 60_000);

  it("an allocation told to stop whose task still runs is shown as stopping, not running", async () => {
    const client = new NomadClient({ address: nomad.address, token: "status-acl-token" });
    const stoppingJob = `stopping-${process.pid}`;
    await client.registerJob(sandboxJob({ jobId: stoppingJob, slots: 1, count: 2 }) as Parameters<NomadClient["registerJob"]>[0]);
    const running = await nomad.waitForAllocations(stoppingJob, (as) => as.filter((a) => a["ClientStatus"] === "running").length === 2, 30_000);
    // Its server frozen, the one scaled away ignores SIGTERM: Nomad shows DesiredStatus stop
    // with ClientStatus running until the kill timeout, as a slow task does.
    const highest = running.find((a) => String(a["Name"]).endsWith("[1]"))!;
    nomad.freezeAllocation(String(highest["ID"]));
    await client.scaleTaskGroup(stoppingJob, "sandbox", 1, { message: "scale down while a task is slow to stop" });
    await nomad.waitForAllocations(stoppingJob, (as) => as.some((a) => a["DesiredStatus"] === "stop" && a["ClientStatus"] === "running"), 10_000);
    const env = { NOMAD_ADDR: nomad.address, NOMAD_TOKEN: "status-acl-token" };
    const report = JSON.parse((await status(["--json"], env)).stdout);
    expect(report.nomad.jobs.find((j: { id: string }) => j.id === stoppingJob).allocations).toEqual({ running: 1, stopping: 1 });
    const text = await status([], env);
    expect(text.stdout).toMatch(/stopping 1/);
    await client.deregisterJob(stoppingJob, { purge: true });
  }, 90_000);

  it("a token Nomad denies: exit 1 with an error naming NOMAD_TOKEN, not the token", async () => {
    const r = await status([], { NOMAD_ADDR: nomad.address, NOMAD_TOKEN: "not-the-token" });
    expect(r.code).toBe(1);
    expect(r.stderr + r.stdout).toMatch(/error \(nomad\).*(denied|403)/is);
    expect(r.stderr + r.stdout).toMatch(/NOMAD_TOKEN/);
    expect(r.stderr + r.stdout).not.toContain("not-the-token");
  }, 30_000);
});

describe("slotpool status from an executor service", () => {
  let exec: CliServer;
  let base: string;
  const TOKEN = "status-exec-token-42";
  beforeAll(async () => {
    base = mkdtempSync(join(tmpdir(), "slotpool-status-"));
    chmodSync(base, 0o755);
    exec = await startCliServer(["executor-server", "--port", "0", "--token", TOKEN, "--provisioner", "local", "--slots-per-container", "3", "--min-containers", "1", "--max-containers", "1", "--data-dir", join(base, "data")], { startTimeoutMs: 60_000 });
  }, 90_000);
  afterAll(async () => {
    await exec?.stop(15_000);
    if (base) rmSync(base, { recursive: true, force: true });
  });

  it("prints calls, errors, slots held/free and containers from /status", async () => {
    const post = (body: unknown) => fetch(`${exec.url}/execute`, { method: "POST", headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" }, body: JSON.stringify(body) }).then((r) => r.json());
    await post({ trajectory_id: "s1", tool: { name: "bash", arguments: { command: "true" } } });
    await post({ trajectory_id: "s2", tool: { name: "bash", arguments: { command: "false" } } });
    const r = await status(["--executor-url", exec.url, "--token", TOKEN]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toContain(`executor service ${exec.url}`);
    expect(r.stdout).toMatch(/calls: 2 total, 1 errors/);
    expect(r.stdout).toMatch(/slots: held 2, free 1/);
    expect(r.stdout).toMatch(/containers: ready 1/);
    const viaEnv = await status(["--executor-url", exec.url, "--json"], { TOOL_EXECUTOR_TOKEN: TOKEN });
    expect(JSON.parse(viaEnv.stdout).executor.pool.slots.held).toBe(2);
  }, 30_000);

  it("a missing or wrong token: exit 1 saying to pass --token", async () => {
    const r = await status(["--executor-url", exec.url]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/refused.*HTTP 401.*--token/);
  });
});

describe("slotpool status when nothing answers", () => {
  it("neither the executor service nor Nomad reachable: exit 1 with one clear error each, in bounded time", async () => {
    // A port that was free a moment ago: connection refused.
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
    const port = (srv.address() as { port: number }).port;
    await new Promise<void>((r) => srv.close(() => r()));
    const dead = `http://127.0.0.1:${port}`;
    const r = await status(["--executor-url", dead, "--timeout-ms", "2000"], { NOMAD_ADDR: dead });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`error (executor): cannot reach the executor service at ${dead} (ECONNREFUSED)`);
    expect(r.stderr).toContain(`error (nomad): cannot list jobs from Nomad at ${dead}`);
    expect(r.stderr).toMatch(/NOMAD_ADDR/);
    // bound: refused connections answer at once (the 2 s --timeout-ms is the worst case per source): 15 s includes the CLI's start on a loaded box.
    expect(r.ms).toBeLessThan(15_000);
  }, 30_000);

  it("nothing to ask: a usage error (exit 2) saying what to pass", async () => {
    const r = await status([]);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/--executor-url URL.*NOMAD_ADDR/);
  });
});
