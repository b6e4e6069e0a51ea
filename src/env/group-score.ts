import type { AgentResult } from "../agent/agent-loop.js";
import type { Logger } from "../observability/logger.js";
import type { InfraFailure } from "./infra-failure.js";
import { metricsProblem, type Metrics } from "./metrics.js";
import type { TrajectoryOutcome } from "./scored-group.js";
import { envFramesFirst } from "./env-stack.js";

/** One scored trajectory of a group, as the group-level scoring hook sees it. */
export interface GroupMember {
  trajectoryId: string;
  result: AgentResult;
  /** The trajectory's own score (computeReward / verifyAndScore). */
  score: number;
  /** What its own verification kept beside the score. */
  metadata: Record<string, unknown>;
  metrics: Metrics;
}

/**
 * What `AgentEnv.scoreGroup` returns: nothing (the own scores stand), the group's scores in
 * the members' order, or those and metrics of the whole group.
 */
export type GroupScore = number[] | { scores?: number[]; metrics?: Metrics } | undefined | void;

export type GroupScorer = (members: readonly GroupMember[]) => GroupScore | Promise<GroupScore>;

/**
 * Runs the env's group-level scoring over the trajectories that have a score (infra failures
 * never reach it: they have none). New scores replace the own ones (kept as `ownScore`). A
 * hook that throws, or answers with the wrong number of scores, a non-finite score or a bad
 * metric, leaves the group without a fair score: every member becomes an infra failure
 * (cause `reward`) and the group's `infraFailurePolicy` decides, as for a failed reward.
 */
export async function applyGroupScore(
  trajectories: readonly TrajectoryOutcome[],
  scorer: GroupScorer,
  log: Logger,
): Promise<{ metrics?: Metrics; failures: InfraFailure[] }> {
  if (trajectories.length === 0) return { failures: [] };
  const members: GroupMember[] = trajectories.map((t) => ({ trajectoryId: t.trajectoryId, result: t.result, score: t.score, metadata: t.scoreMetadata, metrics: t.metrics ?? {} }));
  let problem: string | undefined;
  let stack: string | undefined;
  let answer: GroupScore;
  try {
    answer = await scorer(members);
  } catch (err) {
    problem = `scoreGroup threw: ${err instanceof Error ? err.message : String(err)}`;
    stack = envFramesFirst(err);
  }
  const scores = Array.isArray(answer) ? answer : answer?.scores;
  const metrics = Array.isArray(answer) ? undefined : answer?.metrics;
  if (!problem && scores !== undefined) {
    if (!Array.isArray(scores) || scores.length !== trajectories.length) problem = `scoreGroup returned ${Array.isArray(scores) ? scores.length : typeof scores} scores for a group of ${trajectories.length}`;
    else {
      const bad = scores.findIndex((s) => typeof s !== "number" || !Number.isFinite(s));
      if (bad >= 0) problem = `scoreGroup's score ${bad} is ${String(scores[bad])}, not a finite number`;
    }
  }
  if (!problem && metrics !== undefined) {
    const p = metricsProblem(metrics);
    if (p) problem = `scoreGroup's metrics: ${p}`;
  }
  if (problem) {
    log.warn({ problem, ...(stack ? { stack } : {}) }, "the group's scoring failed; its trajectories are not scored");
    const failures = trajectories.map((t): InfraFailure => ({ cause: "reward", message: problem!, trajectoryId: t.trajectoryId, stage: "reward", ...(stack ? { stack } : {}) }));
    trajectories.forEach((t, i) => {
      t.rewardError = problem;
      t.infraFailure = failures[i]!;
    });
    return { failures };
  }
  if (scores) {
    trajectories.forEach((t, i) => {
      if (scores[i] === t.score) return;
      t.ownScore = t.score;
      t.score = scores[i]!;
    });
  }
  return metrics && Object.keys(metrics).length > 0 ? { metrics: { ...metrics }, failures: [] } : { failures: [] };
}
