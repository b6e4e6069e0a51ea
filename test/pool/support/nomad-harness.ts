/**
 * Shared set-up of the NomadProvisioner integration tests: one Nomad API emulator per test
 * file (allocations are real sandbox-server processes), pools stopped after each test.
 */
import { afterAll, afterEach, beforeAll } from "vitest";
import { NomadClient } from "../../../src/nomad/client.js";
import { NomadProvisioner, type NomadProvisionerOptions } from "../../../src/pool/nomad-provisioner.js";
import { SlotPool, type SlotPoolOptions } from "../../../src/pool/slot-pool.js";
import type { LeasedSlot } from "../../../src/pool/types.js";
import { startNomadEmulator, type NomadEmulator } from "../../support/nomad-emulator.js";

export interface NomadHarness {
  readonly nomad: NomadEmulator;
  /** Pools stopped after each test. */
  readonly pools: SlotPool[];
  client(address?: string, token?: string): NomadClient;
  nomadPool(config?: Partial<SlotPoolOptions>, prov?: Partial<NomadProvisionerOptions>): { pool: SlotPool; provisioner: NomadProvisioner; jobId: string };
  /** Scale calls the emulator received for the job. */
  scaleCalls(jobId: string): number;
}

/** Registers the hooks; call once at the top of a test file. */
export function useNomadHarness(name: string): NomadHarness {
  let nomad: NomadEmulator | undefined;
  const pools: SlotPool[] = [];
  let jobCounter = 0;
  beforeAll(async () => {
    nomad = await startNomadEmulator({ rescheduleDelayMs: 100 });
  });
  afterEach(async () => {
    for (const p of pools.splice(0)) await p.stop().catch(() => undefined);
  });
  afterAll(async () => {
    await nomad?.stop();
  });
  const harness: NomadHarness = {
    get nomad() {
      if (!nomad) throw new Error("the emulator is not started yet (use the harness inside tests)");
      return nomad;
    },
    pools,
    client(address = harness.nomad.address, token?: string) {
      return new NomadClient({ address, retry: { attempts: 3, baseMs: 20, maxMs: 100 }, timeoutMs: 5_000, ...(token ? { token } : {}) });
    },
    nomadPool(config = {}, prov = {}) {
      const jobId = `${name}-${process.pid}-${++jobCounter}`;
      const slotsPerContainer = config.slotsPerContainer ?? 2;
      // Heartbeats are scale events too: rare here, so tests can count the scale calls exactly.
      const provisioner = new NomadProvisioner({ slotsPerContainer, client: harness.client(), job: { jobId }, blockingWaitMs: 5_000, heartbeatMs: 60_000, ...prov });
      const pool = new SlotPool({ slotsPerContainer, minContainers: 1, maxContainers: 3, tickMs: 50, startTimeoutMs: 20_000, ...config, provisioner });
      pools.push(pool);
      return { pool, provisioner, jobId };
    },
    scaleCalls(jobId) {
      return harness.nomad.requests.filter((r) => r.method === "POST" && r.path === `/v1/job/${jobId}/scale`).length;
    },
  };
  return harness;
}

export async function until(cond: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 10));
  }
}

export const bash = (slot: LeasedSlot, command: string) => slot.execute({ tool: "bash", args: { command } });
