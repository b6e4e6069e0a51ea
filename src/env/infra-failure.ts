/**
 * Infrastructure failures: a trajectory that did not get a fair run, so it has no score. A
 * zero written for it would be a wrong reward the trainer learns from ("fake zeros"), so
 * such a trajectory is never scored, written or sent; the summary counts it by cause.
 *
 * - `model`: the model server failed (after the client's retries);
 * - `slot_lost`: the trajectory's slot was lost more often than `slotLossRetries` allows;
 * - `reward`: the reward code threw or returned a non-finite number;
 * - `reward_tool`: a tool call the reward made through its ToolContext failed.
 */
export const INFRA_CAUSES = ["model", "slot_lost", "reward", "reward_tool"] as const;
export type InfraCause = (typeof INFRA_CAUSES)[number];

/**
 * What a group with an infra failure becomes: `drop` (default) drops the group and retries
 * its item (up to `infraRetries` times); `mask` keeps the group without the failed
 * trajectories; `fail` stops the run.
 */
export const INFRA_FAILURE_POLICIES = ["drop", "mask", "fail"] as const;
export type InfraFailurePolicy = (typeof INFRA_FAILURE_POLICIES)[number];

export interface InfraFailure {
  cause: InfraCause;
  message: string;
  trajectoryId?: string;
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
