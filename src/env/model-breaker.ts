import type { Logger } from "../observability/logger.js";
import type { TrajectoryOutcome } from "./scored-group.js";

export interface ModelBreakerOptions {
  /** Trajectories in a row whose model calls failed (after the client's retries) before the model server is re-probed. */
  failures: number;
  /** The model server's check (GET /models, as before the run); throws when it does not answer. */
  probe: () => Promise<void>;
  /** The model server's URL, for the reason. */
  url: string;
  log?: Logger;
}

/**
 * A run's breaker for a dead model server (`process` and `evaluate`; `serve` stops after ten
 * failed groups in a row): after `failures` trajectories in a row lost their model calls, it
 * re-probes the model server; a probe that fails trips it (the server is gone), and so does a
 * second such streak after a probe that passed (the server lists its models but cannot
 * complete). Tripped, its `signal` aborts: the run stops taking items, its summary says
 * `reason`, and the command exits 1. A trajectory whose model calls all succeeded ends a streak.
 */
export class ModelBreaker {
  private readonly controller = new AbortController();
  private streak = 0;
  private passedProbes = 0;
  private probing = false;
  private lastFailure = "";
  /** Why the breaker tripped, once it has. */
  reason: string | undefined;

  constructor(private readonly options: ModelBreakerOptions) {}

  /** Aborts when the breaker trips. */
  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** One finished trajectory: its model calls failed (infra cause `model`), or they did not. */
  observe(t: Pick<TrajectoryOutcome, "infraFailure">): void {
    if (this.reason) return;
    if (t.infraFailure?.cause !== "model") {
      this.streak = 0;
      this.passedProbes = 0;
      return;
    }
    this.streak++;
    this.lastFailure = t.infraFailure.message;
    if (this.streak >= this.options.failures && !this.probing) void this.reprobe();
  }

  private async reprobe(): Promise<void> {
    this.probing = true;
    const streak = this.streak;
    try {
      await this.options.probe();
      this.passedProbes++;
      if (this.passedProbes >= 2) {
        this.trip(`the model server at ${this.options.url} lists its models, but ${streak} trajectories in a row failed their model calls, twice in a row (last: ${this.lastFailure})`);
        return;
      }
      this.options.log?.warn({ streak }, `${streak} trajectories in a row failed their model calls, but the model server at ${this.options.url} answers a re-probe: going on`);
      this.streak = 0;
    } catch (err) {
      this.trip(`the model server at ${this.options.url} stopped answering: ${streak} trajectories in a row failed their model calls (last: ${this.lastFailure}); re-probed: ${(err as Error).message}`);
    } finally {
      this.probing = false;
    }
  }

  private trip(reason: string): void {
    this.reason = reason;
    this.options.log?.error({ reason }, "the run stops: its model server failed");
    this.controller.abort(new Error(reason));
  }
}
