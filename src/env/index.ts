/**
 * The env room (`slotpool/env`): AgentEnv and what its hooks see, the config schema, the
 * run modes, scored groups, run statistics and tokens. Listed by name (guarded by
 * test/architecture/public-api.test.ts); the Atropos trainer side is `slotpool/atropos`.
 */
export { AgentEnv, type AgentEnvRuntime, type ScoreResult, type EvalSample, type EvalResult, type EvaluateOptions } from "./agent-env.js";
export { AgentEnvConfigSchema, MOVED_CONFIG_KEYS, unknownConfigKeys, withConfigDefaults, type AgentEnvConfig, type AgentEnvConfigInput } from "./config.js";
export {
  EnvError,
  EnvConfigError,
  TrajectoryFailedError,
  NoPolicyError,
  TokensUnavailableError,
  TokensInexactError,
  ToolContextError,
  ToolContextInfraError,
  PathRefusedError,
} from "./errors.js";
export { ItemImageError } from "./item-image.js";
export { ToolContext, type TerminalResult, type FileRead } from "./tool-context.js";
export type { BrowserPage, BrowserSnapshot, BrowserImage } from "./browser-context.js";
export { defineEnvTool, type EnvToolSpec, type InProcessToolSpec, type SlotToolSpec } from "./env-tools.js";
export type { BranchPoint } from "./branching.js";
export type { GroupMember, GroupScore } from "./group-score.js";
export type { Metrics } from "./metrics.js";
export type { ToolBackend, ToolBackendFactory } from "./backend.js";
export { poolBackend } from "./pool-backend.js";
export { createDefaultBackend } from "./default-backend.js";
export { buildScoredGroup, type ScoredDataGroup, type TrajectoryOutcome, type GroupOutcome } from "./scored-group.js";
export { INFRA_CAUSES, INFRA_FAILURE_POLICIES, type InfraCause, type InfraFailure, type InfraFailurePolicy } from "./infra-failure.js";
export type { IsolationSummary, ContainerHealth } from "./isolation.js";
export { RunStats } from "./run-stats.js";
export { loadTokenizerJson, TokenizerLoadError, type TextTokenizer, type SequenceTokens } from "./tokens.js";
export { runProcessMode, type ProcessModeOptions, type ProcessModeReport } from "./run-modes/process.js";
export { runServeMode, type ServeModeOptions } from "./run-modes/serve.js";
export { runEvaluateMode, type EvaluateModeOptions, type EvaluateModeReport } from "./run-modes/evaluate.js";
export { formatSummary } from "./run-modes/summary.js";
export { OutputPathError } from "./run-modes/output-path.js";
