import type { Logger } from "../observability/logger.js";
import type { GroupTools } from "../tools/distributions.js";
import type { AgentEnvConfig } from "./config.js";
import { TrajectoryFailedError } from "./errors.js";
import { TrajectoryInfraError, type InfraCause, type InfraFailure } from "./infra-failure.js";
import { CallTally, GroupInterruptedError, TrajectoryInterruptedError } from "./interruption.js";
import type { Metrics } from "./metrics.js";
import { buildScoredGroup, type GroupOutcome, type TrajectoryOutcome } from "./scored-group.js";
import { failedFromError, failedFromOutcome, type FailedTrajectory } from "./failed-trajectories.js";

export interface GroupCollectorHost {
  config: AgentEnvConfig;
  log: Logger;
  /** One trajectory of the item, start to finish, in its own slot (AgentEnv.collectTrajectory), counting its tool calls in `calls`. */
  runTrajectory: (calls: CallTally) => Promise<TrajectoryOutcome>;
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
  /** Tool calls that ran in the round's trajectories that threw (the finished ones' are in their results). */
  thrownToolCalls: number;
}

const toolCallsOf = (ts: readonly TrajectoryOutcome[]) => ts.reduce((n, t) => n + t.result.toolCalls.length, 0);

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
  // Tool calls of trajectories that are not the outcome's own: dropped tries, infra failures, those that threw.
  const counted = { unscoredToolCalls: 0 };
  const common = { item, toolsets: groupTools.toolsets, infraFailures, droppedAttemptCauses, failed };
  const unscored = (round: GroupRound, kept: readonly TrajectoryOutcome[]) => counted.unscoredToolCalls + round.thrownToolCalls + toolCallsOf(round.done) - toolCallsOf(kept);
  for (let attempt = 0; ; attempt++) {
    const round = await collectRound(host, attempt + 1);
    if (host.signal?.aborted) {
      // Stopped by the run's signal: nothing is scored or written, but what ran is told.
      infraFailures.push(...round.infra);
      const { trajectories: cut, toolCallsRan, toolCallsCut } = round.cut;
      const ran = toolCallsRan + counted.unscoredToolCalls + round.thrownToolCalls;
      throw new GroupInterruptedError({ finished: round.done, cut, toolCallsRan: ran, toolCallsCut, infraFailures, droppedAttemptCauses }, { cause: host.signal.reason });
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
      return { ok: false, kind: "error", fatal: false, reason, trajectories: scored, unfinished: round.unfinished, unscoredToolCalls: unscored(round, scored), ...common };
    }
    if (round.infra.length === 0 || (policy === "mask" && scored.length > 0)) {
      const group = buildScoredGroup(scored, {
        groupSize,
        includeMessages: host.config.trainer.includeMessages,
        generationParams: { temperature: host.config.model.temperature, max_tokens: host.config.model.maxTokens },
      });
      return { ok: true, group, trajectories: scored, masked: round.infra.length, droppedAttempts: attempt, unscoredToolCalls: unscored(round, scored), ...(metrics ? { metrics } : {}), ...common };
    }
    droppedAttemptCauses.push(round.infra[0]!.cause);
    if (!(policy === "drop" && attempt < infraRetries)) {
      const reason = policy === "fail" ? `${describeInfra(round, groupSize)} (infraFailurePolicy "fail": the run stops)` : `${describeInfra(round, groupSize)}; dropped after ${attempt + 1} tries`;
      host.log.error({ reason }, "group dropped");
      return { ok: false, kind: "infra", fatal: policy === "fail", reason, trajectories: scored, unfinished: round.unfinished, unscoredToolCalls: unscored(round, scored), ...common };
    }
    counted.unscoredToolCalls = unscored(round, []);
    host.log.warn({ attempt: attempt + 1, infraRetries }, `${describeInfra(round, groupSize)}; the group is dropped and its item tried again`);
  }
}

/** "2 of 4 trajectories had an infrastructure failure: model: …" (each distinct cause and message once). */
function describeInfra(round: GroupRound, groupSize: number): string {
  return `${round.infra.length} of ${groupSize} trajectories had an infrastructure failure: ${[...new Set(round.infra.map((f) => `${f.cause}: ${f.message}`))].join(" | ")}`;
}

async function collectRound(host: GroupCollectorHost, groupTry: number): Promise<GroupRound> {
  const tallies = Array.from({ length: host.config.groupSize }, () => new CallTally());
  const settled = await Promise.allSettled(tallies.map((calls) => host.runTrajectory(calls)));
  const round: GroupRound = { done: [], infra: [], errors: [], unfinished: { slotLosses: 0, retries: 0 }, cut: { trajectories: 0, toolCallsRan: 0, toolCallsCut: 0 }, thrown: [], thrownToolCalls: 0 };
  for (const [i, s] of settled.entries()) {
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
    round.thrownToolCalls += tallies[i]!.ran;
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
