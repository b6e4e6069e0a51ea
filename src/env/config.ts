import { z } from "zod";
import { ModelConfigSchema } from "../agent/model-config.js";
import { ToolExecutorConfigSchema } from "../executor/config.js";
import { PoolSettingsSchema } from "../pool/config.js";
import { ToolsConfigSchema } from "../tools/config.js";
import { TrainerConfigSchema } from "./atropos/config.js";
import { INFRA_FAILURE_POLICIES } from "./infra-failure.js";

/**
 * An env's settings (the seeds' HermesAgentEnvConfig + AgentEnvConfig, camelCase, ms): the
 * env's own fields at the top, and one section per component, each that component's own
 * schema (its defaults live there): `model` (agent/model-config.ts), `tools`
 * (tools/config.ts), `pool` (pool/config.ts), `executor` (executor/config.ts), `trainer`
 * (env/atropos/config.ts). Parsed once, in the AgentEnv constructor; every part gets its
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

  /** The model client (unset `model.url`: the env's oracle policy plays the model). */
  model: ModelConfigSchema.prefault({}),
  /** The toolsets offered to the model. */
  tools: ToolsConfigSchema.prefault({}),
  /** The slot pool and where its containers run. */
  pool: PoolSettingsSchema.prefault({}),
  /** The tool executor: batching, tool timeouts, the sandbox policy stamped on every call. */
  executor: ToolExecutorConfigSchema.prefault({}),
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
 * The keys of `config` that `schema` does not know, at any depth (sections included), each
 * with where it moved or the nearest known one, e.g. "unknown key 'groupSzie' (did you mean
 * 'groupSize'?)", "modelUrl moved to model.url". A mistyped key would otherwise be dropped
 * by zod and the run would use the default without a word.
 */
export function unknownConfigKeys(schema: z.ZodType, config: Record<string, unknown>, moved: Readonly<Record<string, string>> = MOVED_CONFIG_KEYS, prefix = ""): string[] {
  const shape = objectShape(schema);
  if (!shape) return [];
  const known = Object.keys(shape);
  const problems: string[] = [];
  for (const [k, v] of Object.entries(config)) {
    const path = `${prefix}${k}`;
    if (known.includes(k)) {
      // A section: its own keys are checked the same way.
      if (v !== null && typeof v === "object" && !Array.isArray(v)) problems.push(...unknownConfigKeys(shape[k] as z.ZodType, v as Record<string, unknown>, {}, `${path}.`));
      continue;
    }
    const to = moved[k];
    if (to !== undefined) {
      problems.push(`${path} moved to ${to}`);
      continue;
    }
    const near = nearestName(k, known);
    problems.push(`unknown key '${path}'${near ? ` (did you mean '${prefix}${near}'?)` : ""}`);
  }
  return problems;
}

function objectShape(schema: z.ZodType): Record<string, unknown> | undefined {
  const def = (schema as unknown as { _zod?: { def?: { shape?: Record<string, unknown>; in?: z.ZodType; innerType?: z.ZodType; catchall?: { _zod?: { def?: { type?: string } } } } } })._zod?.def;
  if (!def) return undefined;
  if (def.shape) {
    // A record-like object (catchall other than never) takes any key.
    const catchall = def.catchall?._zod?.def?.type;
    return catchall && catchall !== "never" ? undefined : def.shape;
  }
  // Pipes and wrappers (transform, default, prefault, optional): the object is inside.
  const inner = def.in ?? def.innerType;
  return inner ? objectShape(inner) : undefined;
}

/** The candidate closest to `name` by edit distance (case-insensitive), if it is reasonably close. */
export function nearestName(name: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const c of candidates) {
    const d = editDistance(name.toLowerCase(), c.toLowerCase());
    if (d < bestDistance) {
      bestDistance = d;
      best = c;
    }
  }
  return best !== undefined && bestDistance <= Math.max(2, Math.floor(name.length / 3)) ? best : undefined;
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}
