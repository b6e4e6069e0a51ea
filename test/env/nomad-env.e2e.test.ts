/**
 * The example env on the Nomad provisioner against the Nomad API emulator (allocations are
 * real sandbox-server processes): the same run as the local main job, and an allocation
 * killed mid-trajectory, which restarts the trajectory on a new slot.
 */
import { spawn } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import ShellTasksEnv, { type ShellTask } from "../../examples/shell-tasks/env.js";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { NomadClient } from "../../src/nomad/client.js";
import type { OracleScript } from "../../src/agent/oracle-policy.js";
import { silentLogger } from "../../src/observability/logger.js";
import { startNomadEmulator, type NomadEmulator } from "../support/nomad-emulator.js";

let nomad: NomadEmulator;
let dir: string;
const savedAddr = process.env["NOMAD_ADDR"];

beforeAll(async () => {
  nomad = await startNomadEmulator({ rescheduleDelayMs: 100 });
  process.env["NOMAD_ADDR"] = nomad.address;
  dir = await mkdtemp(join(tmpdir(), "nomad-env-"));
});
afterAll(async () => {
  if (savedAddr === undefined) delete process.env["NOMAD_ADDR"];
  else process.env["NOMAD_ADDR"] = savedAddr;
  await nomad?.stop();
  await rm(dir, { recursive: true, force: true });
});

const live = (jobId: string) => nomad.allocations(jobId).filter((a) => a["ClientStatus"] === "running");

describe("AgentEnv on the Nomad provisioner (emulator)", () => {
  it("runs every kind of shell task to a full score, and purges the job on close", async () => {
    const jobId = `env-nomad-${process.pid}-1`;
    // Datacenters from the env's config (the emulator's node is in dc1).
    const env = new ShellTasksEnv(
      { groupSize: 2, pool: { provisioner: "nomad", nomad: { jobId, datacenters: ["dc1", "dc2"] }, slotsPerContainer: 4, minContainers: 1, maxContainers: 2 } },
      { logger: silentLogger() },
    );
    await env.start();
    const outcomes = [];
    for (let i = 0; i < 4; i++) outcomes.push(await env.collectTrajectories(env.getNextItem()));
    expect(live(jobId).length).toBeGreaterThanOrEqual(1);
    expect((await new NomadClient({ address: nomad.address }).readJob(jobId))?.Datacenters).toEqual(["dc1", "dc2"]);
    await env.close();
    for (const o of outcomes) {
      expect(o.ok).toBe(true);
      if (o.ok) expect(o.group.scores).toEqual([1, 1]);
    }
    expect(nomad.requests.some((r) => r.method === "POST" && r.path === "/v1/jobs")).toBe(true);
    await nomad.waitForAllocations(jobId, (allocs) => allocs.every((a) => a["ClientStatus"] !== "running"), 10_000);
  }, 60_000);

  it("restarts a trajectory on a new slot when its allocation is killed mid-trajectory", async () => {
    const jobId = `env-nomad-${process.pid}-2`;
    let killed = 0;
    class KillingEnv extends ShellTasksEnv {
      override oracle(task: ShellTask): OracleScript {
        const inner = super.oracle(task);
        return async (input) => {
          if (killed === 0) {
            // Turn 1 takes a slot; before turn 2 the allocation dies: its workspace is gone.
            if (input.turn === 1) return { toolCalls: [{ name: "bash", arguments: { command: "echo started > progress.txt" } }] };
            killed++;
            for (const a of live(jobId)) await nomad.killAllocation(String(a["ID"]));
            return { toolCalls: [{ name: "bash", arguments: { command: "cat progress.txt" } }] };
          }
          return inner(input);
        };
      }
    }
    const env = new KillingEnv({ pool: { provisioner: "nomad", nomad: { jobId }, slotsPerContainer: 2, minContainers: 1, maxContainers: 2 }, groupSize: 1, slotLossRetries: 2 }, { logger: silentLogger() });
    await env.start();
    const outcome = await env.collectTrajectories({ id: 0, kind: "create-file", variant: 0 });
    await env.close();
    expect(killed).toBe(1);
    expect(outcome.ok).toBe(true);
    if (!outcome.ok) return;
    const t = outcome.trajectories[0]!;
    expect(t.attempts).toBe(2);
    expect(t.slotLosses[0]).toMatch(/lost/);
    expect(t.score).toBe(1);
  }, 60_000);

  it("slotpool process --provisioner nomad runs the example env on the cluster", async () => {
    const out = join(dir, "nomad.jsonl");
    const { command, args } = slotpoolCommand();
    const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const child = spawn(command, [...args, "process", "examples/shell-tasks/env.js", "--provisioner", "nomad", "--out", out, "--groups", "2", "--group-size", "2", "--no-progress"], {
        stdio: ["ignore", "pipe", "pipe"],
        env: { ...process.env, NOMAD_ADDR: nomad.address },
      });
      let stdout = "";
      let stderr = "";
      child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
      child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
      child.on("exit", (code) => resolve({ code, stdout, stderr }));
    });
    expect(r.stderr).toContain("on the nomad provisioner");
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/success rate\s+100\.0%/);
    expect((await readFile(out, "utf8")).trim().split("\n")).toHaveLength(2);
  }, 60_000);
});
