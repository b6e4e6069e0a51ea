import { z } from "zod";
import { ModelConfigSchema } from "../agent/model-config.js";
import { ToolExecutorConfigSchema } from "../executor/config.js";
import { PoolSettingsSchema } from "../pool/config.js";
import { ImageSettingsSchema } from "../pool/image-settings.js";
import { ToolsConfigSchema } from "../tools/config.js";
import { TrainerConfigSchema } from "./atropos/config.js";
import { INFRA_FAILURE_POLICIES } from "./infra-failure.js";
import { unknownConfigKeys as unknownKeys } from "../protocol/config-keys.js";
import { configProblems } from "../protocol/errors.js";
import { timeoutBoundsProblem } from "../executor/config.js";
import { EnvConfigError } from "./errors.js";

/**
 * An env's settings (the seeds' HermesAgentEnvConfig + AgentEnvConfig, camelCase, ms): the
 * env's own fields at the top, and one section per component, each that component's own
 * schema (its defaults live there): `model` (agent/model-config.ts), `tools`
 * (tools/config.ts), `pool` (pool/config.ts), `executor` (executor/config.ts), `images`
 * (pool/image-settings.ts), `trainer` (env/atropos/config.ts). Parsed once, in the AgentEnv constructor; every part gets its
 * section as it is.
 *
 * A subclass adds its own fields with `AgentEnvConfigSchema.extend({...})` and sets
 * `static configSchema` on the class (docs/env.md, "Your env's own config fields").
 */
export const AgentEnvConfigSchema = z.object({
  /** The env's name: Atropos `desired_name`, file names of process/evaluate output. */
  name: z.string().min(1).optional(),
  /** Trajectories per item, run concurrently, each in its own slot. */
  groupSize: z.number().int().min(1).max(1024).default(4),
  /** Groups to produce in process mode (Atropos `total_steps`). */
  totalGroups: z.number().int().min(1).default(8),
  /** Groups collected at once (each takes groupSize slots). */
  groupConcurrency: z.number().int().min(1).max(256).default(2),
  /** Most model turns (LLM calls) per trajectory. */
  maxTurns: z.number().int().min(1).max(1000).default(30),
  systemPrompt: z.string().optional(),
  /** A trajectory whose slot was lost is restarted from scratch on a new slot this many times. */
  slotLossRetries: z.number().int().min(0).max(20).default(2),
  /**
   * A group with an infrastructure failure (model call failed, slot lost after the retries,
   * reward code or a reward's tool call failed): `drop` it and retry its item up to
   * `infraRetries` times (default), `mask` the failed trajectories (the group goes on
   * without them), or `fail` the run. Such a trajectory is never scored nor written.
   */
  infraFailurePolicy: z.enum(INFRA_FAILURE_POLICIES).default("drop"),
  /** `drop`: how many more times a dropped group's item is tried. */
  infraRetries: z.number().int().min(0).max(20).default(2),
  /** A trajectory counts as solved (success rate) when its score is at least this. */
  successThreshold: z.number().default(1.0),
  /**
   * Timeout of the reward's own commands (its ToolContext: hidden tests, `cat`, …) that name
   * none, seconds (clamped to 1..600). Apart from the agent's tool timeout
   * (`executor.defaultTimeoutS`, 30): a test suite may need longer than an agent's `ls`,
   * and code the agent made hang then costs one bounded wait, not the agent's timeout twice.
   */
  rewardTimeoutS: z.number().positive().max(600).default(60),
  /**
   * The model breaker of `process` and `evaluate` (env/model-breaker.ts): after this many
   * trajectories in a row failed their model calls (after the client's retries), the model
   * server is re-probed, and the run stops (exit 1) if it does not answer, instead of failing
   * every remaining group for hours. 0: never.
   */
  modelBreakerFailures: z.number().int().min(0).default(8),

  /** The model client (unset `model.url`: the env's oracle policy plays the model). */
  model: ModelConfigSchema.prefault({}),
  /** The toolsets offered to the model. */
  tools: ToolsConfigSchema.prefault({}),
  /** The slot pool and where its containers run. */
  pool: PoolSettingsSchema.prefault({}),
  /** The tool executor: batching, tool timeouts, the sandbox policy stamped on every call. */
  executor: ToolExecutorConfigSchema.prefault({}),
  /** How the sandbox servers fetch the items' task images: plain-HTTP registries, the store's budget (docs/images.md). */
  images: ImageSettingsSchema.prefault({}),
  /** The Atropos trainer (serve mode) and the scored groups' contents. */
  trainer: TrainerConfigSchema.prefault({}),
});

export type AgentEnvConfig = z.output<typeof AgentEnvConfigSchema>;
export type AgentEnvConfigInput = z.input<typeof AgentEnvConfigSchema>;

/**
 * Where each key of the flat config (before the sections) went, so an old config file gets
 * "modelUrl moved to model.url" instead of a bare unknown key.
 */
export const MOVED_CONFIG_KEYS: Readonly<Record<string, string>> = {
  modelUrl: "model.url",
  modelName: "model.name",
  apiKeyEnv: "model.apiKeyEnv",
  toolCallFormat: "model.toolCallFormat",
  temperature: "model.temperature",
  maxTokens: "model.maxTokens",
  extraBody: "model.extraBody",
  modelTimeoutMs: "model.timeoutMs",
  modelMaxRetries: "model.maxRetries",
  serverType: "model.serverType",
  tokenizerPath: "model.tokenizerPath",
  toolCallParser: "model.toolCallParser",
  enabledToolsets: "tools.enabled",
  disabledToolsets: "tools.disabled",
  distribution: "tools.distribution",
  ensureScoresAreNotSame: "trainer.ensureScoresAreNotSame",
  includeMessages: "trainer.includeMessages",
  dropGroupsOverTokenLength: "trainer.dropGroupsOverTokenLength",
  inferenceWeight: "trainer.inferenceWeight",
  maxBatchesOffpolicy: "trainer.maxBatchesOffpolicy",
  minBatchAllocation: "trainer.minBatchAllocation",
  stepsPerEval: "trainer.stepsPerEval",
  allowInexactTokens: "trainer.allowInexactTokens",
  allowNetwork: "executor.allowNetwork",
  requireSandbox: "executor.requireSandbox",
  requireStatefulSandbox: "executor.requireStatefulSandbox",
  toolTimeoutS: "executor.defaultTimeoutS",
  batchWindowMs: "executor.batchWindowMs",
  maxBatchSize: "executor.maxBatchSize",
  toolServerUrl: "executor.toolServerUrl",
  toolServerToken: "executor.toolServerToken",
  provisioner: "pool.provisioner",
  slotsPerContainer: "pool.slotsPerContainer",
  minContainers: "pool.minContainers",
  maxContainers: "pool.maxContainers",
  idleTimeoutMs: "pool.idleTimeoutMs",
  acquireTimeoutMs: "pool.acquireTimeoutMs",
  dataDir: "pool.dataDir",
  sandboxImage: "pool.nomad.image",
  nomadDriver: "pool.nomad.driver",
  nomadJobId: "pool.nomad.jobId",
  nomadDatacenters: "pool.nomad.datacenters",
  nomadNamespace: "pool.nomad.namespace",
  nomadNodePool: "pool.nomad.nodePool",
};

/**
 * The keys of `config` that `schema` does not know, at any depth, each with where it moved
 * (MOVED_CONFIG_KEYS) or the nearest known one (protocol/config-keys.ts).
 */
export function unknownConfigKeys(schema: z.ZodType, config: Record<string, unknown>, moved: Readonly<Record<string, string>> = MOVED_CONFIG_KEYS): string[] {
  return unknownKeys(schema, config, moved);
}

export { nearestName } from "../protocol/config-keys.js";

/**
 * An env's config parsed by its class's schema, or EnvConfigError naming every problem: unknown
 * keys (with where they moved or the nearest known one), bad values by their path, and timeout
 * bounds that contradict each other.
 */
export function parseEnvConfig(schema: z.ZodType, config: Record<string, unknown>, envName: string): AgentEnvConfig {
  const unknown = unknownConfigKeys(schema, config);
  const parsed = schema.safeParse(config);
  const bounds = parsed.success ? timeoutBoundsProblem((parsed.data as AgentEnvConfig).executor, "executor.") : undefined;
  if (unknown.length > 0 || !parsed.success || bounds) {
    // zod's own "unrecognized key" issues say less than the list above (no new place, no near name).
    const issues = parsed.success ? [] : parsed.error.issues.filter((i) => unknown.length === 0 || i.code !== "unrecognized_keys");
    const problems = [...unknown, ...(issues.length ? [configProblems(issues)] : []), ...(bounds ? [bounds] : [])].join("; ");
    throw new EnvConfigError(`invalid config for env ${envName}: ${problems}`);
  }
  return parsed.data as AgentEnvConfig;
}

/**
 * An env's own defaults under the caller's config, section by section: `config.pool` sets
 * the fields it names and keeps the defaults' other pool fields (a plain spread would replace
 * the whole section). Lists and other values are replaced, not merged.
 */
export function withConfigDefaults(defaults: Record<string, unknown>, config: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = { ...defaults };
  for (const [k, v] of Object.entries(config)) {
    const d = out[k];
    out[k] = isPlainObject(d) && isPlainObject(v) ? withConfigDefaults(d, v) : v;
  }
  return out;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v) && Object.getPrototypeOf(v) === Object.prototype;
}
