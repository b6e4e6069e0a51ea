/**
 * NomadProvisioner start-up failures the emulator cannot produce (no capacity, crash loop),
 * against Nomad's documented answer shapes replayed by nock (real network disabled).
 */
import nock from "nock";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { NomadClient } from "../../src/nomad/client.js";
import { NomadProvisioner, describePlacementFailure } from "../../src/pool/nomad-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import { createLogger } from "../../src/observability/logger.js";

const ADDR = "http://nomad.test:4646";
const JOB = "contract-job";

beforeAll(() => nock.disableNetConnect());
afterEach(() => nock.cleanAll());
afterAll(() => {
  nock.enableNetConnect();
  nock.restore();
});

function pool(logLines?: string[]): SlotPool {
  const logger = logLines ? createLogger({ name: "t", level: "info", destination: { write: (l: string) => void logLines.push(l) } as unknown as NodeJS.WritableStream }) : undefined;
  const client = new NomadClient({ address: ADDR, retry: { attempts: 1, baseMs: 1, maxMs: 1 }, timeoutMs: 2_000 });
  const provisioner = new NomadProvisioner({ slotsPerContainer: 2, client, job: { jobId: JOB }, blockingWaitMs: 1_000, ...(logger ? { logger } : {}) });
  return new SlotPool({ slotsPerContainer: 2, minContainers: 1, maxContainers: 2, startTimeoutMs: 10_000, provisioner, ...(logger ? { logger } : {}) });
}

function submitJob(allocations: unknown[], evaluations: unknown[]): nock.Scope {
  return nock(ADDR)
    .get("/v1/status/leader").reply(200, '"127.0.0.1:4647"', { "Content-Type": "application/json" })
    .get(`/v1/job/${JOB}`).reply(404, "job not found")
    .post("/v1/jobs").reply(200, { EvalID: "eval-1", EvalCreateIndex: 20, JobModifyIndex: 20, Index: 20 }, { "X-Nomad-Index": "20" })
    .get(`/v1/job/${JOB}/allocations`).query(true).times(50).reply(200, allocations, { "X-Nomad-Index": "21" })
    .get(`/v1/job/${JOB}/evaluations`).query(true).times(50).reply(200, evaluations, { "X-Nomad-Index": "21" })
    .delete(`/v1/job/${JOB}`).query(true).reply(200, { EvalID: "eval-2", EvalCreateIndex: 22, JobModifyIndex: 22 });
}

const NO_MEMORY_EVAL = {
  ID: "eval-1",
  JobID: JOB,
  Status: "complete",
  TriggeredBy: "job-register",
  BlockedEval: "eval-blocked",
  CreateIndex: 20,
  FailedTGAllocs: {
    sandbox: {
      NodesEvaluated: 3,
      NodesFiltered: 0,
      NodesAvailable: { dc1: 3 },
      DimensionExhausted: { memory: 3 },
      ConstraintFiltered: null,
      CoalescedFailures: 0,
    },
  },
};

function failedAlloc(id: string, index: number) {
  return {
    ID: id,
    Name: `${JOB}.sandbox[${index}]`,
    JobID: JOB,
    TaskGroup: "sandbox",
    DesiredStatus: "run",
    ClientStatus: "failed",
    ClientDescription: "Failed tasks",
    TaskStates: {
      "sandbox-server": {
        State: "dead",
        Failed: true,
        Restarts: 0,
        Events: [
          { Type: "Started", Time: 1700000000000000000n.toString(), DisplayMessage: "Task started by client" },
          { Type: "Terminated", Time: 1700000001000000000n.toString(), ExitCode: 2, DisplayMessage: "Exit Code: 2", FailsTask: true },
        ],
      },
    },
    CreateIndex: 21,
    ModifyIndex: 21,
  };
}

describe("NomadProvisioner start-up failures (documented shapes)", () => {
  it("placement failure: start() fails with the evaluation's reason", async () => {
    submitJob([], [NO_MEMORY_EVAL]);
    const p = pool();
    const t0 = Date.now();
    const err = await p.start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/could not place 1 of 1 sandbox allocations/);
    expect((err as Error).message).toMatch(/DimensionExhausted: memory \(3\)/);
    expect((err as Error).message).toMatch(/Add client capacity/);
    // bound: from the evaluation, not the pool's 10 s start timeout here: 8 s tells them apart on a loaded box.
    expect(Date.now() - t0).toBeLessThan(8_000);
  });

  it("crash loop: start() fails with the failed allocations' task events", async () => {
    submitJob([failedAlloc("a1", 0), failedAlloc("a2", 0)], []);
    const err = await pool().start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/keep failing \(2 so far\)/);
    expect((err as Error).message).toMatch(/Terminated: Exit Code: 2/);
    expect((err as Error).message).toMatch(/nomad alloc logs/);
  });

  it("no node with the job's driver (Nomad's 'missing drivers'): start() fails naming pool.nomad.driver, and the reason is said once, not once per evaluation and logger", async () => {
    const missingDrivers = (id: string, index: number) => ({
      ...NO_MEMORY_EVAL,
      ID: id,
      CreateIndex: index,
      FailedTGAllocs: { sandbox: { NodesEvaluated: 1, NodesFiltered: 1, NodesAvailable: { dc1: 1 }, DimensionExhausted: null, ConstraintFiltered: { "missing drivers": 1 }, CoalescedFailures: 0 } },
    });
    submitJob([], [missingDrivers("eval-1", 20), missingDrivers("eval-2", 21), missingDrivers("eval-3", 22)]);
    const lines: string[] = [];
    const err = await pool(lines).start().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    const message = (err as Error).message;
    expect(message).toMatch(/ConstraintFiltered: missing drivers \(1\)/);
    expect(message).toMatch(/No node has the job's task driver 'docker' enabled: set pool\.nomad\.driver/);
    expect(message).not.toMatch(/pool\.nomad\.constraints/);
    expect(message.match(/missing drivers/g)).toHaveLength(1);
    // The start's error says it; no log line repeats it.
    expect(lines.filter((l) => l.includes("missing drivers"))).toEqual([]);
  });

  it("summarises FailedTGAllocs", () => {
    expect(describePlacementFailure(undefined)).toBeUndefined();
    expect(describePlacementFailure({ ID: "e", FailedTGAllocs: {} })).toBeUndefined();
    expect(
      describePlacementFailure({ ID: "e", FailedTGAllocs: { sandbox: { NodesEvaluated: 0, NodesAvailable: { dc1: 0 }, ConstraintFiltered: { "${attr.kernel.name} = linux": 2 } } } }),
    ).toBe('group sandbox: 0 nodes evaluated; no nodes available in the datacenters "dc1"; ConstraintFiltered: ${attr.kernel.name} = linux (2)');
  });
});
