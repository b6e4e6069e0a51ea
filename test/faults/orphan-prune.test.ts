/**
 * An env process killed mid-run (SIGKILL: no cleanup runs) leaves its Nomad job behind;
 * `slotpool jobs prune` finds it by its Meta and stops it, and its allocations go away.
 */
import { spawn } from "node:child_process";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { startNomadEmulator, type NomadEmulator } from "../support/nomad-emulator.js";
import { eventually, liveJobs, runningAllocations, within } from "./support.js";
import { processesWithMarker } from "../security/support.js";

let nomad: NomadEmulator;
beforeAll(async () => {
  nomad = await startNomadEmulator({ rescheduleDelayMs: 100 });
});
afterAll(async () => {
  await nomad?.stop();
});

/** Runs the built CLI without blocking this process (the emulator lives in it). */
function cli(argv: string[], env: NodeJS.ProcessEnv): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const { command, args } = slotpoolCommand();
  const child = spawn(command, [...args, ...argv], { env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return within(30_000, `slotpool ${argv.join(" ")}`, new Promise((resolve) => child.once("exit", (status) => resolve({ status, stdout, stderr }))));
}

/**
 * The env as ONE node process (tsx as a loader, not the tsx CLI): the CLI runs the script in
 * a child node of its own, so SIGKILL reached only the wrapper and every run left a
 * `doomed-env.ts orphan-*` node process behind (issue 20).
 */
function runEnv(jobId: string): { child: ReturnType<typeof spawn>; ready: Promise<string> } {
  const child = spawn(process.execPath, ["--import", "tsx", join(process.cwd(), "test/faults/support/doomed-env.ts"), jobId], {
    env: { ...process.env, NOMAD_ADDR: nomad.address, NOMAD_TOKEN: "" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  let err = "";
  const ready = new Promise<string>((resolve, reject) => {
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      if (out.includes("READY")) resolve(out.trim());
    });
    child.stderr!.on("data", (d: Buffer) => (err += d.toString()));
    child.once("exit", (code) => reject(new Error(`env exited early (${code}): ${err.slice(-1000)}`)));
  });
  return { child, ready };
}

describe("an env process killed mid-run", () => {
  it("leaves its job running; 'slotpool jobs prune' finds it by Meta and stops it", async () => {
    const jobId = `orphan-${process.pid}`;
    const env = runEnv(jobId);
    expect(await within(60_000, "env start", env.ready)).toBe(`READY ${jobId} working`);
    env.child.kill("SIGKILL");
    await new Promise((r) => env.child.once("exit", r));
    // The env itself is gone (its job is the orphan, not a process).
    expect(await eventually(() => processesWithMarker(`doomed-env.ts ${jobId}`).length === 0, 30_000), "doomed-env process after SIGKILL").toBe(true);
    // The orphan: nobody will stop this job any more.
    expect(await liveJobs(nomad.address, jobId)).toHaveLength(1);
    expect(runningAllocations(nomad, jobId)).toHaveLength(1);

    const env2 = { ...process.env, NOMAD_ADDR: nomad.address, NOMAD_TOKEN: "" };
    // Its run is gone: no heartbeat since the kill (a short staleness bound instead of 45 s).
    const alive = await cli(["jobs", "prune", "--dry-run", "--prefix", jobId], env2);
    expect(alive.stdout).toMatch(new RegExp(`${jobId} .*left alone: its run is alive`));
    expect(alive.stdout).toContain("0 slotpool job(s) would be stopped");
    // wait: the run's last heartbeat growing older than the 2 s staleness asked for below (time is the event here)
    await new Promise((r) => setTimeout(r, 3_000));
    const dry = await cli(["jobs", "prune", "--dry-run", "--prefix", jobId, "--owner-stale-s", "2"], env2);
    expect(dry.status, dry.stderr).toBe(0);
    expect(dry.stdout).toContain(jobId);
    expect(await liveJobs(nomad.address, jobId)).toHaveLength(1);

    const prune = await cli(["jobs", "prune", "--prefix", jobId, "--purge", "--owner-stale-s", "2"], env2);
    expect(prune.status, prune.stderr).toBe(0);
    expect(prune.stdout).toContain(jobId);
    expect(await liveJobs(nomad.address, jobId)).toEqual([]);
    expect(await eventually(() => runningAllocations(nomad, jobId).length === 0, 10_000)).toBe(true);
  }, 90_000);
});
