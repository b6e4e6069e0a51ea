import { NomadClient } from "../../src/nomad/client.js";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { NomadProvisioner } from "../../src/pool/nomad-provisioner.js";
import { SlotPool, type SlotPoolOptions } from "../../src/pool/slot-pool.js";
import type { ToolResult } from "../../src/protocol/tool.js";
import type { NomadEmulator } from "../support/nomad-emulator.js";

export { within, processesWithMarker, eventually } from "../security/support.js";

/** A Nomad client with short, bounded retries and timeouts (every wait in these tests has a bound). */
export function boundedClient(address: string, token?: string, timeoutMs = 3_000): NomadClient {
  return new NomadClient({ address, retry: { attempts: 3, baseMs: 20, maxMs: 100 }, timeoutMs, ...(token ? { token } : {}) });
}

export interface Stack {
  jobId: string;
  client: NomadClient;
  pool: SlotPool;
  executor: ToolExecutor;
  /** Runs one bash call of `trajectoryId` through the executor. */
  bash(trajectoryId: string, command: string, timeoutS?: number): Promise<ToolResult>;
  stop(): Promise<void>;
}

let counter = 0;

/** pool (NomadProvisioner on the emulator) + ToolExecutor, as an env would run them. */
export function nomadStack(nomad: NomadEmulator, pool: Partial<SlotPoolOptions> = {}, clientToken?: string): Stack {
  const jobId = `faults-${process.pid}-${++counter}`;
  const client = boundedClient(nomad.address, clientToken);
  const slotsPerContainer = pool.slotsPerContainer ?? 2;
  const provisioner = new NomadProvisioner({ slotsPerContainer, client, job: { jobId }, blockingWaitMs: 2_000 });
  const slotPool = new SlotPool({
    slotsPerContainer,
    minContainers: 1,
    maxContainers: 2,
    tickMs: 50,
    // Each check's timeout is min(5 s, this): 300 ms gave a healthy replacement up on a CI box
    // loaded by the cluster suite's CPU burners; a lost allocation closes its socket and is seen at once anyway.
    healthIntervalMs: 1_000,
    healthFailuresBeforeLost: 2,
    startTimeoutMs: 20_000,
    acquireTimeoutMs: 15_000,
    ...pool,
    provisioner,
  });
  const executor = new ToolExecutor({ pool: slotPool, config: { acquireTimeoutMs: pool.acquireTimeoutMs ?? 15_000 } });
  let n = 0;
  return {
    jobId,
    client,
    pool: slotPool,
    executor,
    bash: (trajectoryId, command, timeoutS = 20) => executor.execute(trajectoryId, { name: "bash", arguments: { command }, uniq_id: `c${++n}` }, { timeoutMs: timeoutS * 1000 }),
    async stop() {
      await executor.close().catch(() => undefined);
      await slotPool.stop({ purge: true }).catch(() => undefined);
    },
  };
}

/** Jobs of `jobId` still known to Nomad and not dead (an orphan if the pool was stopped). */
export async function liveJobs(address: string, jobId: string): Promise<string[]> {
  const jobs = await boundedClient(address).listJobs({ prefix: jobId });
  return jobs.filter((j) => j.ID === jobId && j.Status !== "dead").map((j) => `${j.ID} (${j.Status})`);
}

/** Allocations of `jobId` whose sandbox server should still run. */
export function runningAllocations(nomad: NomadEmulator, jobId: string): string[] {
  return nomad
    .allocations(jobId)
    .filter((a) => a["DesiredStatus"] === "run" && a["ClientStatus"] === "running")
    .map((a) => String(a["ID"]));
}

/** A call's outcome: its result, or what it rejected with (a lost slot rejects with SlotLostError). */
export function outcome(call: Promise<ToolResult>): Promise<ToolResult | Error> {
  return call.catch((err: unknown) => err as Error);
}
