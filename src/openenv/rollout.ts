import { z } from "zod";
import type { ChatMessage } from "../agent/messages.js";
import { ChatModelPolicy } from "../agent/model-policy.js";
import type { TrajectoryOutcome } from "../env/scored-group.js";
import { TrajectoryFailedError } from "../env/errors.js";
import { TrajectoryInfraError } from "../env/infra-failure.js";
import { TrajectoryInterruptedError } from "../env/interruption.js";
import type { EpisodeHost } from "./episode-host.js";
import { ActionValidationError } from "./errors.js";
import type { ServerLimits } from "./limits.js";
import type { ModelUrlPolicy } from "./model-url.js";
import { failureKindOf, nemoGymVerifyResponse } from "./nemo-gym.js";
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
    /** The whole rollout's deadline, ms (bounded by the server's --run-timeout-s). */
    timeout_ms: z.number().int().positive().optional(),
    /** NeMo Gym's run request: when given, the answer is also its verify response (responses_create_params, response, float reward). */
    responses_create_params: z.record(z.string(), z.unknown()).optional(),
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
  /** NeMo Gym's verify fields: an infra failure's sample is masked, its kind from NeMo Gym's vocabulary, the reason in words. */
  mask_sample: boolean;
  failure_kind: string | null;
  failure_reason: string | null;
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

/** What a /run is bounded by and where it may go: the server's limits and its model URL allow-list. */
export interface RunBounds {
  limits: Pick<ServerLimits, "modelAnswerMaxBytes" | "runTimeoutMs">;
  modelUrls: ModelUrlPolicy;
  /** Aborts when the client went away: the rollout is cancelled and its slot freed. */
  signal?: AbortSignal;
}

/**
 * One rollout of the env with its own agent loop (`collectTrajectory`: workspace setup, the
 * loop, computeReward, all in one slot) against the trainer's OpenAI-compatible endpoint,
 * handed over with the request — what NeMo Gym's `/run`, verifiers and rLLM call.
 *
 * Bounded: the endpoint must be one the operator allowed (refused before any connection),
 * the model's answers are read up to the server's cap, and the whole rollout stops at its
 * deadline (`timeout_ms`, at most the server's) or when `bounds.signal` aborts; either way
 * its slot is reset and released and the answer is an infra failure.
 */
export async function runRollout<Item>(host: EpisodeHost<Item>, request: RunRequest, bounds: RunBounds): Promise<Record<string, unknown>> {
  const { base_url, model, api_key, temperature, max_tokens, tool_call_format, timeout_ms, max_retries, ...extra } = request.model;
  bounds.modelUrls.check(base_url);
  let item: Item;
  let itemIndex: number | null = null;
  if (request.item !== undefined) item = request.item as Item;
  else {
    const selected = await host.items.select({ ...(request.seed !== undefined ? { seed: request.seed } : {}), ...(request.episode_id !== undefined ? { episodeId: request.episode_id } : {}) });
    item = selected.item;
    itemIndex = selected.index;
  }
  const deadlineMs = Math.min(request.timeout_ms ?? bounds.limits.runTimeoutMs, bounds.limits.runTimeoutMs);
  const policy = new ChatModelPolicy({
    baseUrl: base_url,
    model,
    ...(api_key ? { apiKey: api_key } : {}),
    ...(temperature !== undefined ? { temperature } : {}),
    ...(max_tokens !== undefined ? { maxTokens: max_tokens } : {}),
    ...(tool_call_format ? { toolCallFormat: tool_call_format } : {}),
    timeoutMs: Math.min(timeout_ms ?? host.env.config.model.timeoutMs, deadlineMs),
    maxRetries: max_retries ?? host.env.config.model.maxRetries,
    maxResponseBytes: bounds.limits.modelAnswerMaxBytes,
    ...(Object.keys(extra).length > 0 ? { extraBody: extra } : {}),
  });
  const stop = new AbortController();
  const deadline = setTimeout(() => stop.abort(new Error("deadline")), deadlineMs);
  const onGone = () => stop.abort(new Error("cancelled"));
  bounds.signal?.addEventListener("abort", onGone, { once: true });
  if (bounds.signal?.aborted) onGone();
  let answer: RunAnswer;
  try {
    const outcome = await host.env.collectTrajectory(item, host.env.resolveTools(), { policy, signal: stop.signal });
    answer = answerOf(outcome, itemIndex);
  } catch (err) {
    answer = failedAnswer(err, itemIndex, stop.signal, deadlineMs);
  } finally {
    clearTimeout(deadline);
    bounds.signal?.removeEventListener("abort", onGone);
    await policy.close();
  }
  if (!request.responses_create_params) return answer as unknown as Record<string, unknown>;
  return { ...answer, ...nemoGymVerifyResponse(answer, { model, ...request.responses_create_params }, host.env.initialMessages(item).length) };
}

/** The answer of a rollout that threw: cut at its deadline, cancelled, its slot kept being lost, or an infra failure of setup. */
function failedAnswer(err: unknown, itemIndex: number | null, signal: AbortSignal, deadlineMs: number): RunAnswer {
  const message = err instanceof Error ? err.message : String(err);
  const attempts = err instanceof TrajectoryFailedError ? err.attempts : 1;
  if (err instanceof TrajectoryInterruptedError || signal.aborted) {
    const why = (signal.reason as Error | undefined)?.message;
    if (why === "deadline") return failure(itemIndex, "deadline", `the rollout passed its deadline of ${deadlineMs} ms (timeout_ms, at most the server's --run-timeout-s) and was stopped; its slot was reset`, attempts);
    return failure(itemIndex, "cancelled", "the client went away: the rollout was stopped and its slot reset", attempts);
  }
  if (err instanceof TrajectoryInfraError) return failure(itemIndex, err.failure.cause, message, attempts);
  return failure(itemIndex, err instanceof TrajectoryFailedError && err.slotLost ? "slot_lost" : "setup", message, attempts);
}

function failure(itemIndex: number | null, cause: string, message: string, attempts: number): RunAnswer {
  return { ...emptyAnswer(itemIndex), infra_failure: { cause, message }, failure_kind: failureKindOf(cause), failure_reason: message, attempts };
}

function emptyAnswer(itemIndex: number | null): RunAnswer {
  return { status: "infra_failure", reward: null, infra_failure: null, mask_sample: true, failure_kind: null, failure_reason: null, done: true, finish_reason: null, messages: [], turns: [], tool_calls: [], metadata: {}, metrics: {}, trajectory_id: null, item_index: itemIndex, attempts: 1, slot_losses: [] };
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
    mask_sample: failed !== undefined,
    failure_kind: failed ? failureKindOf(failed.cause) : null,
    failure_reason: failed ? failed.message : null,
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
