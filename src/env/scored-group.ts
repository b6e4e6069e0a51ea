import type { AgentResult } from "../agent/agent-loop.js";
import type { ChatMessage } from "../agent/messages.js";
import { tokensFromServer, tokensFromTokenizer, type SequenceTokens, type TextTokenizer } from "./tokens.js";

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
  /** Time to prepare the workspace (reset into the item's template + setupWorkspace), ms. */
  workspaceSetupMs?: number;
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
export function trajectoryTokens(result: AgentResult, tokenizer: TextTokenizer | undefined): SequenceTokens | null {
  return tokensFromServer(result.turns) ?? (tokenizer ? tokensFromTokenizer(result.messages, tokenizer) : null);
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
  const group: ScoredDataGroup = {
    tokens: trajectories.map((t) => t.tokens?.tokens ?? []),
    masks: trajectories.map((t) => t.tokens?.masks ?? []),
    scores: trajectories.map((t) => t.score),
  };
  if (trajectories.length > 0 && trajectories.every((t) => t.tokens?.logprobs)) {
    group.inference_logprobs = trajectories.map((t) => t.tokens!.logprobs!);
  }
  if (options.includeMessages) group.messages = trajectories.map((t) => t.result.messages);
  if (options.generationParams) group.generation_params = options.generationParams;
  return group;
}
