import type { ChatMessage } from "../agent/messages.js";
import type { LineExtras } from "../report/rollout-extras.js";
import { TrajectoryInfraError, type FailedTrajectory, type InfraFailure } from "./infra-failure.js";
import { TrajectoryFailedError } from "./errors.js";
import { failedFromError } from "./failed-trajectories.js";
import type { TrajectoryOutcome } from "./scored-group.js";
import { lineExtras } from "./rollout-extras.js";
import { metricMeans } from "./metrics.js";

/** What `AgentEnv.evaluate()` takes and gives (`slotpool evaluate` writes it as metrics.json and samples.jsonl). */

/** One evaluation sample (written to samples.jsonl by `slotpool evaluate`). */
export interface EvalSample {
  item: unknown;
  score: number;
  finishReason: string;
  turnsUsed: number;
  toolCalls: number;
  toolErrors: number;
  messages: ChatMessage[];
  /** Timings, exit codes and tool errors for the report (the same key as on process-mode lines). */
  slotpool?: LineExtras;
}

export interface EvalResult {
  metrics: Record<string, number>;
  samples: EvalSample[];
}

export interface EvaluateOptions {
  /** Called as each evaluated trajectory finishes (progress, run statistics); infra failures included. */
  onTrajectory?: (outcome: TrajectoryOutcome) => void;
  /** Called for each item whose trajectory could not finish: the reason, the infra failure if it was one, and its record for the run's sidecar. */
  onFailure?: (reason: string, infra?: InfraFailure, failed?: FailedTrajectory) => void;
  /** Stops the evaluation: items not started are skipped, trajectories in flight abandoned (neither counted). */
  signal?: AbortSignal;
}

/** One evaluated item: its trajectory, or why there is none (failed, or skipped by an abort). */
export type EvalItemResult<Item> = { item: Item; t: TrajectoryOutcome } | { item: Item; err: unknown } | { item: Item; skipped: true };

/**
 * What becomes of one eval item's trajectory (AgentEnv.evaluate's `then` handlers): a finished
 * one is told to `onTrajectory`; a failed one to `onFailure` with its infra failure, if it was
 * one, and its sidecar record; after an abort, the item counts as skipped.
 */
export function evalItemHandlers<Item>(item: Item, options: EvaluateOptions): [(t: TrajectoryOutcome | undefined) => EvalItemResult<Item>, (err: unknown) => EvalItemResult<Item>] {
  return [
    (t) => {
      if (t) options.onTrajectory?.(t);
      return t ? { item, t } : { item, skipped: true as const };
    },
    (err) => {
      if (options.signal?.aborted) return { item, skipped: true as const };
      const reason = err instanceof Error ? err.message : String(err);
      const infra = err instanceof TrajectoryInfraError ? err.failure : err instanceof TrajectoryFailedError && err.slotLost ? ({ cause: "slot_lost", message: reason } as const) : undefined;
      options.onFailure?.(reason, infra, failedFromError(err, 1));
      return { item, err };
    },
  ];
}

/** `evaluate`'s answer: failed and infra-failed items count in `eval_failed`, never in the scores. */
export function evalResult<Item>(itemCount: number, results: readonly EvalItemResult<Item>[], successThreshold: number): EvalResult {
  const samples: EvalSample[] = [];
  let failed = 0;
  for (const r of results) {
    if ("skipped" in r) continue;
    if ("err" in r || r.t.infraFailure) {
      failed++;
      continue;
    }
    const t = r.t;
    samples.push({ item: r.item, score: t.score, finishReason: t.result.finishReason, turnsUsed: t.result.turnsUsed, toolCalls: t.result.toolCalls.length, toolErrors: t.result.toolErrors.length, messages: t.result.messages, slotpool: lineExtras([t]) });
  }
  const n = samples.length;
  return {
    metrics: {
      eval_items: itemCount,
      eval_failed: failed,
      mean_score: n ? samples.reduce((a, s) => a + s.score, 0) / n : 0,
      solve_rate: n ? samples.filter((s) => s.score >= successThreshold).length / n : 0,
      ...metricMeans(samples.map((s) => s.slotpool?.trajectories[0]?.metrics)),
    },
    samples,
  };
}
