import type { AgentResult } from "../agent/agent-loop.js";
import type { ChatMessage } from "../agent/messages.js";
import type { FailedTrajectory, InfraCause, InfraFailure } from "./infra-failure.js";
import type { Metrics } from "./metrics.js";
import type { BranchTree } from "../report/branch-tree.js";
import type { RewardCallExtras } from "../report/rollout-extras.js";

import { tokenSegmentsFromServer, tokensFromTokenizer, type SequenceTokens, type TextTokenizer } from "./tokens.js";

/**
 * A scored group in Atropos's `ScoredData` shape (field names as on the wire). Required:
 * tokens, masks, scores; the rest optional.
 */
export interface ScoredDataGroup {
  tokens: number[][];
  masks: number[][];
  scores: number[];
  advantages?: number[][] | null;
  ref_logprobs?: number[][] | null;
  inference_logprobs?: number[][] | null;
  messages?: ChatMessage[][] | null;
  generation_params?: Record<string, unknown> | null;
  overrides?: Array<Record<string, unknown>> | null;
  group_overrides?: Record<string, unknown> | null;
  images?: unknown;
  env_id?: number | null;
  distill_token_ids?: number[][][] | null;
  distill_logprobs?: number[][][] | null;
}

/** One finished trajectory of a group. */
export interface TrajectoryOutcome {
  trajectoryId: string;
  result: AgentResult;
  score: number;
  /** Reward was not computed because the agent produced nothing (score 0). */
  rewardSkipped: boolean;
  /** computeReward threw; the message (the trajectory is then an infra failure, not a score). */
  rewardError?: string;
  /**
   * The trajectory did not get a fair run (model server failed, reward code or its tool call
   * failed): `score` means nothing and the trajectory is never written or sent.
   */
  infraFailure?: InfraFailure;
  scoreMetadata: Record<string, unknown>;
  /** The env's own metrics of this trajectory (`computeReward` returning `{score, metrics}`). */
  metrics?: Metrics;
  /** The trajectory's own score when the group-level scoring (`scoreGroup`) replaced it. */
  ownScore?: number;
  /** How many times the trajectory ran (1 + restarts after slot losses). */
  attempts: number;
  slotLosses: string[];
  tokens: SequenceTokens | null;
  /**
   * Segments finished before the token sequence had to break (see tokenSegmentsFromServer),
   * oldest first; each goes to the trainer as a sample of its own, with the trajectory's score.
   */
  brokenSegments?: SequenceTokens[];
  /** Wall time of the successful attempt: workspace setup, agent loop and reward. */
  durationMs?: number;
  /** Time to prepare the workspace (reset into the item's template + setupWorkspace), ms. */
  workspaceSetupMs?: number;
  /** The reward's own tool calls (output and exit codes cut), for debugging a reward. */
  rewardCalls?: RewardCallExtras[];
  /** In a branching group (src/env/branching.ts): the group's tree, the same object on every branch. */
  branchTree?: BranchTree;
}

export type GroupOutcome<Item = unknown> =
  | {
      ok: true;
      item: Item;
      group: ScoredDataGroup;
      /** The trajectories in the group (masked ones left out). */
      trajectories: TrajectoryOutcome[];
      toolsets: string[];
      /** Infra failures met on the way: in dropped earlier tries of the item, and masked trajectories. */
      infraFailures: InfraFailure[];
      /** Trajectories left out under `infraFailurePolicy: "mask"`. */
      masked: number;
      /** Earlier tries of the item dropped for an infra failure. */
      droppedAttempts: number;
      /** The cause of each dropped try's first infra failure (one entry per dropped try). */
      droppedAttemptCauses?: InfraCause[];
      /** The env's metrics of the whole group (`scoreGroup` returning `{scores, metrics}`). */
      metrics?: Metrics;
      /** The trajectories of every try that were not scored (masked, or in dropped tries): for the sidecar, never the group. */
      failed?: FailedTrajectory[];
      /** Tool calls that ran in trajectories not among `trajectories` (dropped tries, masked, thrown): the summary counts every call that ran. */
      unscoredToolCalls?: number;
    }
  | {
      ok: false;
      item: Item;
      reason: string;
      /**
       * `infra`: dropped for infrastructure failures (after `infraRetries` more tries, or at
       * once under the `fail` policy); `error`: a trajectory failed otherwise (setup threw).
       */
      kind: "infra" | "error";
      /** `infraFailurePolicy: "fail"`: the run must stop. */
      fatal: boolean;
      /** The scored trajectories of the last try (none of them written or sent). */
      trajectories: TrajectoryOutcome[];
      toolsets: string[];
      infraFailures: InfraFailure[];
      /** Slot losses and restarts of the trajectories that did not finish. */
      unfinished: { slotLosses: number; retries: number };
      /** `infra`: the cause of each dropped try's first infra failure, the last try included. */
      droppedAttemptCauses?: InfraCause[];
      /** The trajectories of every try that were not scored (failed, in dropped tries): for the sidecar. */
      failed?: FailedTrajectory[];
      /** Tool calls that ran in trajectories not among `trajectories` (dropped tries, infra failures, thrown). */
      unscoredToolCalls?: number;
    };

/** The ids of a trajectory: the server's when it returned them, else the tokenizer's, else none. */
export function trajectoryTokens(result: AgentResult, tokenizer: TextTokenizer | undefined): { tokens: SequenceTokens | null; brokenSegments: SequenceTokens[] } {
  const segments = tokenSegmentsFromServer(result.turns);
  if (segments) return { tokens: segments[segments.length - 1]!, brokenSegments: segments.slice(0, -1) };
  return { tokens: tokenizer ? tokensFromTokenizer(result.messages, tokenizer) : null, brokenSegments: [] };
}

/** The samples a trajectory gives the trainer: its broken-off segments, then its last (or only) sequence. */
function samplesOf(t: TrajectoryOutcome): Array<SequenceTokens | null> {
  return [...(t.brokenSegments ?? []), t.tokens];
}

/**
 * Builds the group as Atropos's BaseEnv would hand it on. Without token ids (oracle policy,
 * or a server that returns none and no tokenizer) tokens and masks are empty lists: nothing
 * is invented.
 */
export function buildScoredGroup(
  trajectories: readonly TrajectoryOutcome[],
  options: { includeMessages: boolean; generationParams?: Record<string, unknown>; groupSize?: number },
): ScoredDataGroup {
  const rows = trajectories.flatMap((t) => samplesOf(t).map((seq) => ({ t, seq })));
  const group: ScoredDataGroup = {
    tokens: rows.map((r) => r.seq?.tokens ?? []),
    masks: rows.map((r) => r.seq?.masks ?? []),
    scores: rows.map((r) => r.t.score),
  };
  if (rows.length > 0 && rows.every((r) => r.seq?.logprobs)) {
    group.inference_logprobs = rows.map((r) => r.seq!.logprobs!);
  }
  // Broken-off segments make the group larger than groupSize, masked trajectories smaller; say so, as Atropos envs do.
  if (rows.length !== (options.groupSize ?? trajectories.length)) group.group_overrides = { group_size: rows.length };
  if (options.includeMessages) group.messages = rows.map((r) => r.t.result.messages);
  if (options.generationParams) group.generation_params = options.generationParams;
  return group;
}
