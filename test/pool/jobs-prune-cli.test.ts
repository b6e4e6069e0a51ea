/**
 * `slotpool jobs prune` as a command (built CLI) against the Nomad API emulator.
 */
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { NomadClient } from "../../src/nomad/client.js";
import { sandboxJob } from "../../src/nomad/job.js";
import { startNomadEmulator, type NomadEmulator } from "../support/nomad-emulator.js";

const exec = promisify(execFile);
let nomad: NomadEmulator;

beforeAll(async () => {
  nomad = await startNomadEmulator();
});
afterAll(async () => {
  await nomad?.stop();
});

async function slotpool(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const { command, args: base } = slotpoolCommand();
  try {
    const { stdout, stderr } = await exec(command, [...base, ...args], { env: { ...process.env, NOMAD_ADDR: nomad.address, NOMAD_TOKEN: "" } });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

describe("slotpool jobs prune (CLI, Nomad emulator)", () => {
  it("lists with --dry-run, then stops the left-behind slotpool job and nothing else", async () => {
    const client = new NomadClient({ address: nomad.address });
    // Left behind an hour ago by a run that is gone (no heartbeat since); a live run's job
    // beside it is left alone.
    await client.registerJob(sandboxJob({ jobId: "left-behind", count: 1, slots: 1, owner: "ci@test", created: new Date(Date.now() - 3_600_000).toISOString() }));
    await client.registerJob(sandboxJob({ jobId: "live-run", count: 0, slots: 1, owner: "ci@test" }));
    await client.registerJob({
      ID: "someone-else",
      Name: "someone-else",
      Type: "service",
      Datacenters: ["*"],
      TaskGroups: [{ Name: "web", Count: 0, Tasks: [{ Name: "t", Driver: "docker", Config: { image: "nginx" } }] }],
    });
    const dry = await slotpool("jobs", "prune", "--dry-run");
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(/left-behind\s+running\s+\d+\s+ci@test/);
    expect(dry.stdout).not.toContain("someone-else");
    // The live run's job is not stopped, and the listing says so, with why (never silently skipped).
    expect(dry.stdout).toMatch(/live-run\s+\S+\s+\d+\s+ci@test\s+\S+\s+left alone: its run is alive \(heard from \d+ s ago\); --include-live stops it too/);
    expect(dry.stdout).toContain("1 slotpool job(s) would be stopped (dry run: nothing changed); 1 left alone (a live run's job)");
    expect((await client.readJob("left-behind"))?.Stop).toBeFalsy();

    const real = await slotpool("jobs", "prune");
    expect(real.code).toBe(0);
    expect(real.stdout).toContain("1 slotpool job(s) stopped; 1 left alone (a live run's job)");
    expect((await client.readJob("left-behind"))?.Stop).toBe(true);
    expect((await client.readJob("someone-else"))?.Stop).toBeFalsy();
    expect((await client.readJob("live-run"))?.Stop).toBeFalsy();

    expect((await slotpool("jobs", "prune")).stdout).toMatch(/^JOB.*\nlive-run .*left alone.*\n0 slotpool job\(s\) stopped; 1 left alone \(a live run's job\)\n$/);
    const bad = await slotpool("jobs", "prune", "--bogus");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/Unknown option '--bogus'/);
    await client.close();
  });
});
