import fc from "fast-check";
import { describe, expect, it } from "vitest";
import type { z } from "zod";
import { z as zod } from "zod";
import { parseNomadJson, quoteUnsafeIntegers, stringifyNomadJson } from "../../src/nomad/json.js";
import {
  AllocListSchema,
  AllocatedResourcesSchema,
  AllocationSchema,
  DeploymentSchema,
  EvaluationListSchema,
  EvaluationSchema,
  EventFrameSchema,
  JobDeregisterResponseSchema,
  JobRegisterRequestSchema,
  JobRegisterResponseSchema,
  JobScaleStatusSchema,
  JobSchema,
  JobSummarySchema,
  LeaderSchema,
  PeersSchema,
  ScalingRequestSchema,
  nanosToDate,
} from "../../src/nomad/schemas.js";
import { exampleFiles, fixture, fixtureText } from "./nomad-api-fixtures.js";

/** Which schema reads which documented body. A new fixture without an entry fails the suite. */
const SCHEMA_OF: Record<string, z.ZodType> = {
  "status-leader.response.json": LeaderSchema,
  "status-peers.response.json": PeersSchema,
  "jobs-register.request.json": JobRegisterRequestSchema,
  "jobs-register.response.json": JobRegisterResponseSchema,
  "jobs-register.json-jobs-example.request.json": JobRegisterRequestSchema,
  "job-update.request.json": JobRegisterRequestSchema,
  "job-update.response.json": JobRegisterResponseSchema,
  "job-read.response.json": JobSchema,
  "job-summary.response.json": JobSummarySchema,
  "job-allocations.response.json": AllocListSchema,
  "job-evaluations.response.json": EvaluationListSchema,
  "job-deployments.response.json": zod.array(DeploymentSchema),
  "job-deployment.response.json": DeploymentSchema,
  "job-scale.request.json": ScalingRequestSchema,
  "job-scale.response.json": JobRegisterResponseSchema,
  "job-scale-status.response.json": JobScaleStatusSchema,
  "job-deregister.response.json": JobDeregisterResponseSchema,
  "allocation-read.response.json": AllocationSchema,
  "allocations-list.response.json": AllocListSchema,
  "evaluation-read.response.json": EvaluationSchema,
  "evaluations-list.response.json": EvaluationListSchema,
  "deployment-read.response.json": DeploymentSchema,
  "event-stream.sample.json": EventFrameSchema,
  "client-state.allocated-resources.json": AllocatedResourcesSchema,
  "captured/v1-node-allocations.nomad-autoscaler-cluster1.json": zod.array(AllocationSchema),
};

describe("zod schemas accept every documented Nomad body", () => {
  it("maps every example file in shared/nomad-api to a schema", () => {
    const files = exampleFiles().filter((f) => f !== "event-stream.ndjson");
    expect(files.length).toBeGreaterThanOrEqual(25);
    expect(files.filter((f) => !(f in SCHEMA_OF))).toEqual([]);
  });

  for (const [file, schema] of Object.entries(SCHEMA_OF)) {
    it(`parses ${file}`, () => {
      const result = schema.safeParse(fixture(file));
      expect(result.success, result.success ? "" : result.error.message).toBe(true);
    });
  }

  it("parses each line of event-stream.ndjson, the heartbeat as a frame without events", () => {
    const lines = fixtureText("event-stream.ndjson").split("\n").filter(Boolean);
    expect(lines[0]).toBe("{}");
    const frames = lines.map((l) => EventFrameSchema.parse(parseNomadJson(l)));
    expect(frames[0]!.Events ?? []).toHaveLength(0);
    expect(frames[1]!.Events?.[0]?.Topic).toBe("Node");
    expect(frames[1]!.Index).toBe(7);
  });

  it("keeps nanosecond timestamps exact (they exceed 2^53)", () => {
    const alloc = AllocationSchema.parse(fixture("allocation-read.response.json"));
    expect(alloc.CreateTime).toBe("1495747371794276400");
    expect(alloc.TaskStates?.["redis"]?.Events?.[0]?.Time).toBe("1495747371795703800");
    expect(alloc.RescheduleTracker?.Events?.[0]?.RescheduleTime).toBe("1517434161192946200");
    // The doc sample prints this Delay as a string, the job-allocations sample as a number.
    expect(alloc.RescheduleTracker?.Events?.[0]?.Delay).toBe(5_000_000_000);
    const stubs = AllocListSchema.parse(fixture("job-allocations.response.json"));
    expect(stubs[0]!.RescheduleTracker?.Events?.[0]?.Delay).toBe(5_000_000_000);
    expect(stubs[0]!.ModifyTime).toBe("1495755675944527600");
    expect(nanosToDate(stubs[0]!.ModifyTime)?.toISOString()).toBe("2017-05-25T23:41:15.944Z");
    // A plain JSON.parse would have rounded it:
    expect(String(BigInt((JSON.parse(fixtureText("job-allocations.response.json")) as Array<{ ModifyTime: number }>)[0]!.ModifyTime))).not.toBe(
      "1495755675944527600",
    );
  });

  it("keeps duplicate keys as JSON.parse does (the doc's PreviousAllocation appears twice)", () => {
    expect(AllocationSchema.parse(fixture("allocation-read.response.json")).PreviousAllocation).toBe("");
  });

  it("rejects a body that is not Nomad's shape, naming the field", () => {
    const bad = AllocListSchema.safeParse([{ ID: 5 }]);
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.path).toEqual([0, "ID"]);
  });
});

describe("exact JSON", () => {
  it("quotes only unsafe integers outside strings", () => {
    const text = '{"a":12345678901234567890,"b":"12345678901234567890","c":9007199254740991,"d":-9007199254740993,"e":1.5e300,"f":"x\\"1234567890123456789"}';
    expect(parseNomadJson(text)).toEqual({
      a: "12345678901234567890",
      b: "12345678901234567890",
      c: 9007199254740991,
      d: "-9007199254740993",
      e: 1.5e300,
      f: 'x"1234567890123456789',
    });
    expect(quoteUnsafeIntegers('{"x":1}')).toBe('{"x":1}');
  });

  it("agrees with JSON.parse on any JSON, except unsafe integer literals, which become exact strings", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.bigInt({ min: -(2n ** 70n), max: 2n ** 70n }), fc.string(), (value, big, s) => {
        const text = stringifyNomadJson({ value, big, s, digits: `${big}` });
        const expected = JSON.parse(text, (_k, v: unknown) =>
          typeof v === "number" && Number.isInteger(v) && !Number.isSafeInteger(v) && !String(v).includes("e") ? String(v) : v,
        ) as Record<string, unknown>;
        const exact = Number.isSafeInteger(Number(big)) && BigInt(Number(big)) === big ? Number(big) : String(big);
        expect(parseNomadJson(text)).toEqual({ ...expected, big: exact });
      }),
      { numRuns: 300 },
    );
  });

  it("writes bigint values back as bare integers", () => {
    expect(stringifyNomadJson({ t: 1636017249798459000n, s: "a" })).toBe('{"t":1636017249798459000,"s":"a"}');
    expect(parseNomadJson(stringifyNomadJson({ t: 1636017249798459001n }))).toEqual({ t: "1636017249798459001" });
  });
});
