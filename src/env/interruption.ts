import { EnvError } from "./errors.js";
import type { InfraCause, InfraFailure } from "./infra-failure.js";
import type { TrajectoryOutcome } from "./scored-group.js";

/**
 * What a run stopped by a signal (Ctrl-C) had done in the groups it cut: without it the
 * partial summary said "infra failures 0, tool calls 0" although both had happened.
 */

/** A trajectory's tool calls as they happen: those that ran, and those the signal cut. */
export class CallTally {
  ran = 0;
  private cutShort = 0;
  private running = 0;

  /** Calls cut by the signal: ended by it ("cancelled while running") or still running. */
  get cut(): number {
    return this.cutShort + this.running;
  }

  /** Counts one call: ran, unless the signal had fired by the time it returned. */
  async count<T>(call: () => Promise<T>, signal: AbortSignal | undefined): Promise<T> {
    this.running++;
    try {
      const result = await call();
      if (signal?.aborted) this.cutShort++;
      else this.ran++;
      return result;
    } finally {
      this.running--;
    }
  }
}

/** A trajectory cut by the run's signal: the tool calls it had run, and those it was running. */
export class TrajectoryInterruptedError extends EnvError {
  override name = "TrajectoryInterruptedError";
  constructor(
    readonly toolCallsRan: number,
    readonly toolCallsCut: number,
    options?: { cause?: unknown },
  ) {
    super(`trajectory interrupted after ${toolCallsRan} tool calls (${toolCallsCut} cut while running)`, options);
  }
}

/** What an interrupted group had done: counted in the partial summary, never written. */
export interface GroupInterruption {
  /** Trajectories that finished before the signal (their work counts; they are not written). */
  finished: TrajectoryOutcome[];
  /** Trajectories cut by the signal. */
  cut: number;
  toolCallsRan: number;
  toolCallsCut: number;
  /** Infra failures of this group so far (dropped tries and finished trajectories). */
  infraFailures: InfraFailure[];
  droppedAttemptCauses: InfraCause[];
}

/** A group cut by the run's signal, with what it had done (see GroupInterruption). */
export class GroupInterruptedError extends EnvError {
  override name = "GroupInterruptedError";
  constructor(
    readonly interruption: GroupInterruption,
    options?: { cause?: unknown },
  ) {
    super(`group interrupted: ${interruption.finished.length} trajectories finished, ${interruption.cut} cut`, options);
  }
}
