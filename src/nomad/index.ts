/**
 * The Nomad side of slotpool (`slotpool/nomad`): API client, typed errors, the sandbox job,
 * allocation helpers. Listed by name (guarded by test/architecture/public-api.test.ts); the
 * job's internal labels and meta keys stay inside.
 */
export { NomadClient, type NomadClientInit, type NomadClientOptions, type RetryOptions, type BlockingOptions, type EventStreamOptions, type NomadJobSpec } from "./client.js";
export { nomadOptionsFromEnv, DEFAULT_NOMAD_ADDR } from "./config.js";
export {
  NomadError,
  NomadUnreachableError,
  NomadAclDeniedError,
  NomadNotFoundError,
  NomadScaleBlockedError,
  NomadTimeoutError,
  NomadResponseError,
  NomadConfigError,
} from "./errors.js";
export {
  sandboxJob,
  resolveSandboxJobOptions,
  SandboxJobOptionError,
  type SandboxJobOptions,
  type SandboxDriver,
  type JobConstraint,
} from "./job.js";
export { sandboxJobHcl } from "./job-hcl.js";
export { allocationHttpAddress, allocationNameIndex, latestTaskEvents, isAllocationRunning, isAllocationTerminal, type AllocationAddress } from "./allocation.js";
export type {
  Job as NomadJob,
  Allocation as NomadAllocation,
  AllocListStub as NomadAllocListStub,
  NomadEvent,
  JobListStub as NomadJobListStub,
  JobRegisterResponse as NomadJobRegisterResponse,
  JobScaleStatus as NomadJobScaleStatus,
  Evaluation as NomadEvaluation,
} from "./schemas.js";
