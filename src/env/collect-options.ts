import type { AgentPolicy } from "../agent/policy.js";
import type { InfraFailure } from "./infra-failure.js";
import type { CallTally } from "./interruption.js";

/** How one trajectory (or group) is collected: the run's signal, a policy of the caller's, who is told of each finished trajectory (a run's model breaker). */
export interface CollectOptions {
  signal?: AbortSignal;
  policy?: AgentPolicy;
  /** Counts the trajectory's tool calls as they run (the group collector's, for trajectories that fail). */
  calls?: CallTally;
  /** Each finished trajectory's infra failure, if it had one (a branching group's, at the group's end). */
  onTrajectoryEnd?: (outcome: { infraFailure?: InfraFailure | undefined }) => void;
}
