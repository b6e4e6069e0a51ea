import type { ScoredDataGroup } from "../scored-group.js";

export interface SendFilterOptions {
  /** config.groupSize (overridden per group by `group_overrides.group_size`). */
  groupSize: number;
  /** Atropos `ensure_scores_are_not_same`: skip groups whose scores are all equal. */
  ensureScoresAreNotSame: boolean;
  /** The trainer's `max_token_len` from /info (≤ 0 or undefined: no length filter). */
  maxTokenLen?: number;
  /** Drop a group when any sequence has `len ≥ maxTokenLen`. */
  dropOverLength: boolean;
  /** Fill missing `messages` with the decoded tokens (needs a decoder). */
  includeMessages: boolean;
  decode?: (ids: number[]) => string;
}

export type FilterOutcome = { send: true; group: ScoredDataGroup } | { send: false; reason: string };

/** The five keys BaseEnv sets to explicit null when missing; other optional keys stay absent. */
const NULLED_KEYS = ["ref_logprobs", "overrides", "group_overrides", "distill_token_ids", "distill_logprobs"] as const;

/**
 * BaseEnv's `handle_send_to_api` steps, in order: size check, same-score skip, explicit
 * nulls, token-length filter, messages fill. Returns the group to send, or why it is skipped.
 */
export function filterGroupForSend(input: ScoredDataGroup, options: SendFilterOptions): FilterOutcome {
  const group: ScoredDataGroup = { ...input };
  if ("group_overrides" in group && group.group_overrides === null) {
    return { send: false, reason: "group_overrides is explicitly null (Atropos rejects it); omit the key or give an object" };
  }
  const overrideSize = group.group_overrides?.["group_size"];
  const expected = typeof overrideSize === "number" ? overrideSize : options.groupSize;
  if (group.tokens.length !== expected) {
    return { send: false, reason: `group has ${group.tokens.length} sequences, expected ${expected}` };
  }
  if (options.ensureScoresAreNotSame && group.scores.every((s) => s === group.scores[0])) {
    return { send: false, reason: `all ${group.scores.length} scores are equal (${group.scores[0]}): no learning signal (ensureScoresAreNotSame)` };
  }
  for (const k of NULLED_KEYS) if (group[k] === undefined) (group as unknown as Record<string, unknown>)[k] = null;
  if (options.maxTokenLen !== undefined && options.maxTokenLen > 0 && options.dropOverLength) {
    const longest = Math.max(...group.tokens.map((t) => t.length));
    if (longest >= options.maxTokenLen) {
      return { send: false, reason: `a sequence has ${longest} tokens, at or over the trainer's max_token_len ${options.maxTokenLen}` };
    }
  }
  if (options.includeMessages && (group.messages === null || group.messages === undefined) && options.decode) {
    group.messages = group.tokens.map((ids) => [{ role: "user" as const, content: options.decode!(ids) }]);
  }
  return { send: true, group };
}
