/**
 * `slotpool jobs prune` against Nomad's documented job list shape (nock; no real network).
 */
import nock from "nock";
import { describe, expect, it } from "vitest";
import { formatPruneReport, pruneJobs } from "../../src/cli/jobs.js";
import { NomadClient } from "../../src/nomad/client.js";
import { useNockOffline } from "../support/nock-offline.js";

const ADDR = "http://nomad.test:4646";

function stub(id: string, meta: Record<string, string> | null, status = "running", stop = false) {
  return {
    ID: id,
    Name: id,
    Type: "service",
    Status: status,
    Stop: stop,
    Meta: meta,
    JobSummary: { JobID: id, Summary: { sandbox: { Queued: 0, Complete: 0, Failed: 0, Running: 2, Starting: 1, Lost: 0 } } },
  };
}

const JOBS = [
  stub("slotpool-sandbox", { slotpool: "true", "slotpool.owner": "alice@box", "slotpool.created": "2026-01-01T00:00:00.000Z" }),
  stub("slotpool-fresh", { slotpool: "true", "slotpool.owner": "bob@box", "slotpool.created": "2026-11-22T08:59:00.000Z" }),
  stub("unrelated-web", { team: "web" }),
  stub("slotpool-old-dead", { slotpool: "true", "slotpool.owner": "alice@box", "slotpool.created": "2026-01-01T00:00:00.000Z" }, "dead", true),
];

const client = () => new NomadClient({ address: ADDR, retry: { attempts: 1, baseMs: 1, maxMs: 1 }, timeoutMs: 2_000 });

useNockOffline();

/** No scaling events: each job's owner is judged by its creation time alone. */
function noScaleEvents(): void {
  nock(ADDR).get(/^\/v1\/job\/[^/]+\/scale$/).reply(404, "job not found").persist();
}

describe("slotpool jobs prune", () => {
  it("an agent that lists no Meta (Nomad 1.1 ignores meta=true, seen on a real 1.1.2 agent): each job is read for it", async () => {
    const bare = JOBS.slice(0, 3).map(({ Meta: _meta, ...rest }) => rest);
    nock(ADDR).get("/v1/jobs").query({ meta: "true" }).reply(200, bare);
    noScaleEvents();
    for (const j of JOBS.slice(0, 3)) nock(ADDR).get(`/v1/job/${j.ID}`).reply(200, { ID: j.ID, Name: j.ID, Type: "service", Meta: j.Meta });
    const jobs = await pruneJobs(client(), { dryRun: true });
    expect(jobs.map((j) => j.id)).toEqual(["slotpool-sandbox", "slotpool-fresh"]);
    expect(jobs[0]).toMatchObject({ owner: "alice@box" });
    expect(nock.isDone()).toBe(true);
  });

  it("dry run lists running slotpool jobs only and stops nothing", async () => {
    nock(ADDR).get("/v1/jobs").query({ meta: "true" }).reply(200, JOBS);
    noScaleEvents();
    const jobs = await pruneJobs(client(), { dryRun: true });
    expect(jobs.map((j) => j.id)).toEqual(["slotpool-sandbox", "slotpool-fresh"]);
    expect(jobs[0]).toMatchObject({ owner: "alice@box", running: 3, stopped: false });
    const report = formatPruneReport(jobs, true);
    expect(report).toMatch(/slotpool-sandbox\s+running\s+3\s+alice@box/);
    expect(report).toMatch(/2 slotpool job\(s\) would be stopped \(dry run: nothing changed\)/);
  });

  it("stops the selected jobs, filtered by owner and age, and reports failures", async () => {
    nock(ADDR).get("/v1/jobs").query({ meta: "true" }).reply(200, JOBS);
    noScaleEvents();
    nock(ADDR).delete("/v1/job/slotpool-sandbox").reply(200, { EvalID: "e1", EvalCreateIndex: 10, JobModifyIndex: 10 });
    const jobs = await pruneJobs(client(), { owner: "alice@box", olderThanMs: 60 * 60_000, now: Date.parse("2026-11-22T09:00:00Z") });
    expect(jobs.map((j) => [j.id, j.stopped])).toEqual([["slotpool-sandbox", true]]);
    expect(formatPruneReport(jobs, false)).toMatch(/1 slotpool job\(s\) stopped/);

    nock(ADDR).get("/v1/jobs").query({ meta: "true", prefix: "slotpool-f" }).reply(200, [JOBS[1]]);
    nock(ADDR).delete("/v1/job/slotpool-fresh").query({ purge: "true" }).reply(403, "Permission denied");
    const failed = await pruneJobs(client(), { prefix: "slotpool-f", purge: true });
    expect(failed[0]!.stopped).toBe(false);
    expect(failed[0]!.error).toMatch(/Permission denied/);
    expect(formatPruneReport(failed, false)).toMatch(/0 slotpool job\(s\) stopped, 1 failed/);
  });

  it("leaves a job whose run is alive (a heartbeat 5 s ago) unless --include-live; finds the orphan beside it", async () => {
    const now = Date.parse("2026-11-22T09:00:00Z");
    const live = stub("slotpool-sandbox-live", { slotpool: "true", "slotpool.run": "r1", "slotpool.created": "2026-11-22T08:00:00.000Z" });
    const orphan = stub("slotpool-sandbox-orphan", { slotpool: "true", "slotpool.run": "r2", "slotpool.created": "2026-11-22T08:00:00.000Z" });
    const heartbeat = (run: string, agoMs: number) => ({
      TaskGroups: { sandbox: { Desired: 1, Events: [{ Message: "slotpool: owner heartbeat", Count: null, Meta: { "slotpool.run": run }, Time: String(BigInt(now - agoMs) * 1_000_000n) }] } },
    });
    for (const includeLive of [false, true]) {
      nock(ADDR).get("/v1/jobs").query({ meta: "true" }).reply(200, [live, orphan]);
      nock(ADDR).get("/v1/job/slotpool-sandbox-live/scale").reply(200, heartbeat("r1", 5_000));
      nock(ADDR).get("/v1/job/slotpool-sandbox-orphan/scale").reply(200, heartbeat("r2", 600_000));
      const jobs = await pruneJobs(client(), { dryRun: true, now, includeLive });
      expect(jobs.filter((j) => !j.leftAlone).map((j) => j.id)).toEqual(includeLive ? ["slotpool-sandbox-live", "slotpool-sandbox-orphan"] : ["slotpool-sandbox-orphan"]);
      // Left alone, and said so: the listing names the live job and why.
      expect(jobs.filter((j) => j.leftAlone).map((j) => [j.id, j.leftAlone])).toEqual(includeLive ? [] : [["slotpool-sandbox-live", "left alone: its run is alive (heard from 5 s ago); --include-live stops it too"]]);
      nock.cleanAll();
    }
  });

  it("says so when there is nothing to prune", () => {
    expect(formatPruneReport([], false)).toBe("no slotpool jobs to prune\n");
  });
});
