import { z } from "zod";

/**
 * The Atropos trainer's settings: the `trainer` section of an env config (Atropos
 * BaseEnvConfig names in camelCase). Serve mode sends them at registration and filters groups
 * by them; process mode keeps `includeMessages`.
 */
export const TrainerConfigSchema = z.object({
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
  /** Serve mode: send trajectories that are not token-exact to the trainer anyway (also SLOTPOOL_ALLOW_INEXACT_TOKENS=1). */
  allowInexactTokens: z.boolean().default(false),
});

export type TrainerConfig = z.output<typeof TrainerConfigSchema>;
export type TrainerConfigInput = z.input<typeof TrainerConfigSchema>;
