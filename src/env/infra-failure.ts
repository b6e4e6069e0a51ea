import { InfraToolError } from "../agent/errors.js";
import { ImageUnavailableError } from "../pool/errors.js";
import type { ImageFailureReason } from "../protocol/images.js";
import type { ChatMessage } from "../agent/messages.js";
import type { RewardCallExtras } from "../report/rollout-extras.js";
import { TOOL_INFRA_CAUSES, type ToolInfraCause } from "../protocol/infra.js";
import { EnvError, ToolContextInfraError } from "./errors.js";

/**
 * Infrastructure failures: a trajectory that did not get a fair run, so it has no score. A
 * zero written for it would be a wrong reward the trainer learns from ("fake zeros"), so
 * such a trajectory is never scored, written or sent; the summary counts it by cause.
 *
 * - `model`: the model server failed (after the client's retries);
 * - `slot_lost`: the trajectory's slot was lost more often than `slotLossRetries` allows;
 * - `reward`: the reward code threw or returned a non-finite number;
 * - `reward_tool`: a tool call the reward made through its ToolContext failed;
 * - the tool-call causes of protocol/infra.ts, wherever the call was made (agent, setupWorkspace,
 *   reward): `sandbox_start` (the command could not start), `command_killed` (a reset from
 *   outside cut it off), `server_shutdown` (the sandbox server or executor was shutting
 *   down), `sandbox_error` (the sandbox could not be asked), `no_slot` (no slot to be had),
 *   `vision_model` (the env's vision model, which answers `browser_vision`, failed);
 * - the item's task image could not be had on the slot's container (docs/images.md):
 *   `image_not_found` (no such image or tag at its source), `image_store_full` (the
 *   container's image store or disk had no room for it beside the images in use),
 *   `image_unavailable` (any other reason: the pull failed, credentials were refused, a
 *   plain-HTTP registry not named by --insecure-registry, unpacking failed, the server
 *   cannot give slots image roots).
 */
export const IMAGE_INFRA_CAUSES = ["image_not_found", "image_store_full", "image_unavailable"] as const;
export const INFRA_CAUSES = ["model", "slot_lost", "reward", "reward_tool", ...TOOL_INFRA_CAUSES, ...IMAGE_INFRA_CAUSES] as const;
export type InfraCause = (typeof INFRA_CAUSES)[number];

/**
 * What a group with an infra failure becomes: `drop` (default) drops the group and retries
 * its item (up to `infraRetries` times); `mask` keeps the group without the failed
 * trajectories; `fail` stops the run.
 */
export const INFRA_FAILURE_POLICIES = ["drop", "mask", "fail"] as const;
export type InfraFailurePolicy = (typeof INFRA_FAILURE_POLICIES)[number];

/** Where a trajectory met its infra failure: its workspace setup, the agent's tool calls, or the reward. */
export const INFRA_STAGES = ["setup", "tool", "reward"] as const;
export type InfraStage = (typeof INFRA_STAGES)[number];

export interface InfraFailure {
  cause: InfraCause;
  message: string;
  trajectoryId?: string;
  stage?: InfraStage;
  /** Where the env's code threw (a reward or hook): its stack, the env's frames first (env-stack.ts). */
  stack?: string;
}

/**
 * One trajectory that was not scored — an infra failure (a reward or hook that threw, a model
 * server that failed, …) or an error of the env's code — as the run's sidecar
 * (`<out>.failed.jsonl`, beside the training JSONL and never in it) keeps it for debugging: why,
 * the stack of the env's code that threw (its own frames first), the transcript and the
 * reward's tool calls. Field names are the wire format of that file.
 */
export interface FailedTrajectory {
  trajectory_id?: string;
  /** An infra cause, or `error` for an env hook's own error (setupWorkspace threw). */
  cause: InfraCause | "error";
  stage?: InfraStage;
  message: string;
  stack?: string;
  /** Which try of its group this was (1: the first; an item is tried again after a dropped try). */
  group_try: number;
  /** The conversation up to the failure (absent when the trajectory had none yet). */
  messages?: ChatMessage[];
  reward_calls?: RewardCallExtras[];
}

/**
 * A trajectory that ended in an infra failure before it had a result to score (its setup or
 * one of the agent's tool calls): the group collector counts it under `infraFailurePolicy`.
 */
export class TrajectoryInfraError extends EnvError {
  override name = "TrajectoryInfraError";
  constructor(readonly failure: InfraFailure) {
    super(failure.message);
  }
}

/**
 * The infra failure an error stands for, or undefined: a tool call the infrastructure did
 * not run to its end (the agent loop's InfraToolError, a ToolContext's ToolContextInfraError),
 * or a trajectory already failed that way.
 */
export function infraFailureOf(err: unknown, stage: InfraStage, trajectoryId?: string): InfraFailure | undefined {
  if (err instanceof TrajectoryInfraError) return err.failure;
  if (err instanceof ImageUnavailableError) return { cause: imageCause(err.reason), stage, message: `the task image: ${err.message}`, ...(trajectoryId ? { trajectoryId } : {}) };
  let cause: ToolInfraCause | undefined;
  if (err instanceof InfraToolError || err instanceof ToolContextInfraError) cause = err.infraCause;
  if (!cause) return undefined;
  return { cause, stage, message: `${stage === "setup" ? "setupWorkspace" : stage === "reward" ? "the reward" : "a tool call"}: ${(err as Error).message}`, ...(trajectoryId ? { trajectoryId } : {}) };
}

/** The infra cause of a sandbox server's `image_unavailable` reason (protocol/images.ts). */
export function imageCause(reason: ImageFailureReason): InfraCause {
  return reason === "not_found" ? "image_not_found" : reason === "store_full" ? "image_store_full" : "image_unavailable";
}

/** Rethrows an infra failure (see infraFailureOf) as the trajectory's TrajectoryInfraError; any other error is left to the caller. */
export function throwIfInfraFailure(err: unknown, stage: InfraStage, trajectoryId: string): void {
  const infra = infraFailureOf(err, stage, trajectoryId);
  if (infra) throw new TrajectoryInfraError(infra);
}

/** Per stage, every stage present (zeros included). */
export function countByStage(failures: readonly InfraFailure[]): Record<InfraStage, number> {
  const counts = Object.fromEntries(INFRA_STAGES.map((s) => [s, 0])) as Record<InfraStage, number>;
  for (const f of failures) if (f.stage) counts[f.stage]++;
  return counts;
}

/** A tally with every cause present (zeros included), for summaries and metrics. */
export function countByCause(failures: readonly InfraFailure[]): Record<InfraCause, number> {
  const counts = Object.fromEntries(INFRA_CAUSES.map((c) => [c, 0])) as Record<InfraCause, number>;
  for (const f of failures) counts[f.cause]++;
  return counts;
}

/** "model 2, reward 1" (causes with a count only), or "none". */
export function formatCauses(counts: Record<InfraCause, number>): string {
  const parts = INFRA_CAUSES.filter((c) => counts[c] > 0).map((c) => `${c} ${counts[c]}`);
  return parts.length ? parts.join(", ") : "none";
}
