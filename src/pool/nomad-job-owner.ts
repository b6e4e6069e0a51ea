import type { Logger } from "pino";
import type { NomadClient } from "../nomad/client.js";
import { NomadNotFoundError } from "../nomad/errors.js";
import { SANDBOX_GROUP } from "../nomad/job.js";
import { HEARTBEAT_INTERVAL_MS, HEARTBEAT_MESSAGE, META_RUN, OWNER_STALE_MS, ownerLiveness } from "../nomad/ownership.js";
import { ProvisionerError } from "./provisioner.js";

export interface NomadJobOwnerOptions {
  client: NomadClient;
  jobId: string;
  runId: string;
  logger: Logger;
  signal: AbortSignal;
  stopping(): boolean;
  /** shareJob or purgeJobOnStart: a job whose owner is gone may be taken over (or purged). */
  mayTakeOver: boolean;
  heartbeatMs?: number;
  ownerStaleMs?: number;
  /** The job is gone or another run took it (kind job-gone / job-taken), reported once. */
  lost(error: ProvisionerError): void;
}

/**
 * One run's ownership of its Nomad job (nomad/ownership.ts says how ownership is recorded):
 * refuses another live run's job at start, records the heartbeat while running, and notices
 * when the job is gone or taken over, after which nothing more is done to it.
 */
export class NomadJobOwner {
  /** Set once the job is gone or taken: no scale call, no stop. */
  lost: ProvisionerError | undefined;
  private timer: NodeJS.Timeout | undefined;
  private checking: Promise<void> | undefined;
  private warnedUnmarked = false;

  constructor(private readonly o: NomadJobOwnerOptions) {}

  /**
   * An existing job of another run: refused while its owner is alive (whatever the options:
   * attaching would scale, lend and stop that run's containers), and, once its owner is gone,
   * taken over only with shareJob (or purged first with purgeJobOnStart).
   */
  async refuseOthersJob(meta: Record<string, string> | null | undefined): Promise<void> {
    const { jobId } = this.o;
    const owner = meta?.[META_RUN];
    if (owner !== undefined && owner === this.o.runId) return; // our own (a restarted run with the same runId)
    const scale = await this.o.client.scaleStatus(jobId, { signal: this.o.signal });
    const liveness = ownerLiveness(meta, scale, SANDBOX_GROUP, { staleMs: this.o.ownerStaleMs ?? OWNER_STALE_MS });
    const who = owner ? `run ${owner}` : "a slotpool run that named no run id";
    if (liveness.alive) {
      throw new ProvisionerError(
        `Nomad job '${jobId}' belongs to ${who}, which is alive (heard from ${Math.round((liveness.lastSeenAgoMs ?? 0) / 1000)} s ago): ` +
          "a pool never attaches to, scales, lends the slots of or stops another live run's job. Leave the job id unset (pool.nomad.jobId; each run then gets its own job), or choose another one",
        "job-owned",
      );
    }
    if (!this.o.mayTakeOver) {
      throw new ProvisionerError(
        `Nomad job '${jobId}' was left behind by ${who} (not heard from for ${liveness.lastSeenAgoMs === undefined ? "ever" : `${Math.round(liveness.lastSeenAgoMs / 1000)} s`}). ` +
          "Take it over with pool.nomad.shareJob = true (the id is shared by successive runs), start afresh with purgeJobOnStart, stop it with 'slotpool jobs prune', or leave the job id unset",
        "job-owned",
      );
    }
  }

  beginHeartbeat(): void {
    // A timer's promise has no caller to reject to: whatever escapes is logged, never an unhandled rejection.
    this.timer = setInterval(() => {
      this.heartbeat().catch((err: unknown) => this.o.logger.error({ job: this.o.jobId, err: errorMessage(err) }, "nomad provisioner: the owner heartbeat failed"));
    }, this.o.heartbeatMs ?? HEARTBEAT_INTERVAL_MS);
    this.timer.unref();
  }

  stop(): void {
    clearInterval(this.timer);
  }

  /** Whether the job is still there and ours (read just before stopping it). */
  async stillOurs(): Promise<boolean> {
    const job = await this.o.client.readJob(this.o.jobId);
    if (!job) return false;
    const owner = job.Meta?.[META_RUN];
    if (owner === this.o.runId || owner === undefined) return true; // unmarked: re-registered by hand, no other owner
    this.o.logger.warn({ job: this.o.jobId, run: this.o.runId, owner }, "nomad provisioner: the job belongs to another run now; leaving it running");
    return false;
  }

  /** Records the owner heartbeat, after checking the job is still there and still ours. */
  private async heartbeat(): Promise<void> {
    if (this.o.stopping() || this.lost) return;
    await this.checkJob();
    if (this.o.stopping() || this.lost) return;
    try {
      await this.o.client.recordScaleEvent(this.o.jobId, SANDBOX_GROUP, { message: HEARTBEAT_MESSAGE, meta: { [META_RUN]: this.o.runId }, signal: this.o.signal });
    } catch (err) {
      if (this.o.stopping()) return;
      if (err instanceof NomadNotFoundError) await this.checkJob();
      else this.o.logger.warn({ job: this.o.jobId, err: errorMessage(err) }, "nomad provisioner: recording the owner heartbeat failed; trying again at the next one");
    }
  }

  /**
   * Is the job still there, running, and ours? If not, says so once (kind job-gone or
   * job-taken, which fails the pool) and does nothing more to it: no scale calls, no stop.
   */
  checkJob(): Promise<void> {
    this.checking ??= this.check().finally(() => {
      this.checking = undefined;
    });
    return this.checking;
  }

  private async check(): Promise<void> {
    const { jobId } = this.o;
    let job;
    try {
      job = await this.o.client.readJob(jobId, { signal: this.o.signal });
    } catch (err) {
      if (!this.o.stopping()) this.o.logger.warn({ job: jobId, err: errorMessage(err) }, "nomad provisioner: cannot read the job; checking again later");
      return;
    }
    if (this.o.stopping() || this.lost) return;
    let lost: ProvisionerError | undefined;
    if (!job) {
      lost = new ProvisionerError(`Nomad job '${jobId}' of this run is gone (purged by someone else, or garbage-collected): the pool stops. Nothing recreates it; start the run again`, "job-gone");
    } else if (job.Stop) {
      lost = new ProvisionerError(`Nomad job '${jobId}' of this run was stopped from outside (e.g. 'nomad job stop'): the pool stops. Start the run again`, "job-gone");
    } else if (job.Meta?.[META_RUN] === undefined) {
      // Re-registered without the owner mark (an operator's 'nomad job run' of its own spec):
      // no other run claims it, so it stays this run's; the heartbeat keeps naming the run.
      if (!this.warnedUnmarked) this.o.logger.warn({ job: jobId, run: this.o.runId }, "nomad provisioner: the job was re-registered without slotpool's owner mark (Meta slotpool.run); still treating it as this run's");
      this.warnedUnmarked = true;
    } else if (job.Meta[META_RUN] !== this.o.runId) {
      lost = new ProvisionerError(`Nomad job '${jobId}' was taken over by run ${job.Meta[META_RUN]} (this run's heartbeat was missed for too long): the pool stops and leaves the job to its new owner`, "job-taken");
    }
    if (!lost) return;
    this.lost = lost;
    this.stop();
    this.o.logger.error({ job: jobId, kind: lost.kind, err: lost.message }, "nomad provisioner: lost its job");
    try {
      this.o.lost(lost);
    } catch (err) {
      // The pool's handlers (its 'failed' listeners) threw: checkJob() is awaited by timers and watches with no caller to tell.
      this.o.logger.error({ job: jobId, err: errorMessage(err) }, "nomad provisioner: reporting the lost job failed");
    }
  }
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
