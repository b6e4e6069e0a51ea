import { z } from "zod";
import { ToolBackendSettingsSchema, containersInOrder } from "../executor/backend-config.js";
import { INFRA_FAILURE_POLICIES } from "./infra-failure.js";

/**
 * An env's settings (the seeds' HermesAgentEnvConfig + AgentEnvConfig, camelCase, ms).
 * Subclasses add their own fields with `AgentEnvConfigSchema.extend({...})` and set
 * `static configSchema` on the class.
 */
export const AgentEnvConfigSchema = z
  .object({
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
    /** Toolsets offered to the model; ignored when `distribution` is set. */
    enabledToolsets: z.array(z.string().min(1)).default(["default"]),
    disabledToolsets: z.array(z.string().min(1)).default([]),
    /** A toolset distribution, sampled once per group (mutually exclusive with an explicit enabledToolsets). */
    distribution: z.string().min(1).optional(),
    systemPrompt: z.string().optional(),

    /** OpenAI-compatible endpoint (…/v1). Unset: the env's oracle policy plays the model. */
    modelUrl: z.url({ protocol: /^https?$/, error: "modelUrl must be an http(s) URL such as http://127.0.0.1:8000/v1" }).optional(),
    modelName: z.string().min(1).optional(),
    /** Environment variable holding the API key (the key itself is never part of the config). */
    apiKeyEnv: z.string().min(1).default("OPENAI_API_KEY"),
    /** `native`: tools= and server-side parsing; `hermes`: tools in the prompt, `<tool_call>` parsed here. */
    toolCallFormat: z.enum(["native", "hermes"]).default("native"),
    temperature: z.number().min(0).max(2).default(1.0),
    /** Most tokens per model response; also the generation budget sent to Atropos (`max_token_length`). */
    maxTokens: z.number().int().positive().default(2048),
    extraBody: z.record(z.string(), z.unknown()).optional(),
    modelTimeoutMs: z.number().int().positive().default(120_000),
    modelMaxRetries: z.number().int().min(0).max(20).default(4),

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

    // Atropos (BaseEnvConfig names in camelCase)
    /** Skip groups whose scores are all equal (serve mode; process mode turns it off, as Atropos does). */
    ensureScoresAreNotSame: z.boolean().default(true),
    /** Keep the conversation in each scored group (`messages`). */
    includeMessages: z.boolean().default(true),
    /** Drop a group when any sequence reaches the trainer's max_token_len. */
    dropGroupsOverTokenLength: z.boolean().default(true),
    /** Atropos `inference_weight`. */
    inferenceWeight: z.number().default(1.0),
    /** Atropos `max_batches_offpolicy`: back off when this many batches are queued. */
    maxBatchesOffpolicy: z.number().int().min(1).default(3),
    /** Atropos `min_batch_allocation`. */
    minBatchAllocation: z.number().min(0).max(1).nullable().default(null),
    /** Serve mode: run `evaluate()` each time the trainer's step crosses a multiple of this (0: never), pausing rollouts meanwhile. */
    stepsPerEval: z.number().int().min(0).default(0),
    /** A local HF `tokenizer.json` (tokenizer_config.json beside it): tokens/masks when the server returns no ids, and the chat template for token-exact servers. */
    tokenizerPath: z.string().min(1).optional(),
    /**
     * `openai`: chat completions, re-rendered each turn (Phase 1, not token-exact); `vllm` /
     * `sglang`: token in, token out (needs tokenizerPath), every trained id as sampled.
     */
    serverType: z.enum(["openai", "vllm", "sglang"]).default("openai"),
    /** Token-exact servers: how tool calls are read from the sampled text (one parser per model family). */
    toolCallParser: z.enum(["hermes", "qwen3"]).default("hermes"),
    /** Serve mode: send trajectories that are not token-exact to the trainer anyway (also SLOTPOOL_ALLOW_INEXACT_TOKENS=1). */
    allowInexactTokens: z.boolean().default(false),
  })
  // The pool/executor/provisioner settings and their defaults come from the one backend schema.
  .extend(
    ToolBackendSettingsSchema.pick({
      allowNetwork: true,
      requireSandbox: true,
      requireStatefulSandbox: true,
      toolTimeoutS: true,
      batchWindowMs: true,
      maxBatchSize: true,
      provisioner: true,
      slotsPerContainer: true,
      minContainers: true,
      maxContainers: true,
      acquireTimeoutMs: true,
      dataDir: true,
      sandboxImage: true,
      nomadDriver: true,
      nomadJobId: true,
      nomadDatacenters: true,
      nomadNamespace: true,
      nomadNodePool: true,
    }).shape,
  )
  .refine(...containersInOrder);

export type AgentEnvConfig = z.output<typeof AgentEnvConfigSchema>;
export type AgentEnvConfigInput = z.input<typeof AgentEnvConfigSchema>;

/**
 * The keys of `config` that `schema` does not know, each with the nearest known one, e.g.
 * "unknown key 'groupSzie' (did you mean 'groupSize'?)". A mistyped key would otherwise be
 * dropped by zod and the run would use the default without a word.
 */
export function unknownConfigKeys(schema: z.ZodType, config: Record<string, unknown>): string[] {
  const shape = objectShape(schema);
  if (!shape) return [];
  const known = Object.keys(shape);
  return Object.keys(config)
    .filter((k) => !known.includes(k))
    .map((k) => {
      const near = nearestName(k, known);
      return `unknown key '${k}'${near ? ` (did you mean '${near}'?)` : ""}`;
    });
}

function objectShape(schema: z.ZodType): Record<string, unknown> | undefined {
  const def = (schema as unknown as { _zod?: { def?: { shape?: Record<string, unknown>; in?: z.ZodType; innerType?: z.ZodType } } })._zod?.def;
  if (!def) return undefined;
  if (def.shape) return def.shape;
  // Pipes and wrappers (transform, default): the object is inside.
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
