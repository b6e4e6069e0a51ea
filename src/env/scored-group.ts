import type { AgentResult } from "../agent/agent-loop.js";
import type { ChatMessage } from "../agent/messages.js";
import type { BranchTree } from "../report/branch-tree.js";
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
  /** computeReward threw (score 0); the message. */
  rewardError?: string;
  scoreMetadata: Record<string, unknown>;
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
  /** In a branching group (src/env/branching.ts): the group's tree, the same object on every branch. */
  branchTree?: BranchTree;
}

export type GroupOutcome<Item = unknown> =
  | { ok: true; item: Item; group: ScoredDataGroup; trajectories: TrajectoryOutcome[]; toolsets: string[] }
  | {
      ok: false;
      item: Item;
      reason: string;
      /** The trajectories that did finish. */
      trajectories: TrajectoryOutcome[];
      toolsets: string[];
      /** Slot losses and restarts of the trajectories that did not finish. */
      unfinished: { slotLosses: number; retries: number };
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
  options: { includeMessages: boolean; generationParams?: Record<string, unknown> },
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
  // Broken-off segments make the group larger than groupSize; say so, as Atropos envs do.
  if (rows.length !== trajectories.length) group.group_overrides = { group_size: rows.length };
  if (options.includeMessages) group.messages = rows.map((r) => r.t.result.messages);
  if (options.generationParams) group.generation_params = options.generationParams;
  return group;
}
