import type { ChatMessage } from "../agent/messages.js";
import type { LineExtras } from "../report/rollout-extras.js";
import type { InfraFailure } from "./infra-failure.js";
import type { TrajectoryOutcome } from "./scored-group.js";

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
  /** Called for each item whose trajectory could not finish: the reason, and the infra failure if it was one. */
  onFailure?: (reason: string, infra?: InfraFailure) => void;
  /** Stops the evaluation: items not started are skipped, trajectories in flight abandoned (neither counted). */
  signal?: AbortSignal;
}
