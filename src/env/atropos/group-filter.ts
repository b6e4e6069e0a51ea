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

/** `fix`: the switch or change that lets such groups through, for the all-filtered warning. */
export type FilterOutcome = { send: true; group: ScoredDataGroup } | { send: false; reason: string; fix: string };

/** The five keys BaseEnv sets to explicit null when missing; other optional keys stay absent. */
const NULLED_KEYS = ["ref_logprobs", "overrides", "group_overrides", "distill_token_ids", "distill_logprobs"] as const;

/**
 * BaseEnv's `handle_send_to_api` steps, in order: size check, same-score skip, explicit
 * nulls, token-length filter, messages fill. Returns the group to send, or why it is skipped.
 */
export function filterGroupForSend(input: ScoredDataGroup, options: SendFilterOptions): FilterOutcome {
  const group: ScoredDataGroup = { ...input };
  if ("group_overrides" in group && group.group_overrides === null) {
    return { send: false, reason: "group_overrides is explicitly null (Atropos rejects it)", fix: "the env's scoring: omit group_overrides or give an object" };
  }
  const overrideSize = group.group_overrides?.["group_size"];
  const expected = typeof overrideSize === "number" ? overrideSize : options.groupSize;
  if (group.tokens.length !== expected) {
    return { send: false, reason: `group has ${group.tokens.length} sequences, expected ${expected}`, fix: "make the env return groupSize trajectories per group (or set group_overrides.group_size)" };
  }
  if (options.ensureScoresAreNotSame && group.scores.every((s) => s === group.scores[0])) {
    return {
      send: false,
      reason: `all ${group.scores.length} scores are equal (${group.scores[0]}): no learning signal (ensureScoresAreNotSame)`,
      fix: 'if equal scores are expected (an oracle policy, tasks too easy or too hard for the model), set "trainer": {"ensureScoresAreNotSame": false} in the env config (--config FILE); else vary the tasks or the sampling',
    };
  }
  for (const k of NULLED_KEYS) if (group[k] === undefined) (group as unknown as Record<string, unknown>)[k] = null;
  if (options.maxTokenLen !== undefined && options.maxTokenLen > 0 && options.dropOverLength) {
    const longest = Math.max(...group.tokens.map((t) => t.length));
    if (longest >= options.maxTokenLen) {
      return {
        send: false,
        reason: `a sequence has ${longest} tokens, at or over the trainer's max_token_len ${options.maxTokenLen}`,
        fix: 'shorter rollouts (--max-turns, the model\'s max tokens), a larger max_token_len on the trainer, or "trainer": {"dropGroupsOverTokenLength": false} in the env config',
      };
    }
  }
  if (options.includeMessages && (group.messages === null || group.messages === undefined) && options.decode) {
    group.messages = group.tokens.map((ids) => [{ role: "user" as const, content: options.decode!(ids) }]);
  }
  return { send: true, group };
}

/** Groups in a row that were all filtered before the run warns (again at 10x, 100x, ... that). */
export const FILTERED_WARNING_AFTER = 3;

/**
 * Watches delivery: a run whose groups are all being filtered sends nothing, and a trainer
 * then waits forever. After FILTERED_WARNING_AFTER filtered groups in a row (and at 10x,
 * 100x, ... as the streak goes on) `observe` returns one warning naming the reason and the
 * switch; a sent group ends the streak.
 */
export class FilteredStreak {
  private streak = 0;
  private nextWarning = FILTERED_WARNING_AFTER;

  observe(outcome: FilterOutcome | { send: false; reason: string; fix: string }): string | undefined {
    if (outcome.send) {
      this.streak = 0;
      this.nextWarning = FILTERED_WARNING_AFTER;
      return undefined;
    }
    this.streak++;
    if (this.streak < this.nextWarning) return undefined;
    this.nextWarning *= 10;
    return `the last ${this.streak} groups were all filtered, none delivered: ${outcome.reason}. Fix: ${outcome.fix}`;
  }
}
