import type { Logger } from "../observability/logger.js";
import type { GroupTools } from "../tools/distributions.js";
import type { AgentEnvConfig } from "./config.js";
import { TrajectoryFailedError } from "./errors.js";
import { TrajectoryInfraError, type InfraCause, type InfraFailure } from "./infra-failure.js";
import { GroupInterruptedError, TrajectoryInterruptedError } from "./interruption.js";
import type { Metrics } from "./metrics.js";
import { buildScoredGroup, type GroupOutcome, type TrajectoryOutcome } from "./scored-group.js";
import { failedFromError, failedFromOutcome, type FailedTrajectory } from "./failed-trajectories.js";

export interface GroupCollectorHost {
  config: AgentEnvConfig;
  log: Logger;
  /** One trajectory of the item, start to finish, in its own slot (AgentEnv.collectTrajectory). */
  runTrajectory: () => Promise<TrajectoryOutcome>;
  /**
   * The env's group-level scoring (AgentEnv.scoreGroup through applyGroupScore): may replace
   * the scores; the infra failures it returns mean the group has no fair score.
   */
  scoreGroup?: (trajectories: TrajectoryOutcome[]) => Promise<{ metrics?: Metrics; failures: InfraFailure[] }>;
  signal?: AbortSignal;
}

/** One try at a group: what finished, the infra failures among it (lost slots included), other errors. */
interface GroupRound {
  done: TrajectoryOutcome[];
  infra: InfraFailure[];
  errors: string[];
  unfinished: { slotLosses: number; retries: number };
  /** Trajectories cut by the run's signal, and their tool calls. */
  cut: { trajectories: number; toolCallsRan: number; toolCallsCut: number };
  /** Trajectories of the round that ended in an error (thrown): their records for the sidecar. */
  thrown: FailedTrajectory[];
}

/**
 * The group of one item: `groupSize` trajectories at once. A trajectory with an
 * infrastructure failure is never part of it; by `infraFailurePolicy` the group is dropped
 * and its item tried again (up to `infraRetries` more times), or it goes on without that
 * trajectory (`mask`), or the run stops (`fail`, the outcome is `fatal`). A trajectory that
 * failed otherwise (setup threw) fails the group with the reason.
 */
export async function collectGroup<Item>(item: Item, groupTools: GroupTools, host: GroupCollectorHost): Promise<GroupOutcome<Item>> {
  const { infraFailurePolicy: policy, infraRetries, groupSize } = host.config;
  const infraFailures: InfraFailure[] = [];
  const droppedAttemptCauses: InfraCause[] = [];
  const failed: FailedTrajectory[] = [];
  const common = { item, toolsets: groupTools.toolsets, infraFailures, droppedAttemptCauses, failed };
  for (let attempt = 0; ; attempt++) {
    const round = await collectRound(host, attempt + 1);
    if (host.signal?.aborted) {
      // Stopped by the run's signal: nothing is scored or written, but what ran is told.
      infraFailures.push(...round.infra);
      const { trajectories: cut, toolCallsRan, toolCallsCut } = round.cut;
      throw new GroupInterruptedError({ finished: round.done, cut, toolCallsRan, toolCallsCut, infraFailures, droppedAttemptCauses }, { cause: host.signal.reason });
    }
    let scored = round.done.filter((t) => !t.infraFailure);
    // Group scoring only for a group that would be delivered: its own scores all stand.
    let metrics: Metrics | undefined;
    if (host.scoreGroup && round.errors.length === 0 && scored.length > 0 && (round.infra.length === 0 || policy === "mask")) {
      const g = await host.scoreGroup(scored);
      round.infra.push(...g.failures);
      metrics = g.metrics;
      scored = scored.filter((t) => !t.infraFailure);
    }
    infraFailures.push(...round.infra);
    // Every unscored trajectory of this try, for the run's sidecar (never the training data).
    failed.push(...round.thrown, ...round.done.flatMap((t) => failedFromOutcome(t, attempt + 1) ?? []));
    if (round.errors.length > 0) {
      const reason = `${round.errors.length} of ${groupSize} trajectories failed: ${[...new Set(round.errors)].join(" | ")}`;
      // Where the env's hook threw (setupWorkspace, buildTask, …), its own frames first.
      const stack = round.thrown.find((t) => t.cause === "error" && t.stack)?.stack;
      host.log.error({ reason, ...(stack ? { stack } : {}) }, "group failed");
      return { ok: false, kind: "error", fatal: false, reason, trajectories: scored, unfinished: round.unfinished, ...common };
    }
    if (round.infra.length === 0 || (policy === "mask" && scored.length > 0)) {
      const group = buildScoredGroup(scored, {
        groupSize,
        includeMessages: host.config.trainer.includeMessages,
        generationParams: { temperature: host.config.model.temperature, max_tokens: host.config.model.maxTokens },
      });
      return { ok: true, group, trajectories: scored, masked: round.infra.length, droppedAttempts: attempt, ...(metrics ? { metrics } : {}), ...common };
    }
    droppedAttemptCauses.push(round.infra[0]!.cause);
    const what = `${round.infra.length} of ${groupSize} trajectories had an infrastructure failure: ${[...new Set(round.infra.map((f) => `${f.cause}: ${f.message}`))].join(" | ")}`;
    if (policy === "drop" && attempt < infraRetries) {
      host.log.warn({ attempt: attempt + 1, infraRetries }, `${what}; the group is dropped and its item tried again`);
      continue;
    }
    const reason = policy === "fail" ? `${what} (infraFailurePolicy "fail": the run stops)` : `${what}; dropped after ${attempt + 1} tries`;
    host.log.error({ reason }, "group dropped");
    return { ok: false, kind: "infra", fatal: policy === "fail", reason, trajectories: scored, unfinished: round.unfinished, ...common };
  }
}

async function collectRound(host: GroupCollectorHost, groupTry: number): Promise<GroupRound> {
  const settled = await Promise.allSettled(Array.from({ length: host.config.groupSize }, () => host.runTrajectory()));
  const round: GroupRound = { done: [], infra: [], errors: [], unfinished: { slotLosses: 0, retries: 0 }, cut: { trajectories: 0, toolCallsRan: 0, toolCallsCut: 0 }, thrown: [] };
  for (const s of settled) {
    if (s.status === "fulfilled") {
      round.done.push(s.value);
      if (s.value.infraFailure) round.infra.push(s.value.infraFailure);
      continue;
    }
    const err = s.reason as unknown;
    if (host.signal?.aborted && !(err instanceof TrajectoryInfraError)) {
      round.cut.trajectories++;
      if (err instanceof TrajectoryInterruptedError) {
        round.cut.toolCallsRan += err.toolCallsRan;
        round.cut.toolCallsCut += err.toolCallsCut;
      }
      continue;
    }
    const message = err instanceof Error ? err.message : String(err);
    round.thrown.push(failedFromError(err, groupTry));
    if (err instanceof TrajectoryFailedError) {
      round.unfinished.slotLosses += err.attempts;
      round.unfinished.retries += err.attempts - 1;
    }
    // Slots lost more often than slotLossRetries allows, or a tool call the infrastructure cut
    // off (setupWorkspace included): the infrastructure's failure, not the env's.
    if (err instanceof TrajectoryInfraError) round.infra.push(err.failure);
    else if (err instanceof TrajectoryFailedError && err.slotLost) round.infra.push({ cause: "slot_lost", message });
    else round.errors.push(message);
  }
  return round;
}
