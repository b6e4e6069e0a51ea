/**
 * The Atropos trainer side (`slotpool/atropos`): its HTTP client and wire schemas, the group
 * filter BaseEnv applies before sending, the env manager loop and Python's json.dumps
 * spacing. Listed by name (guarded by test/architecture/public-api.test.ts).
 */
export {
  AtroposClient,
  AtroposError,
  InfoSchema,
  RegisterEnvResponseSchema,
  StatusEnvSchema,
  type AtroposClientOptions,
  type EnvStatus,
  type RegisterEnvRequest,
  type RegisterEnvResponse,
  type Registration,
  type SendResult,
  type TrainerInfo,
} from "./client.js";
export { filterGroupForSend, type FilterOutcome, type SendFilterOptions } from "./group-filter.js";
export { runEnvManager, type EnvManagerOptions, type EnvManagerReport } from "./env-manager.js";
export { TrainerConfigSchema, type TrainerConfig, type TrainerConfigInput } from "./config.js";
export { pythonJsonDumps } from "./python-json.js";
