/**
 * slotpool's public API: what env authors and pool users need, by name. Everything else
 * lives under subpath exports (package.json "exports"):
 *
 *   slotpool/protocol   wire schemas (zod) of the sandbox server, the executor, tool calls
 *   slotpool/pool       SlotPool internals: config schema, SandboxClient, sandbox processes
 *   slotpool/nomad      Nomad API client, the sandbox job, allocation helpers, Nomad errors
 *   slotpool/executor   ToolExecutor config, the executor and ToolServer services and client
 *   slotpool/tools      tool definitions, registry, toolsets, Hermes tool-call text
 *   slotpool/agent      the agent loop, chat client, policies
 *   slotpool/env        AgentEnv internals: config schema, run modes, scored groups, tokens
 *   slotpool/atropos    the Atropos trainer client and env manager
 *   slotpool/report     the HTML rollout report (what `process`, `evaluate` and `view` write)
 *   slotpool/sandbox    the in-container sandbox server
 */

// Errors: one base with a stable `code`, and the ones callers handle.
export { SlotpoolError } from "./protocol/errors.js";
export {
  PoolError,
  SlotLostError,
  isSlotLostError,
  SlotAcquireTimeoutError,
  PoolNotRunningError,
  SlotReleasedError,
  SlotForkError,
} from "./pool/errors.js";
export { ProvisionerError, type Provisioner } from "./pool/provisioner.js";
export { EnvError, ToolContextError, ToolContextInfraError, PathRefusedError } from "./env/errors.js";

// Wire types every user meets.
export type { ToolCall, ToolResult } from "./protocol/tool.js";

// Pool users: provision containers, hand out slots, run tool calls.
export { SlotPool, type SlotPoolOptions } from "./pool/slot-pool.js";
export type { SlotPoolConfigInput } from "./pool/config.js";
export type { AcquireOptions, ReleaseOptions, PoolStats, LeasedSlot, ForkableSlot, ForkOptions } from "./pool/types.js";
export type { TemplateSpec } from "./pool/template-affinity.js";
export { LocalProvisioner } from "./pool/local-provisioner.js";
export { NomadProvisioner } from "./pool/nomad-provisioner.js";
export { ToolExecutor, type ToolExecutorOptions } from "./executor/tool-executor.js";
export { createToolBackend, type ToolBackendOptions, type ToolBackendParts } from "./executor/tool-backend.js";
export type { ToolBackendConfigInput } from "./executor/backend-config.js";
export { ExecutorServer } from "./executor/executor-server.js";
export { ToolServer } from "./executor/tool-server.js";
export { defineExternalTool, type ExternalTool } from "./executor/external-tool.js";

// Env authors: an AgentEnv subclass, its tools, its scoring.
export { AgentEnv, type AgentEnvRuntime, type ScoreResult, type EvalSample, type EvalResult } from "./env/agent-env.js";
export type { AgentEnvConfig, AgentEnvConfigInput } from "./env/config.js";
export type { BranchPoint } from "./env/branching.js";
export type { GroupMember, GroupScore } from "./env/group-score.js";
export type { Metrics } from "./env/metrics.js";
export { ToolContext } from "./env/tool-context.js";
export { defineEnvTool, type EnvToolSpec, type InProcessToolSpec, type SlotToolSpec } from "./env/env-tools.js";
export type { ScoredDataGroup } from "./env/scored-group.js";
export type { AgentResult } from "./agent/agent-loop.js";
export type { OracleScript } from "./agent/oracle-policy.js";
export { defineTool } from "./tools/definition.js";
export type { ToolDefinition } from "./tools/types.js";
