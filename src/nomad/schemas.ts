// Longer than 500 lines on purpose: every Nomad API body the client reads, in one place to check against fields.json.
/**
 * zod schemas of the Nomad HTTP API bodies slotpool sends and reads, written against
 * shared/nomad-api/ (docs samples, Go structs in fields.json, one real capture).
 *
 * Rules that shape every schema here (shared/nomad-api/README.md "Encoding"):
 * - Allocation, Evaluation, NetworkResource, Port and AllocatedPortMapping omit every
 *   zero-valued field, so every field is optional. Go pointers, slices and maps may be
 *   `null`, so those are nullish.
 * - Objects are loose: unknown keys are kept, so a newer Nomad adding fields never breaks us.
 * - Nanosecond timestamps exceed 2^53; `parseNomadJson` hands them over as decimal strings
 *   and the `Nanos` schema keeps them as exact decimal strings (use `nanosToDate` to read one).
 * - time.Time is an RFC3339 string, and the zero time is `null` (old samples print
 *   "0001-01-01T00:00:00Z").
 */
import { z } from "zod";

/** A nanosecond count (timestamp) as an exact decimal string. */
export const Nanos = z
  .union([z.string().regex(/^-?\d+$/, "expected an integer nanosecond count"), z.number().int()])
  .transform((v) => (typeof v === "number" ? BigInt(v).toString() : v));

/** A time.Duration in nanoseconds as a number (durations stay far below 2^53 ns ≈ 104 days). Some samples print it as a string. */
export const DurationNs = z
  .union([z.number().int(), z.string().regex(/^-?\d+$/, "expected an integer nanosecond duration")])
  .transform((v) => Number(v));

/** time.Time: RFC3339Nano, or null for the zero time. */
export const TimeString = z.string().nullable();

const StringMap = z.record(z.string(), z.string());

// ---------------------------------------------------------------- networking

/** structs.Port (job spec and allocation networks). All fields omitted when zero. */
export const PortSchema = z.looseObject({
  Label: z.string().optional(),
  Value: z.number().int().optional(),
  To: z.number().int().optional(),
  HostNetwork: z.string().optional(),
  IgnoreCollision: z.boolean().optional(),
});
export type Port = z.output<typeof PortSchema>;

/** structs.NetworkResource. */
export const NetworkResourceSchema = z.looseObject({
  Mode: z.string().optional(),
  Device: z.string().optional(),
  CIDR: z.string().optional(),
  IP: z.string().optional(),
  Hostname: z.string().optional(),
  MBits: z.number().int().nullish(),
  DNS: z.looseObject({}).nullish(),
  ReservedPorts: z.array(PortSchema).nullish(),
  DynamicPorts: z.array(PortSchema).nullish(),
});
export type NetworkResource = z.output<typeof NetworkResourceSchema>;

/** structs.AllocatedPortMapping: the canonical place of an allocation's host ports. */
export const AllocatedPortMappingSchema = z.looseObject({
  Label: z.string().optional(),
  Value: z.number().int().optional(),
  To: z.number().int().optional(),
  HostIP: z.string().optional(),
});
export type AllocatedPortMapping = z.output<typeof AllocatedPortMappingSchema>;

export const AllocatedSharedResourcesSchema = z.looseObject({
  Networks: z.array(NetworkResourceSchema).nullish(),
  DiskMB: z.number().int().optional(),
  Ports: z.array(AllocatedPortMappingSchema).nullish(),
});

export const AllocatedResourcesSchema = z.looseObject({
  Tasks: z.record(z.string(), z.looseObject({ Networks: z.array(NetworkResourceSchema).nullish() }).nullable()).nullish(),
  TaskLifecycles: z.record(z.string(), z.unknown()).nullish(),
  Shared: AllocatedSharedResourcesSchema.nullish(),
});
export type AllocatedResources = z.output<typeof AllocatedResourcesSchema>;

// ---------------------------------------------------------------- tasks

/** structs.TaskEvent. Old samples print every field; new servers the same (TaskEvent has no omitempty marker). */
export const TaskEventSchema = z.looseObject({
  Type: z.string().optional(),
  Time: Nanos.optional(),
  Message: z.string().optional(),
  DisplayMessage: z.string().optional(),
  Details: StringMap.nullish(),
  FailsTask: z.boolean().optional(),
  RestartReason: z.string().optional(),
  SetupError: z.string().optional(),
  DriverError: z.string().optional(),
  DriverMessage: z.string().optional(),
  DownloadError: z.string().optional(),
  ValidationError: z.string().optional(),
  KillError: z.string().optional(),
  KillReason: z.string().optional(),
  ExitCode: z.number().int().optional(),
  Signal: z.number().int().optional(),
});
export type TaskEvent = z.output<typeof TaskEventSchema>;

/** structs.TaskState. */
export const TaskStateSchema = z.looseObject({
  State: z.string().optional(),
  Failed: z.boolean().optional(),
  Restarts: z.number().int().optional(),
  LastRestart: TimeString.optional(),
  StartedAt: TimeString.optional(),
  FinishedAt: TimeString.optional(),
  Events: z.array(TaskEventSchema).nullish(),
});
export type TaskState = z.output<typeof TaskStateSchema>;

// ---------------------------------------------------------------- job (request and read)

const ConstraintSchema = z.looseObject({
  LTarget: z.string().nullish(),
  RTarget: z.string().nullish(),
  Operand: z.string().nullish(),
});

const RestartPolicySchema = z.looseObject({
  Attempts: z.number().int().nullish(),
  Interval: DurationNs.nullish(),
  Delay: DurationNs.nullish(),
  Mode: z.string().nullish(),
});

const ReschedulePolicySchema = z.looseObject({
  Attempts: z.number().int().nullish(),
  Interval: DurationNs.nullish(),
  Delay: DurationNs.nullish(),
  DelayFunction: z.string().nullish(),
  MaxDelay: DurationNs.nullish(),
  Unlimited: z.boolean().nullish(),
});

const UpdateStrategySchema = z.looseObject({
  MaxParallel: z.number().int().nullish(),
  Stagger: DurationNs.nullish(),
});

export const TaskSchema = z.looseObject({
  Name: z.string().nullish(),
  Driver: z.string().nullish(),
  User: z.string().nullish(),
  Config: z.record(z.string(), z.unknown()).nullish(),
  Env: StringMap.nullish(),
  Resources: z
    .looseObject({
      CPU: z.number().int().nullish(),
      MemoryMB: z.number().int().nullish(),
      Networks: z.array(NetworkResourceSchema).nullish(),
    })
    .nullish(),
  Meta: StringMap.nullish(),
  KillTimeout: DurationNs.nullish(),
});

export const TaskGroupSchema = z.looseObject({
  Name: z.string().nullish(),
  Count: z.number().int().nullish(),
  Tasks: z.array(TaskSchema).nullish(),
  Networks: z.array(NetworkResourceSchema).nullish(),
  Constraints: z.array(ConstraintSchema).nullish(),
  RestartPolicy: RestartPolicySchema.nullish(),
  ReschedulePolicy: ReschedulePolicySchema.nullish(),
  Update: UpdateStrategySchema.nullish(),
  Meta: StringMap.nullish(),
});
export type TaskGroup = z.output<typeof TaskGroupSchema>;

/**
 * A job, as sent (api.Job: pointer fields may be null) and as read (structs.Job). Status is
 * `pending`, `running` or `dead`; `Stop` is true after a non-purge deregister.
 */
export const JobSchema = z.looseObject({
  ID: z.string().nullish(),
  Name: z.string().nullish(),
  Namespace: z.string().nullish(),
  Region: z.string().nullish(),
  Type: z.string().nullish(),
  Priority: z.number().int().nullish(),
  Datacenters: z.array(z.string()).nullish(),
  NodePool: z.string().nullish(),
  Constraints: z.array(ConstraintSchema).nullish(),
  TaskGroups: z.array(TaskGroupSchema).nullish(),
  Update: UpdateStrategySchema.nullish(),
  Meta: StringMap.nullish(),
  Stop: z.boolean().nullish(),
  Status: z.string().nullish(),
  StatusDescription: z.string().nullish(),
  Version: z.number().int().nullish(),
  SubmitTime: Nanos.nullish(),
  CreateIndex: z.number().int().nullish(),
  ModifyIndex: z.number().int().nullish(),
  JobModifyIndex: z.number().int().nullish(),
});
export type Job = z.output<typeof JobSchema>;

/** Body of POST /v1/jobs and POST /v1/job/:id (api.JobRegisterRequest). */
export const JobRegisterRequestSchema = z.looseObject({
  Job: JobSchema,
  EnforceIndex: z.boolean().optional(),
  JobModifyIndex: z.number().int().optional(),
  PolicyOverride: z.boolean().optional(),
  PreserveCounts: z.boolean().optional(),
  PreserveResources: z.boolean().optional(),
  EvalPriority: z.number().int().optional(),
  Namespace: z.string().optional(),
  Region: z.string().optional(),
});
export type JobRegisterRequest = z.input<typeof JobRegisterRequestSchema>;

/** structs.JobRegisterResponse (also the answer to scale). `Warnings` is one joined string. */
export const JobRegisterResponseSchema = z.looseObject({
  EvalID: z.string().optional(),
  EvalCreateIndex: z.number().int().optional(),
  JobModifyIndex: z.number().int().optional(),
  Warnings: z.string().optional(),
  Index: z.number().int().optional(),
  LastContact: z.number().optional(),
  KnownLeader: z.boolean().optional(),
  NextToken: z.string().optional(),
});
export type JobRegisterResponse = z.output<typeof JobRegisterResponseSchema>;

/** structs.JobDeregisterResponse. Deleting a missing job answers 200 with zero values. */
export const JobDeregisterResponseSchema = JobRegisterResponseSchema.extend({
  VolumeEvalID: z.string().optional(),
  VolumeEvalIndex: z.number().int().optional(),
});
export type JobDeregisterResponse = z.output<typeof JobDeregisterResponseSchema>;

/** structs.AllocStopResponse: the evaluation that places the stopped allocation's replacement. */
export const AllocStopResponseSchema = z.looseObject({
  EvalID: z.string(),
  Index: z.number().int().optional(),
});
export type AllocStopResponse = z.output<typeof AllocStopResponseSchema>;

const TaskGroupSummarySchema = z.looseObject({
  Queued: z.number().int().optional(),
  Complete: z.number().int().optional(),
  Failed: z.number().int().optional(),
  Running: z.number().int().optional(),
  Starting: z.number().int().optional(),
  Lost: z.number().int().optional(),
  Unknown: z.number().int().optional(),
});

/** GET /v1/job/:id/summary, also embedded in each job list stub. */
export const JobSummarySchema = z.looseObject({
  JobID: z.string().optional(),
  Namespace: z.string().optional(),
  Summary: z.record(z.string(), TaskGroupSummarySchema).nullish(),
  Children: z.looseObject({}).nullish(),
  CreateIndex: z.number().int().optional(),
  ModifyIndex: z.number().int().optional(),
});

/** One element of GET /v1/jobs (structs.JobListStub). `Meta` only with `?meta=true`. */
export const JobListStubSchema = z.looseObject({
  ID: z.string(),
  ParentID: z.string().optional(),
  Name: z.string().optional(),
  Namespace: z.string().optional(),
  Datacenters: z.array(z.string()).nullish(),
  Type: z.string().optional(),
  Priority: z.number().int().optional(),
  Periodic: z.boolean().optional(),
  ParameterizedJob: z.boolean().optional(),
  Stop: z.boolean().optional(),
  Status: z.string().optional(),
  StatusDescription: z.string().optional(),
  JobSummary: JobSummarySchema.nullish(),
  Meta: StringMap.nullish(),
  CreateIndex: z.number().int().optional(),
  ModifyIndex: z.number().int().optional(),
  JobModifyIndex: z.number().int().optional(),
  SubmitTime: Nanos.optional(),
});
export type JobListStub = z.output<typeof JobListStubSchema>;
export const JobListSchema = z.array(JobListStubSchema);

// ---------------------------------------------------------------- allocations

const RescheduleTrackerSchema = z.looseObject({
  Events: z
    .array(
      z.looseObject({
        PrevAllocID: z.string().optional(),
        PrevNodeID: z.string().optional(),
        RescheduleTime: Nanos.optional(),
        Delay: DurationNs.optional(),
      }),
    )
    .nullish(),
});

const AllocDeploymentStatusSchema = z.looseObject({
  Healthy: z.boolean().nullish(),
  Timestamp: TimeString.optional(),
  Canary: z.boolean().optional(),
  ModifyIndex: z.number().int().optional(),
});

/**
 * The fields shared by an allocation list stub and a full allocation. `DesiredStatus`:
 * run | stop | evict. `ClientStatus`: pending | running | complete | failed | lost | unknown.
 */
const allocationCommon = {
  ID: z.string(),
  EvalID: z.string().optional(),
  Name: z.string().optional(),
  Namespace: z.string().optional(),
  NodeID: z.string().optional(),
  NodeName: z.string().optional(),
  JobID: z.string().optional(),
  JobType: z.string().optional(),
  JobVersion: z.number().int().optional(),
  TaskGroup: z.string().optional(),
  DesiredStatus: z.string().optional(),
  DesiredDescription: z.string().optional(),
  DesiredTransition: z.looseObject({}).nullish(),
  ClientStatus: z.string().optional(),
  ClientDescription: z.string().optional(),
  TaskStates: z.record(z.string(), TaskStateSchema).nullish(),
  DeploymentStatus: AllocDeploymentStatusSchema.nullish(),
  DeploymentID: z.string().optional(),
  FollowupEvalID: z.string().optional(),
  PreviousAllocation: z.string().optional(),
  NextAllocation: z.string().optional(),
  RescheduleTracker: RescheduleTrackerSchema.nullish(),
  CreateIndex: z.number().int().optional(),
  ModifyIndex: z.number().int().optional(),
  AllocModifyIndex: z.number().int().optional(),
  CreateTime: Nanos.optional(),
  ModifyTime: Nanos.optional(),
  /** Absent on list stubs (README "No ports here"); present on reads and Allocation events. */
  AllocatedResources: AllocatedResourcesSchema.nullish(),
};

/** One element of GET /v1/job/:id/allocations (structs.AllocListStub). */
export const AllocListStubSchema = z.looseObject(allocationCommon);
export type AllocListStub = z.output<typeof AllocListStubSchema>;
export const AllocListSchema = z.array(AllocListStubSchema);

/** GET /v1/allocation/:id (structs.Allocation, zero fields omitted). */
export const AllocationSchema = z.looseObject({
  ...allocationCommon,
  Job: JobSchema.nullish(),
  Resources: z.looseObject({ Networks: z.array(NetworkResourceSchema).nullish() }).nullish(),
  TaskResources: z.record(z.string(), z.looseObject({ Networks: z.array(NetworkResourceSchema).nullish() })).nullish(),
  SharedResources: z.looseObject({ Networks: z.array(NetworkResourceSchema).nullish() }).nullish(),
  Metrics: z.looseObject({}).nullish(),
});
export type Allocation = z.output<typeof AllocationSchema>;

// ---------------------------------------------------------------- scaling

const ScalingEventSchema = z.looseObject({
  Count: z.number().int().nullish(),
  PreviousCount: z.number().int().optional(),
  Message: z.string().optional(),
  Error: z.boolean().optional(),
  Meta: z.record(z.string(), z.unknown()).nullish(),
  EvalID: z.string().nullish(),
  Time: Nanos.optional(),
  CreateIndex: z.number().int().optional(),
});

/** Body of POST /v1/job/:id/scale (api.ScalingRequest). `Error` is a bool, not a string. */
export const ScalingRequestSchema = z.looseObject({
  Count: z.number().int().nullish(),
  Target: z.record(z.string(), z.string()),
  Message: z.string().optional(),
  Error: z.boolean().optional(),
  Meta: z.record(z.string(), z.unknown()).nullish(),
  PolicyOverride: z.boolean().optional(),
  JobModifyIndex: z.number().int().optional(),
});
export type ScalingRequest = z.input<typeof ScalingRequestSchema>;

/** GET /v1/job/:id/scale. */
export const JobScaleStatusSchema = z.looseObject({
  JobID: z.string().optional(),
  Namespace: z.string().optional(),
  JobCreateIndex: z.number().int().optional(),
  JobModifyIndex: z.number().int().optional(),
  JobStopped: z.boolean().optional(),
  TaskGroups: z
    .record(
      z.string(),
      z.looseObject({
        Desired: z.number().int().optional(),
        Placed: z.number().int().optional(),
        Running: z.number().int().optional(),
        Healthy: z.number().int().optional(),
        Unhealthy: z.number().int().optional(),
        Events: z.array(ScalingEventSchema).nullish(),
      }),
    )
    .nullish(),
});
export type JobScaleStatus = z.output<typeof JobScaleStatusSchema>;

// ---------------------------------------------------------------- evaluations, deployments

const evaluationCommon = {
  ID: z.string(),
  Namespace: z.string().optional(),
  Priority: z.number().int().optional(),
  Type: z.string().optional(),
  TriggeredBy: z.string().optional(),
  JobID: z.string().optional(),
  JobModifyIndex: z.number().int().optional(),
  NodeID: z.string().optional(),
  NodeModifyIndex: z.number().int().optional(),
  DeploymentID: z.string().optional(),
  /** blocked | pending | complete | failed | canceled */
  Status: z.string().optional(),
  StatusDescription: z.string().optional(),
  Wait: DurationNs.optional(),
  WaitUntil: TimeString.optional(),
  NextEval: z.string().optional(),
  PreviousEval: z.string().optional(),
  BlockedEval: z.string().optional(),
  SnapshotIndex: z.number().int().optional(),
  CreateIndex: z.number().int().optional(),
  ModifyIndex: z.number().int().optional(),
  CreateTime: Nanos.optional(),
  ModifyTime: Nanos.optional(),
};

export const EvaluationStubSchema = z.looseObject(evaluationCommon);

/** structs.Evaluation (zero fields omitted). `FailedTGAllocs` explains failed placements. */
export const EvaluationSchema = z.looseObject({
  ...evaluationCommon,
  FailedTGAllocs: z.record(z.string(), z.looseObject({})).nullish(),
  QueuedAllocations: z.record(z.string(), z.number().int()).nullish(),
  ClassEligibility: z.record(z.string(), z.boolean()).nullish(),
  RelatedEvals: z.array(EvaluationStubSchema).nullish(),
});
export type Evaluation = z.output<typeof EvaluationSchema>;
export const EvaluationListSchema = z.array(EvaluationSchema);

/** structs.Deployment. Status: running | paused | failed | successful | cancelled | initializing | pending | blocked | unblocking. */
export const DeploymentSchema = z.looseObject({
  ID: z.string(),
  JobID: z.string().optional(),
  JobVersion: z.number().int().optional(),
  JobModifyIndex: z.number().int().optional(),
  JobCreateIndex: z.number().int().optional(),
  TaskGroups: z.record(z.string(), z.looseObject({})).nullish(),
  Status: z.string().optional(),
  StatusDescription: z.string().optional(),
  CreateIndex: z.number().int().optional(),
  ModifyIndex: z.number().int().optional(),
});
export type Deployment = z.output<typeof DeploymentSchema>;

// ---------------------------------------------------------------- status, events

export const LeaderSchema = z.string();
export const PeersSchema = z.array(z.string());

/** One event of /v1/event/stream. Allocation events carry the allocation (without Job) in Payload.Allocation. */
export const NomadEventSchema = z.looseObject({
  Topic: z.string().optional(),
  Type: z.string().optional(),
  Key: z.string().optional(),
  Namespace: z.string().optional(),
  FilterKeys: z.array(z.string()).nullish(),
  Index: z.number().int().optional(),
  Payload: z
    .looseObject({
      Allocation: AllocationSchema.optional(),
      Job: JobSchema.optional(),
      Evaluation: EvaluationSchema.optional(),
      Deployment: DeploymentSchema.optional(),
    })
    .nullish(),
});
export type NomadEvent = z.output<typeof NomadEventSchema>;

/** One NDJSON line of the event stream; the heartbeat `{}` parses as a frame without events. */
export const EventFrameSchema = z.looseObject({
  Index: z.number().int().optional(),
  Events: z.array(NomadEventSchema).nullish(),
});
export type EventFrame = z.output<typeof EventFrameSchema>;

/** Reads a `Nanos` string as a Date (millisecond precision), or null for missing/zero. */
export function nanosToDate(ns: string | undefined | null): Date | null {
  if (!ns || ns === "0") return null;
  return new Date(Number(BigInt(ns) / 1_000_000n));
}
