import { envFramesFirst } from "./env-stack.js";
import { TrajectoryFailedError } from "./errors.js";
import { TrajectoryInfraError, type FailedTrajectory } from "./infra-failure.js";
import type { TrajectoryOutcome } from "./scored-group.js";

export type { FailedTrajectory };

/** A finished trajectory that is an infra failure (its reward threw, its model server failed). */
export function failedFromOutcome(t: TrajectoryOutcome, groupTry: number): FailedTrajectory | undefined {
  const f = t.infraFailure;
  if (!f) return undefined;
  return {
    trajectory_id: t.trajectoryId,
    cause: f.cause,
    ...(f.stage ? { stage: f.stage } : {}),
    message: f.message,
    ...(f.stack ? { stack: f.stack } : {}),
    group_try: groupTry,
    messages: t.result.messages,
    ...(t.rewardCalls?.length ? { reward_calls: t.rewardCalls } : {}),
  };
}

/** A trajectory that ended in an error before it had a result (its setup or a tool call failed, its slot was lost past the retries). */
export function failedFromError(err: unknown, groupTry: number): FailedTrajectory {
  if (err instanceof TrajectoryInfraError) {
    const f = err.failure;
    return { ...(f.trajectoryId ? { trajectory_id: f.trajectoryId } : {}), cause: f.cause, ...(f.stage ? { stage: f.stage } : {}), message: f.message, ...(f.stack ? { stack: f.stack } : {}), group_try: groupTry };
  }
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof TrajectoryFailedError && err.slotLost) return { cause: "slot_lost", message, group_try: groupTry };
  const stack = envFramesFirst(err);
  return { cause: "error", message, ...(stack ? { stack } : {}), group_try: groupTry };
}

/** The sidecar of an output file: `run.jsonl` → `run.failed.jsonl`. */
export function failedSidecarPath(out: string): string {
  return out.endsWith(".jsonl") ? `${out.slice(0, -".jsonl".length)}.failed.jsonl` : `${out}.failed.jsonl`;
}
