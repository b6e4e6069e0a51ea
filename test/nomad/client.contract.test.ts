/**
 * Contract tests: the client against Nomad's documented answers (shared/nomad-api/),
 * replayed by nock. Real network is disabled, so a request that escapes interception
 * fails the test instead of reaching anything.
 */
import { readFileSync } from "node:fs";
import nock from "nock";
import { describe, expect, it } from "vitest";
import { allocationHttpAddress, allocationNameIndex, latestTaskEvents } from "../../src/nomad/allocation.js";
import { NomadClient } from "../../src/nomad/client.js";
import {
  NomadAclDeniedError,
  NomadConfigError,
  NomadError,
  NomadNotFoundError,
  NomadScaleBlockedError,
  NomadTimeoutError,
  NomadUnreachableError,
} from "../../src/nomad/errors.js";
import { sandboxJob } from "../../src/nomad/job.js";
import { MetricsRegistry } from "../../src/observability/metrics.js";
import type { NomadEvent } from "../../src/nomad/schemas.js";
import { fixtureText } from "./nomad-api-fixtures.js";
import { useNockOffline } from "../support/nock-offline.js";

const ADDR = "http://nomad.test:4646";
const JSON_HEADERS = { "Content-Type": "application/json" };
const TEXT_HEADERS = { "Content-Type": "text/plain; charset=utf-8" };

function client(extra: ConstructorParameters<typeof NomadClient>[0] = {}): NomadClient {
  return new NomadClient({ address: ADDR, retry: { attempts: 3, baseMs: 1, maxMs: 5 }, timeoutMs: 2_000, ...extra });
}

useNockOffline();

describe("requests and documented answers", () => {
  it("leader: bare JSON string; token header, namespace and region on every call", async () => {
    nock(ADDR, { reqheaders: { "x-nomad-token": "s3cret" } })
      .get("/v1/status/leader")
      .query({ namespace: "ml", region: "eu" })
      .reply(200, fixtureText("status-leader.response.json"), JSON_HEADERS);
    expect(await client({ token: "s3cret", namespace: "ml", region: "eu" }).leader()).toBe("127.0.0.1:4647");
  });

  it("registerJob posts {Job, PreserveCounts} and reads the register response", async () => {
    const job = sandboxJob({ jobId: "sbx", count: 2 });
    let seen: Record<string, unknown> | undefined;
    nock(ADDR)
      .post("/v1/jobs", (body: Record<string, unknown>) => {
        seen = body;
        return true;
      })
      .reply(200, fixtureText("jobs-register.response.json"), JSON_HEADERS);
    const res = await client().registerJob(job, { preserveCounts: true });
    expect(seen).toEqual({ Job: job, PreserveCounts: true });
    expect(res.JobModifyIndex).toBe(109);
    expect(res.EvalID).toBe("");
  });

  it("registerJob without preserveCounts sends no PreserveCounts key", async () => {
    nock(ADDR)
      .post("/v1/jobs", (body: Record<string, unknown>) => !("PreserveCounts" in body) && (body["Job"] as { ID: string }).ID === "sbx")
      .reply(200, fixtureText("job-update.response.json"), JSON_HEADERS);
    expect((await client().registerJob(sandboxJob({ jobId: "sbx" }))).EvalID).toBe("d092fdc0-e1fd-2536-67d8-43af8ca798ac");
  });

  it("readJob parses the documented job; 404 'job not found' is null", async () => {
    nock(ADDR).get("/v1/job/example").reply(200, fixtureText("job-read.response.json"), JSON_HEADERS);
    nock(ADDR).get("/v1/job/missing").reply(404, "job not found", TEXT_HEADERS);
    const job = await client().readJob("example");
    expect(job?.TaskGroups?.[0]?.Name).toBe("cache");
    expect(job?.Namespace).toBe("apps");
    expect(await client().readJob("missing")).toBeNull();
  });

  it("listJobs sends prefix and meta=true", async () => {
    const stub = [{ ID: "slotpool-a", Name: "slotpool-a", Type: "service", Status: "running", Meta: { slotpool: "true" }, SubmitTime: 1636017249798459001n }];
    nock(ADDR)
      .get("/v1/jobs")
      .query({ prefix: "slotpool", meta: "true" })
      .reply(200, JSON.stringify(stub, (_k, v: unknown) => (typeof v === "bigint" ? Number(v) : v)).replace("1636017249798459000", "1636017249798459001"), JSON_HEADERS);
    const jobs = await client().listJobs({ prefix: "slotpool", meta: true });
    expect(jobs.map((j) => [j.ID, j.Meta?.["slotpool"]])).toEqual([["slotpool-a", "true"]]);
    expect(jobs[0]!.SubmitTime).toBe("1636017249798459001");
  });

  it("jobAllocations: blocking query sends index and wait, returns X-Nomad-Index", async () => {
    nock(ADDR)
      .get("/v1/job/example/allocations")
      .query({ index: "12", wait: "1500ms" })
      .reply(200, fixtureText("job-allocations.response.json"), { ...JSON_HEADERS, "X-Nomad-Index": "13", "X-Nomad-KnownLeader": "true" });
    const { allocations, index } = await client().jobAllocations("example", { index: 12, waitMs: 1_500 });
    expect(index).toBe(13);
    expect(allocations).toHaveLength(1);
    expect(allocations[0]!.ClientStatus).toBe("running");
    expect(allocationNameIndex(allocations[0]!.Name)).toBe(0);
    // List stubs carry no ports (README "No ports here").
    expect(allocationHttpAddress(allocations[0]!, "db")).toBeNull();
    expect(latestTaskEvents(allocations[0]!, 2)).toEqual(["redis: Driver: Downloading image redis:7", "redis: Started"]);
    expect(allocations[0]!.CreateTime).toBe("1495755675944527600");
  });

  it("jobAllocations of an unknown job is [] (not 404), and without index it does not block", async () => {
    nock(ADDR)
      .get("/v1/job/nope/allocations")
      .query((q) => !("index" in q) && !("wait" in q))
      .reply(200, "[]", { ...JSON_HEADERS, "X-Nomad-Index": "1" });
    expect(await client().jobAllocations("nope")).toEqual({ allocations: [], index: 1 });
  });

  it("readAllocation: documented sample, address from the legacy task networks; 404 is null", async () => {
    nock(ADDR).get("/v1/allocation/a8198d79-cfdb-6593-a999-1e9adabcba2e").reply(200, fixtureText("allocation-read.response.json"), { ...JSON_HEADERS, "X-Nomad-Index": "57" });
    nock(ADDR).get("/v1/allocation/gone").reply(404, "alloc not found", TEXT_HEADERS);
    const alloc = await client().readAllocation("a8198d79-cfdb-6593-a999-1e9adabcba2e");
    expect(alloc?.Job?.ID).toBe("example");
    expect(allocationHttpAddress(alloc!, "db")).toEqual({ host: "127.0.0.1", port: 23116, url: "http://127.0.0.1:23116" });
    expect(await client().readAllocation("gone")).toBeNull();
  });

  it("readAllocation finds a group port in AllocatedResources.Shared.Ports", async () => {
    const allocatedResources = JSON.parse(fixtureText("client-state.allocated-resources.json")) as Record<string, unknown>;
    nock(ADDR)
      .get("/v1/allocation/abc")
      .reply(200, JSON.stringify({ ID: "abc", Name: "sbx.sandbox[3]", ClientStatus: "running", DesiredStatus: "run", AllocatedResources: allocatedResources }), JSON_HEADERS);
    const alloc = await client().readAllocation("abc");
    expect(allocationHttpAddress(alloc!)).toEqual({ host: "192.168.1.9", port: 5678, url: "http://192.168.1.9:5678" });
    expect(allocationNameIndex(alloc!.Name)).toBe(3);
  });

  it("scaleTaskGroup posts Count/Target/Message and reads the documented answer", async () => {
    nock(ADDR)
      .post("/v1/job/example/scale", { Count: 5, Target: { Group: "cache" }, Message: "metric did not satisfy SLA" })
      .reply(200, fixtureText("job-scale.response.json"), { ...JSON_HEADERS, "X-Nomad-Index": "45" });
    const res = await client().scaleTaskGroup("example", "cache", 5, { message: "metric did not satisfy SLA" });
    expect(res.EvalID).toBe("116f3ede-f6a5-f6e7-2d0e-1fda136390f0");
  });

  it("scale errors: active deployment → NomadScaleBlockedError; missing job → NomadNotFoundError", async () => {
    nock(ADDR).post("/v1/job/busy/scale").reply(400, "job scaling blocked due to active deployment", TEXT_HEADERS);
    nock(ADDR).post("/v1/job/ghost/scale").reply(404, 'job "ghost" not found', TEXT_HEADERS);
    const blocked = await client().scaleTaskGroup("busy", "sandbox", 2).catch((e: unknown) => e);
    expect(blocked).toBeInstanceOf(NomadScaleBlockedError);
    expect((blocked as NomadError).status).toBe(400);
    expect((blocked as Error).message).toMatch(/MaxParallel/);
    const missing = await client().scaleTaskGroup("ghost", "sandbox", 2).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(NomadNotFoundError);
    expect((missing as NomadError).nomadMessage).toBe('job "ghost" not found');
    await expect(client().scaleTaskGroup("x", "sandbox", -1)).rejects.toThrow(NomadConfigError);
  });

  it("scaleStatus parses the documented answer; 404 is null", async () => {
    nock(ADDR).get("/v1/job/example/scale").reply(200, fixtureText("job-scale-status.response.json"), JSON_HEADERS);
    nock(ADDR).get("/v1/job/ghost/scale").reply(404, "job not found", TEXT_HEADERS);
    const status = await client().scaleStatus("example");
    expect(status?.TaskGroups?.["cache"]?.Desired).toBe(1);
    expect(await client().scaleStatus("ghost")).toBeNull();
  });

  it("deregisterJob sends purge=true", async () => {
    nock(ADDR).delete("/v1/job/example").query({ purge: "true" }).reply(200, fixtureText("job-deregister.response.json"), JSON_HEADERS);
    expect((await client().deregisterJob("example", { purge: true })).JobModifyIndex).toBe(34);
  });

  it("stopAllocation: POST /v1/allocation/:id/stop, no body; the documented answer {EvalID, Index}; 404 names the allocation", async () => {
    // fixtures/allocation-stop.response.json: the sample response of Nomad's HTTP API docs,
    // "Stop Allocation" (api-docs/allocations), copied into the repo.
    const body = readFileSync(new URL("./fixtures/allocation-stop.response.json", import.meta.url), "utf8");
    let sent: unknown = "unset";
    nock(ADDR)
      .post("/v1/allocation/5456bd7a-9fc0-c0dd-6131-cbee77f57577/stop", (b) => {
        sent = b;
        return true;
      })
      .reply(200, body, JSON_HEADERS);
    nock(ADDR).post("/v1/allocation/gone/stop").reply(404, "alloc not found", TEXT_HEADERS);
    expect(await client().stopAllocation("5456bd7a-9fc0-c0dd-6131-cbee77f57577")).toEqual({ EvalID: "5456bd7a-9fc0-c0dd-6131-cbee77f57577", Index: 54 });
    expect(sent).toBe("");
    await expect(client().stopAllocation("gone")).rejects.toBeInstanceOf(NomadNotFoundError);
  });

  it("jobEvaluations and readEvaluation (related) parse the documented answers", async () => {
    nock(ADDR).get("/v1/job/example/evaluations").reply(200, fixtureText("job-evaluations.response.json"), JSON_HEADERS);
    nock(ADDR).get("/v1/evaluation/2deb5f06-a100-f01a-3316-5e501a4965e7").query({ related: "true" }).reply(200, fixtureText("evaluation-read.response.json"), JSON_HEADERS);
    nock(ADDR).get("/v1/evaluation/none").reply(404, "eval not found", TEXT_HEADERS);
    const evals = await client().jobEvaluations("example");
    expect(evals[0]?.TriggeredBy).toBe("job-register");
    const ev = await client().readEvaluation("2deb5f06-a100-f01a-3316-5e501a4965e7", { related: true });
    expect(ev?.Status).toBe("blocked");
    expect(ev?.FailedTGAllocs?.["cache"]).toBeDefined();
    expect(ev?.RelatedEvals?.[0]?.TriggeredBy).toBe("node-drain");
    expect(await client().readEvaluation("none")).toBeNull();
  });

  it("eventStream: topic filter in the query, heartbeat skipped, events yielded", async () => {
    const alloc = JSON.parse(fixtureText("allocations-list.response.json"))[0] as Record<string, unknown>;
    const allocFrame = JSON.stringify({ Index: 20, Events: [{ Topic: "Allocation", Type: "AllocationUpdated", Key: alloc["ID"], Namespace: "default", FilterKeys: ["example"], Index: 20, Payload: { Allocation: alloc } }] });
    nock(ADDR)
      .get("/v1/event/stream")
      .query({ topic: ["Allocation:example", "Job:example"], index: "7" })
      .reply(200, fixtureText("event-stream.ndjson") + allocFrame + "\n{}\n", JSON_HEADERS);
    const events: NomadEvent[] = [];
    for await (const e of client().eventStream({ topics: { Allocation: ["example"], Job: ["example"] }, index: 7 })) events.push(e);
    expect(events.map((e) => [e.Topic, e.Type, e.Index])).toEqual([
      ["Node", "NodeRegistration", 7],
      ["Allocation", "AllocationUpdated", 20],
    ]);
    expect(events[1]!.Payload?.Allocation?.ClientStatus).toBe("running");
    expect(events[1]!.Payload?.Allocation?.ModifyTime).toBe("1636017262190928000");
  });

  it("eventStream: breaking out of the loop ends the subscription", async () => {
    nock(ADDR).get("/v1/event/stream").query(true).reply(200, "{}\n" + fixtureText("event-stream.ndjson").split("\n")[1] + "\n", JSON_HEADERS);
    let n = 0;
    for await (const _ of client().eventStream({ topics: ["Node"] })) {
      n++;
      break;
    }
    expect(n).toBe(1);
  });
});

describe("failures are typed and bounded", () => {
  it("403 → NomadAclDeniedError naming NOMAD_TOKEN and the capability", async () => {
    nock(ADDR).post("/v1/jobs").reply(403, "Permission denied", TEXT_HEADERS);
    const err = await client().registerJob(sandboxJob()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NomadAclDeniedError);
    expect((err as NomadError).status).toBe(403);
    expect((err as Error).message).toMatch(/NOMAD_TOKEN.*namespace:submit-job/);
  });

  it("5xx is retried with backoff, then succeeds", async () => {
    nock(ADDR).get("/v1/job/example/allocations").times(2).reply(500, "rpc error: EOF", TEXT_HEADERS);
    nock(ADDR).get("/v1/job/example/allocations").reply(200, "[]", { ...JSON_HEADERS, "X-Nomad-Index": "9" });
    expect((await client().jobAllocations("example")).index).toBe(9);
  });

  it("counts attempts, outcomes and retries per route in a metrics registry", async () => {
    nock(ADDR).get("/v1/job/sbx-9/allocations").reply(503, "no leader", TEXT_HEADERS);
    nock(ADDR).get("/v1/job/sbx-9/allocations").reply(200, "[]", { ...JSON_HEADERS, "X-Nomad-Index": "4" });
    const metrics = new MetricsRegistry();
    await client({ metrics }).jobAllocations("sbx-9");
    const text = metrics.render();
    expect(text).toContain('slotpool_nomad_requests_total{outcome="503",route="GET /v1/job/:id/allocations"} 1');
    expect(text).toContain('slotpool_nomad_requests_total{outcome="200",route="GET /v1/job/:id/allocations"} 1');
    expect(text).toContain('slotpool_nomad_retries_total{route="GET /v1/job/:id/allocations"} 1');
    expect(text).not.toContain("sbx-9");
  });

  it("5xx that persists ends in NomadError with Nomad's plain-text message, after the configured attempts", async () => {
    nock(ADDR).get("/v1/status/leader").times(3).reply(500, "No cluster leader", TEXT_HEADERS);
    const err = await client().leader().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NomadError);
    expect((err as NomadError).nomadMessage).toBe("No cluster leader");
    expect((err as NomadError).method).toBe("GET");
    expect((err as NomadError).path).toBe("/v1/status/leader");
  });

  it("a job validation 500 is not retried", async () => {
    nock(ADDR).post("/v1/jobs").once().reply(500, "1 error occurred:\n\t* Task group sandbox validation failed", TEXT_HEADERS);
    const err = await client().registerJob(sandboxJob()).catch((e: unknown) => e);
    expect((err as NomadError).status).toBe(500);
    expect((err as NomadError).nomadMessage).toMatch(/validation failed/);
  });

  it("connection refused → NomadUnreachableError telling to check NOMAD_ADDR (after retries)", async () => {
    nock(ADDR).get("/v1/status/leader").times(3).replyWithError({ code: "ECONNREFUSED", message: "connect ECONNREFUSED" });
    const err = await client().leader().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NomadUnreachableError);
    expect((err as Error).message).toMatch(/check NOMAD_ADDR/);
  });

  it("a request nobody mocked does not escape: it fails", async () => {
    const err = await client({ retry: { attempts: 1 } }).readJob("unmocked").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NomadUnreachableError);
    expect((err as Error).message).toMatch(/Nock|net connect/i);
  });

  it("a hanging server → NomadTimeoutError per attempt; the call cannot hang", async () => {
    nock(ADDR).get("/v1/job/slow").times(2).delay(20_000).reply(200, "{}", JSON_HEADERS);
    const started = Date.now();
    const err = await client({ timeoutMs: 150, retry: { attempts: 2, baseMs: 1, maxMs: 2 } }).readJob("slow").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NomadTimeoutError);
    // bound: two 150 ms attempts, not the server's 20 s hang: 5 s is far from both on a loaded box.
    expect(Date.now() - started).toBeLessThan(5_000);
    expect((err as Error).message).toMatch(/did not answer within 150 ms/);
  });

  it("a blocking query's deadline is wait + margin, not the plain timeout", async () => {
    nock(ADDR).get("/v1/job/example/allocations").query(true).delay(400).reply(200, "[]", { ...JSON_HEADERS, "X-Nomad-Index": "30" });
    const res = await client({ timeoutMs: 100 }).jobAllocations("example", { index: 29, waitMs: 200 });
    expect(res.index).toBe(30);
  });

  it("the caller's AbortSignal cancels at once without retrying", async () => {
    nock(ADDR).get("/v1/job/example/allocations").query(true).delay(5_000).reply(200, "[]", JSON_HEADERS);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 50);
    const started = Date.now();
    const err = await client().jobAllocations("example", { index: 3, waitMs: 10_000, signal: ac.signal }).catch((e: unknown) => e);
    expect((err as Error).name).toBe("AbortError");
    // bound: at the abort (50 ms in), not the server's 5 s delay: 3 s leaves a loaded box room.
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it("a 2xx body that is not Nomad's shape is a NomadResponseError, not a crash later", async () => {
    nock(ADDR).get("/v1/job/example/allocations").reply(200, "<html>proxy login</html>", { "Content-Type": "text/html" });
    await expect(client().jobAllocations("example")).rejects.toThrow(/unexpected body: not JSON.*check NOMAD_ADDR/);
  });
});

describe("configuration like the nomad CLI", () => {
  it("reads NOMAD_* from the environment; explicit options win", async () => {
    const env = { NOMAD_ADDR: "http://env.test:4646/", NOMAD_TOKEN: "envtok", NOMAD_NAMESPACE: "envns", NOMAD_REGION: "envreg", NOMAD_SKIP_VERIFY: "true" };
    nock("http://env.test:4646", { reqheaders: { "x-nomad-token": "envtok" } }).get("/v1/status/leader").query({ namespace: "override", region: "envreg" }).reply(200, '"1.2.3.4:4647"', JSON_HEADERS);
    const c = NomadClient.fromEnv({ namespace: "override" }, env);
    expect(c.address).toBe("http://env.test:4646");
    expect(await c.leader()).toBe("1.2.3.4:4647");
  });

  it("defaults to http://127.0.0.1:4646 without NOMAD_ADDR, and sends no token header without NOMAD_TOKEN", async () => {
    nock("http://127.0.0.1:4646", { badheaders: ["x-nomad-token"] }).get("/v1/status/leader").reply(200, '"127.0.0.1:4647"', JSON_HEADERS);
    const c = NomadClient.fromEnv({}, {});
    expect(c.address).toBe("http://127.0.0.1:4646");
    expect(await c.leader()).toBe("127.0.0.1:4647");
  });

  it("rejects bad settings with a message naming the variable", () => {
    expect(() => new NomadClient({ address: "127.0.0.1:4646" })).toThrow(/NOMAD_ADDR must be a URL like http:\/\/127.0.0.1:4646/);
    expect(() => new NomadClient({ address: "ftp://nomad:4646" })).toThrow(/NOMAD_ADDR must start with http:\/\/, https:\/\/ or unix:\/\//);
    expect(() => new NomadClient({ address: "unix://relative.sock" })).toThrow(/absolute socket path/);
    expect(() => new NomadClient({ caCert: "/nonexistent/ca.pem" })).toThrow(/cannot read NOMAD_CACERT file/);
    expect(() => new NomadClient({ clientCert: "/x.pem" })).toThrow(/NOMAD_CLIENT_KEY is not/);
  });
});
