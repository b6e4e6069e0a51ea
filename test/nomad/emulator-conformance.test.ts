/**
 * The emulator against Nomad's documented answers: each raw answer parses with the schemas
 * the client uses, and carries every key of the documented example that the client reads.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { z } from "zod";
import { parseNomadJson } from "../../src/nomad/json.js";
import { sandboxJob } from "../../src/nomad/job.js";
import {
  AllocListSchema,
  AllocationSchema,
  EvaluationListSchema,
  EvaluationSchema,
  EventFrameSchema,
  JobDeregisterResponseSchema,
  JobListSchema,
  JobRegisterResponseSchema,
  JobScaleStatusSchema,
  JobSchema,
  LeaderSchema,
} from "../../src/nomad/schemas.js";
import { startNomadEmulator, type NomadEmulator } from "../support/nomad-emulator.js";
import { fixture, fixtureText } from "./nomad-api-fixtures.js";

type Json = Record<string, unknown>;

/**
 * Does `path` exist in `value`? Segments are keys; `*` is every key of a map; `key[]` is an
 * array that must be non-empty, each element having the rest of the path. A key whose value
 * is null still exists.
 */
function hasPath(value: unknown, path: string): boolean {
  return has(value, path.split("."));
}
function has(value: unknown, segs: string[]): boolean {
  if (segs.length === 0) return true;
  const [seg, ...rest] = segs as [string, ...string[]];
  if (value === null || typeof value !== "object") return false;
  if (seg === "*") {
    const values = Object.values(value as Json);
    return values.length > 0 && values.every((v) => has(v, rest));
  }
  const isArray = seg.endsWith("[]");
  const key = isArray ? seg.slice(0, -2) : seg;
  if (!(key in (value as Json))) return false;
  const child = (value as Json)[key];
  if (isArray) return Array.isArray(child) && child.length > 0 && child.every((c) => has(c, rest));
  return rest.length === 0 || has(child, rest);
}

/** What src/nomad/client.ts, allocation.ts and the pool read from each answer. */
const TASK_EVENT_READS = ["Type", "Time", "Message", "DisplayMessage", "DriverError", "DriverMessage", "SetupError", "ExitCode", "Signal", "FailsTask"];
const STUB_READS = [
  "ID", "EvalID", "Name", "NodeID", "JobID", "TaskGroup", "DesiredStatus", "DesiredDescription", "ClientStatus", "ClientDescription",
  "NextAllocation", "CreateIndex", "ModifyIndex", "CreateTime", "ModifyTime",
  "TaskStates.*.State", "TaskStates.*.Failed", "TaskStates.*.StartedAt", "TaskStates.*.FinishedAt",
  ...TASK_EVENT_READS.map((k) => `TaskStates.*.Events[].${k}`),
];
/** Allocation has omitempty on every field: only what a running allocation always has. */
const ALLOCATION_READS = [
  "ID", "EvalID", "Name", "NodeID", "JobID", "TaskGroup", "DesiredStatus", "ClientStatus", "ClientDescription", "Job",
  "CreateIndex", "ModifyIndex", "AllocModifyIndex", "CreateTime", "ModifyTime",
  "TaskStates.*.State", "TaskStates.*.StartedAt", ...TASK_EVENT_READS.map((k) => `TaskStates.*.Events[].${k}`),
];
/** The documented AllocatedResources layout (client-state sample): what allocationHttpAddress reads. */
const ALLOCATED_RESOURCES_READS = ["Shared.Ports[].Label", "Shared.Ports[].Value", "Shared.Ports[].To", "Shared.Ports[].HostIP", "Shared.Networks[].IP"];
const JOB_READS = ["ID", "Name", "Namespace", "Type", "Status", "Datacenters", "Meta", "Version", "CreateIndex", "ModifyIndex", "JobModifyIndex", "TaskGroups[].Name", "TaskGroups[].Count", "TaskGroups[].Tasks[].Name", "TaskGroups[].Tasks[].Driver"];
const EVAL_READS = ["ID", "Priority", "Type", "TriggeredBy", "JobID", "JobModifyIndex", "Status", "QueuedAllocations", "SnapshotIndex", "CreateIndex", "ModifyIndex", "CreateTime", "ModifyTime"];
const SCALE_STATUS_READS = ["JobID", "Namespace", "JobCreateIndex", "JobModifyIndex", "JobStopped", "TaskGroups.*.Desired", "TaskGroups.*.Placed", "TaskGroups.*.Running", "TaskGroups.*.Healthy", "TaskGroups.*.Unhealthy", "TaskGroups.*.Events"];
const EVENT_READS = ["Index", "Events[].Topic", "Events[].Type", "Events[].Key", "Events[].Namespace", "Events[].FilterKeys", "Events[].Index", "Events[].Payload"];
/** jobs.mdx "List Jobs" sample (not in shared/nomad-api; https://developer.hashicorp.com/nomad/api-docs/jobs). */
const DOCUMENTED_JOB_LIST = [{ ID: "example", ParentID: "", Name: "example", Type: "service", Priority: 50, Status: "pending", StatusDescription: "", JobSummary: { JobID: "example", Namespace: "default", Summary: {}, Children: {}, CreateIndex: 52, ModifyIndex: 96 }, CreateIndex: 52, ModifyIndex: 93, JobModifyIndex: 52 }];
const JOB_LIST_READS = ["ID", "Name", "Type", "Status", "JobSummary", "CreateIndex", "ModifyIndex", "JobModifyIndex"];

let nomad: NomadEmulator;
const answers: Record<string, { status: number; body: unknown; index: string | null }> = {};

async function raw(method: string, path: string, body?: unknown): Promise<{ status: number; body: unknown; index: string | null }> {
  const res = await fetch(`${nomad.address}${path}`, { method, ...(body ? { body: JSON.stringify(body), headers: { "Content-Type": "application/json" } } : {}) });
  const text = await res.text();
  return { status: res.status, body: res.ok ? parseNomadJson(text) : text, index: res.headers.get("x-nomad-index") };
}

/** The first event-stream frame holding a running allocation of `jobId` (replayed from index 1). */
async function allocationFrame(jobId: string): Promise<Json> {
  const ac = new AbortController();
  const timer = setTimeout(() => ac.abort(), 10_000);
  try {
    const res = await fetch(`${nomad.address}/v1/event/stream?topic=Allocation:${jobId}&index=1`, { signal: ac.signal });
    const decoder = new TextDecoder();
    let buffered = "";
    let first = true;
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      buffered += decoder.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, nl);
        buffered = buffered.slice(nl + 1);
        if (first) {
          expect(line, "the heartbeat comes first").toBe("{}");
          first = false;
          continue;
        }
        const frame = parseNomadJson(line) as { Events?: Array<{ Payload?: { Allocation?: Json } }> };
        if (frame.Events?.some((e) => e.Payload?.Allocation?.["ClientStatus"] === "running")) return frame as Json;
      }
    }
    throw new Error("event stream ended without a running allocation");
  } finally {
    clearTimeout(timer);
    ac.abort();
  }
}

beforeAll(async () => {
  nomad = await startNomadEmulator();
  answers["leader"] = await raw("GET", "/v1/status/leader");
  answers["register"] = await raw("POST", "/v1/jobs", { Job: sandboxJob({ jobId: "conf", count: 2, slots: 1 }) });
  await nomad.waitForAllocations("conf", (a) => a.filter((x) => x["ClientStatus"] === "running").length === 2);
  answers["scale"] = await raw("POST", "/v1/job/conf/scale", { Count: 1, Target: { Group: "sandbox" }, Message: "conformance" });
  await nomad.waitForAllocations("conf", (a) => a.some((x) => x["ClientStatus"] === "complete"));
  answers["job"] = await raw("GET", "/v1/job/conf");
  answers["jobs"] = await raw("GET", "/v1/jobs?meta=true");
  answers["allocations"] = await raw("GET", "/v1/job/conf/allocations");
  const running = (answers["allocations"]!.body as Json[]).find((a) => a["ClientStatus"] === "running")!;
  answers["allocation"] = await raw("GET", `/v1/allocation/${String(running["ID"])}`);
  answers["scaleStatus"] = await raw("GET", "/v1/job/conf/scale");
  answers["evaluations"] = await raw("GET", "/v1/job/conf/evaluations");
  answers["evaluation"] = await raw("GET", `/v1/evaluation/${String((answers["evaluations"]!.body as Json[])[0]!["ID"])}`);
  answers["event"] = { status: 200, body: await allocationFrame("conf"), index: null };
  answers["deregister"] = await raw("DELETE", "/v1/job/conf?purge=true");
});

afterAll(async () => {
  await nomad?.stop();
});

interface Case {
  answer: string;
  schema: z.ZodType;
  documented: unknown;
  reads: string[];
  /** Where in the answer the reads apply (e.g. the first array element). */
  pick?: (body: unknown) => unknown;
}

const first = (b: unknown) => (b as unknown[])[0];
const CASES: Record<string, Case> = {
  "GET /v1/status/leader": { answer: "leader", schema: LeaderSchema, documented: fixture("status-leader.response.json"), reads: [] },
  "POST /v1/jobs": { answer: "register", schema: JobRegisterResponseSchema, documented: fixture("jobs-register.response.json"), reads: ["EvalID", "EvalCreateIndex", "JobModifyIndex", "Warnings", "Index", "LastContact", "KnownLeader"] },
  "GET /v1/jobs": { answer: "jobs", schema: JobListSchema, documented: first(DOCUMENTED_JOB_LIST), reads: JOB_LIST_READS, pick: first },
  "GET /v1/job/:id": { answer: "job", schema: JobSchema, documented: fixture("job-read.response.json"), reads: JOB_READS },
  "GET /v1/job/:id/allocations": { answer: "allocations", schema: AllocListSchema, documented: first(fixture("job-allocations.response.json")), reads: STUB_READS, pick: first },
  "GET /v1/allocation/:id": { answer: "allocation", schema: AllocationSchema, documented: fixture("allocation-read.response.json"), reads: ALLOCATION_READS },
  "GET /v1/allocation/:id AllocatedResources": {
    answer: "allocation",
    schema: AllocationSchema,
    documented: fixture("client-state.allocated-resources.json"),
    reads: ALLOCATED_RESOURCES_READS,
    pick: (b) => (b as Json)["AllocatedResources"],
  },
  "POST /v1/job/:id/scale": { answer: "scale", schema: JobRegisterResponseSchema, documented: fixture("job-scale.response.json"), reads: ["EvalID", "EvalCreateIndex", "Index", "JobModifyIndex", "KnownLeader", "LastContact", "Warnings"] },
  "GET /v1/job/:id/scale": { answer: "scaleStatus", schema: JobScaleStatusSchema, documented: fixture("job-scale-status.response.json"), reads: SCALE_STATUS_READS },
  "GET /v1/job/:id/evaluations": { answer: "evaluations", schema: EvaluationListSchema, documented: first(fixture("job-evaluations.response.json")), reads: EVAL_READS, pick: first },
  "GET /v1/evaluation/:id": { answer: "evaluation", schema: EvaluationSchema, documented: fixture("evaluation-read.response.json"), reads: EVAL_READS },
  "DELETE /v1/job/:id": { answer: "deregister", schema: JobDeregisterResponseSchema, documented: fixture("job-deregister.response.json"), reads: ["EvalID", "EvalCreateIndex", "JobModifyIndex"] },
  "GET /v1/event/stream": { answer: "event", schema: EventFrameSchema, documented: parseNomadJson(fixtureText("event-stream.ndjson").split("\n")[1]!), reads: EVENT_READS },
  "GET /v1/event/stream Allocation payload": {
    answer: "event",
    schema: EventFrameSchema,
    documented: fixture("allocation-read.response.json"),
    reads: ALLOCATION_READS.filter((k) => k !== "Job"),
    pick: (b) => ((b as Json)["Events"] as Array<{ Payload: Json }>).find((e) => (e.Payload["Allocation"] as Json)?.["ClientStatus"] === "running")!.Payload["Allocation"],
  },
};

describe("emulator conformance with Nomad's documented answers", () => {
  for (const [endpoint, c] of Object.entries(CASES)) {
    it(`${endpoint}: parses with the client's schema and has the documented keys the client reads`, () => {
      const answer = answers[c.answer]!;
      expect(answer.status).toBe(200);
      const parsed = c.schema.safeParse(answer.body);
      expect(parsed.success, parsed.success ? "" : parsed.error.message).toBe(true);
      // The keys of the documented example that the client reads (old samples lack a few
      // newer keys, e.g. DisplayMessage, which then are not required here).
      const documentedReads = c.reads.filter((p) => hasPath(c.documented, p));
      expect(documentedReads.length).toBeGreaterThanOrEqual(Math.ceil(c.reads.length * 0.7));
      const body = c.pick ? c.pick(answer.body) : answer.body;
      expect(documentedReads.filter((p) => !hasPath(body, p)), "documented keys missing from the emulator's answer").toEqual([]);
    });
  }

  it("the leader answer has the documented type and no X-Nomad-Index", () => {
    expect(typeof answers["leader"]!.body).toBe(typeof fixture("status-leader.response.json"));
    expect(answers["leader"]!.index).toBeNull();
  });

  it("reads and writes carry X-Nomad-Index", () => {
    for (const name of ["register", "scale", "job", "allocations", "allocation", "scaleStatus", "evaluations", "deregister"]) {
      expect(answers[name]!.index, name).toMatch(/^\d+$/);
    }
  });

  it("nanosecond fields are above 2^53 and arrive exact", () => {
    const alloc = answers["allocation"]!.body as Json;
    expect(typeof alloc["CreateTime"]).toBe("string");
    expect(BigInt(alloc["CreateTime"] as string) > BigInt(Number.MAX_SAFE_INTEGER)).toBe(true);
  });

  it("the path checker fails on a missing key", () => {
    expect(hasPath({ a: [{ b: 1 }, {}] }, "a[].b")).toBe(false);
    expect(hasPath({ m: { x: { s: null } } }, "m.*.s")).toBe(true);
    expect(hasPath({ m: {} }, "m.*.s")).toBe(false);
  });
});
