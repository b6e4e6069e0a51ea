import { z } from "zod";
import type { ChatMessage } from "../agent/messages.js";
import { ChatModelPolicy } from "../agent/model-policy.js";
import type { TrajectoryOutcome } from "../env/scored-group.js";
import { TrajectoryFailedError } from "../env/errors.js";
import type { EpisodeHost } from "./episode-host.js";
import { ActionValidationError } from "./errors.js";
import { firstProblem, validationIssues } from "./wire.js";

/** Sampling fields of `model` that become chat request fields of their own; every other extra field goes into the request body as it is. */
const ModelSchema = z.looseObject({
  base_url: z.url({ protocol: /^https?$/, error: "base_url must be an http(s) URL of an OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1" }),
  model: z.string().min(1),
  api_key: z.string().optional(),
  temperature: z.number().min(0).optional(),
  max_tokens: z.number().int().positive().optional(),
  tool_call_format: z.enum(["native", "hermes"]).optional(),
  timeout_ms: z.number().int().positive().optional(),
  max_retries: z.number().int().min(0).max(10).optional(),
});

export const RunRequestSchema = z
  .object({
    item: z.unknown().optional(),
    seed: z.number().int().min(0).optional(),
    episode_id: z.string().min(1).max(255).optional(),
    model: ModelSchema,
  })
  .strict()
  .refine((r) => !(r.item !== undefined && (r.seed !== undefined || r.episode_id !== undefined)), { message: "give the item, or a seed / episode_id that selects one, not both" });
export type RunRequest = z.output<typeof RunRequestSchema>;

/** One model turn of a rollout: the ids and logprobs exactly as the endpoint returned them (absent where it did not). */
export interface RunTurn {
  turn: number;
  finish_reason: string;
  prompt_token_ids?: number[];
  completion_token_ids?: number[];
  logprobs?: number[];
}

/**
 * The scored trajectory `POST /run` answers: `status: "scored"` with the reward, or
 * `status: "infra_failure"` with `reward: null` and what failed (the model endpoint, the
 * slot, the reward code): such a rollout says nothing of the policy and must not be trained on.
 */
export interface RunAnswer {
  status: "scored" | "infra_failure";
  reward: number | null;
  infra_failure: { cause: string; message: string } | null;
  done: true;
  finish_reason: string | null;
  messages: ChatMessage[];
  turns: RunTurn[];
  tool_calls: Array<{ turn: number; tool: string; arguments: string; success: boolean; exit_code?: number | null }>;
  metadata: Record<string, unknown>;
  metrics: Record<string, number>;
  trajectory_id: string | null;
  item_index: number | null;
  attempts: number;
  slot_losses: string[];
}

export function parseRunRequest(body: unknown): RunRequest {
  const parsed = RunRequestSchema.safeParse(body);
  if (!parsed.success) throw new ActionValidationError(`Invalid /run request: ${firstProblem(parsed.error)}`, validationIssues(parsed.error));
  return parsed.data;
}

/**
 * One rollout of the env with its own agent loop (`collectTrajectory`: workspace setup, the
 * loop, computeReward, all in one slot) against the trainer's OpenAI-compatible endpoint,
 * handed over with the request — what NeMo Gym's `/run`, verifiers and rLLM call.
 */
export async function runRollout<Item>(host: EpisodeHost<Item>, request: RunRequest, signal?: AbortSignal): Promise<RunAnswer> {
  const { base_url, model, api_key, temperature, max_tokens, tool_call_format, timeout_ms, max_retries, ...extra } = request.model;
  let item: Item;
  let itemIndex: number | null = null;
  if (request.item !== undefined) item = request.item as Item;
  else {
    const selected = await host.items.select({ ...(request.seed !== undefined ? { seed: request.seed } : {}), ...(request.episode_id !== undefined ? { episodeId: request.episode_id } : {}) });
    item = selected.item;
    itemIndex = selected.index;
  }
  const policy = new ChatModelPolicy({
    baseUrl: base_url,
    model,
    ...(api_key ? { apiKey: api_key } : {}),
    ...(temperature !== undefined ? { temperature } : {}),
    ...(max_tokens !== undefined ? { maxTokens: max_tokens } : {}),
    ...(tool_call_format ? { toolCallFormat: tool_call_format } : {}),
    timeoutMs: timeout_ms ?? host.env.config.model.timeoutMs,
    maxRetries: max_retries ?? host.env.config.model.maxRetries,
    ...(Object.keys(extra).length > 0 ? { extraBody: extra } : {}),
  });
  try {
    const outcome = await host.env.collectTrajectory(item, host.env.resolveTools(), { policy, ...(signal ? { signal } : {}) });
    return answerOf(outcome, itemIndex);
  } catch (err) {
    const message = err instanceof Error ? err.message : String(err);
    const cause = err instanceof TrajectoryFailedError && err.slotLost ? "slot_lost" : "setup";
    return { ...emptyAnswer(itemIndex), infra_failure: { cause, message }, attempts: err instanceof TrajectoryFailedError ? err.attempts : 1 };
  } finally {
    await policy.close();
  }
}

function emptyAnswer(itemIndex: number | null): RunAnswer {
  return { status: "infra_failure", reward: null, infra_failure: null, done: true, finish_reason: null, messages: [], turns: [], tool_calls: [], metadata: {}, metrics: {}, trajectory_id: null, item_index: itemIndex, attempts: 1, slot_losses: [] };
}

function answerOf(t: TrajectoryOutcome, itemIndex: number | null): RunAnswer {
  const r = t.result;
  const turns = r.turns.map((turn): RunTurn => {
    const k = turn.tokens;
    return {
      turn: turn.turn,
      finish_reason: turn.finishReason,
      ...(k?.promptTokenIds ? { prompt_token_ids: k.promptTokenIds } : {}),
      ...(k ? { completion_token_ids: k.completionTokenIds } : {}),
      ...(k?.completionLogprobs ? { logprobs: k.completionLogprobs } : {}),
    };
  });
  const failed = t.infraFailure;
  return {
    status: failed ? "infra_failure" : "scored",
    reward: failed ? null : t.score,
    infra_failure: failed ? { cause: failed.cause, message: failed.message } : null,
    done: true,
    finish_reason: r.finishReason,
    messages: r.messages,
    turns,
    tool_calls: r.toolCalls.map((c) => ({ turn: c.turn, tool: c.tool, arguments: c.arguments, success: c.success, ...(c.exitCode !== undefined ? { exit_code: c.exitCode } : {}) })),
    metadata: t.scoreMetadata,
    metrics: t.metrics ?? {},
    trajectory_id: t.trajectoryId,
    item_index: itemIndex,
    attempts: t.attempts,
    slot_losses: t.slotLosses,
  };
}
