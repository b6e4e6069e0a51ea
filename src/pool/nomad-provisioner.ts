// Longer than 500 lines on purpose: what is left is one job's lifecycle and the allocation watcher
// over one tracked-allocation map; placement (nomad-placement.ts) and ownership (nomad-job-owner.ts) are apart.
import { randomBytes } from "node:crypto";
import type { Logger } from "pino";
import { silentLogger } from "../observability/logger.js";
import {
  allocationHttpAddress,
  allocationNameIndex,
  isAllocationRunning,
  isAllocationTerminal,
  latestTaskEvents,
} from "../nomad/allocation.js";
import { NomadClient } from "../nomad/client.js";
import { sleep } from "../nomad/retry.js";
import { NomadAclDeniedError, NomadError, NomadNotFoundError, NomadScaleBlockedError, NomadUnreachableError } from "../nomad/errors.js";
import { DEFAULT_JOB_ID, META_CREATED, META_SLOTPOOL, SANDBOX_GROUP, SANDBOX_TASK, sandboxJob, type SandboxJobOptions } from "../nomad/job.js";
import { META_RUN } from "../nomad/ownership.js";
import { NomadJobOwner } from "./nomad-job-owner.js";
import type { AllocListStub, Evaluation, Job } from "../nomad/schemas.js";
import { describePlacementFailure, placementAdvice, waitForDeploymentEnd, withAvoidedNodes } from "./nomad-placement.js";
import { ProvisionerError, type Provisioner, type ProvisionerEvents } from "./provisioner.js";

export { describePlacementFailure } from "./nomad-placement.js";

/**
 * Runs containers as allocations of one Nomad service job (task group `sandbox`). Submits
 * the job (or purges it first), scales the group's count, and watches the job's allocations
 * with blocking queries, so a started, killed or rescheduled allocation is seen as soon as
 * Nomad records it. Nomad itself replaces failed allocations; scale-down stops the highest
 * name indexes, which is what the pool's drain relies on.
 */
export interface NomadProvisionerOptions {
  slotsPerContainer: number;
  /** A client of your own; default `NomadClient.fromEnv()` (NOMAD_ADDR, NOMAD_TOKEN, ...). */
  client?: NomadClient;
  /** Job settings (jobId, image, driver, cpu, memoryMb, datacenters, ...); `slots`/`count`/`token` are the pool's. */
  job?: Omit<SandboxJobOptions, "slots" | "count" | "token">;
  /**
   * Bearer token of the sandbox servers. Default: the running job's own (so re-attaching does
   * not replace its allocations), else a fresh random one.
   */
  token?: string;
  /** Purge the job before submitting it: recovers from a previous run's restart backoff (seed: purge_job_on_start). Never a job whose owner is alive. */
  purgeJobOnStart?: boolean;
  /**
   * This run's id, recorded in the job's Meta (`slotpool.run`) as its owner. Default: a fresh
   * random one. Without `job.jobId` the job is `slotpool-sandbox-<runId>`: each run its own.
   */
  runId?: string;
  /**
   * An explicit `job.jobId` shared by successive runs: a run may take over the job a previous
   * run left behind once that owner is gone (no heartbeat for `ownerStaleMs`). Never a job
   * whose owner is alive, with or without this. Default false: another run's job is refused.
   */
  shareJob?: boolean;
  /** How often the owner records its heartbeat (default 10 s; nomad/ownership.ts). */
  heartbeatMs?: number;
  /** An owner not heard from for this long is gone (default 45 s). */
  ownerStaleMs?: number;
  /** How long one blocking query may wait (default 30 s). */
  blockingWaitMs?: number;
  /**
   * How long a scale call refused with "job scaling blocked due to active deployment" waits
   * for that deployment to end before it fails (default 120 s; the pool then retries it).
   */
  scaleBlockedWaitMs?: number;
  /**
   * How allocation changes are seen: "blocking" (default) re-lists the job's allocations with
   * blocking queries; "events" lists once, then follows /v1/event/stream (topic
   * Allocation:<job>), re-listing whenever the stream drops.
   */
  watch?: "blocking" | "events";
  logger?: Logger;
}

interface TrackedAllocation {
  /** Nomad's allocation ID (for API calls). */
  allocId: string;
  /**
   * The container's id in the pool: the allocation ID, plus `/restart-N` after the task
   * restarted in place (a new server process: its slots' processes and sessions are gone).
   */
  id: string;
  index: number;
  name: string;
  state: "starting" | "up" | "gone";
  reading: boolean;
  restarts: number;
}

export class NomadProvisioner implements Provisioner {
  readonly kind = "nomad";
  get slotsPerContainer(): number {
    return this.options.slotsPerContainer;
  }
  readonly jobId: string;
  /** The run that owns the job this provisioner submits (Meta slotpool.run). */
  readonly runId: string;
  private readonly client: NomadClient;
  private readonly ownsClient: boolean;
  private readonly options: NomadProvisionerOptions;
  private readonly logger: Logger;
  private readonly tracked = new Map<string, TrackedAllocation>();
  /** Allocation or evaluation ids already reported as problems (report each once). */
  private readonly reported = new Set<string>();
  private events: ProvisionerEvents | undefined;
  private token: string | undefined;
  private target = 0;
  private stopping = false;
  /** The job was submitted (or found running): stop() must stop it. */
  private submitted = false;
  private readonly abort = new AbortController();
  private watcher: Promise<void> | undefined;
  private lastPlacementCheck = 0;
  private failedAllocations = 0;
  /** Ownership of the job: refusal of others' jobs, the heartbeat, noticing the job is lost. */
  private readonly owner: NomadJobOwner;
  /** The job as submitted: re-registered unchanged but for the avoided nodes (nomad-placement.ts). */
  private spec: ReturnType<typeof sandboxJob> | undefined;

  constructor(options: NomadProvisionerOptions) {
    if (!Number.isInteger(options.slotsPerContainer) || options.slotsPerContainer < 1) {
      throw new ProvisionerError(`NomadProvisioner: slotsPerContainer must be a whole number ≥ 1, got ${options.slotsPerContainer}`, "config");
    }
    this.options = options;
    this.logger = options.logger ?? silentLogger();
    // The job's namespace is the one every call must name (else NOMAD_NAMESPACE, else "default").
    this.client = options.client ?? NomadClient.fromEnv({ logger: this.logger, ...(options.job?.namespace ? { namespace: options.job.namespace } : {}) });
    this.ownsClient = !options.client;
    this.runId = options.runId ?? randomBytes(4).toString("hex");
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(this.runId)) {
      throw new ProvisionerError(`NomadProvisioner: runId must be 1-64 letters, digits, '.', '_' or '-', got '${this.runId}'`, "config");
    }
    // Validates the job options now, so a bad image or job ID fails at construction.
    this.jobId = (sandboxJob({ ...this.jobOptions(), slots: options.slotsPerContainer }) as { ID: string }).ID;
    this.owner = new NomadJobOwner({
      client: this.client,
      jobId: this.jobId,
      runId: this.runId,
      logger: this.logger,
      signal: this.abort.signal,
      stopping: () => this.stopping,
      mayTakeOver: Boolean(options.shareJob || options.purgeJobOnStart),
      ...(options.heartbeatMs !== undefined ? { heartbeatMs: options.heartbeatMs } : {}),
      ...(options.ownerStaleMs !== undefined ? { ownerStaleMs: options.ownerStaleMs } : {}),
      lost: (error) => this.events?.problem(error),
    });
  }

  async start(events: ProvisionerEvents, initialCount: number): Promise<void> {
    if (this.events) throw new ProvisionerError("NomadProvisioner.start() called twice", "other");
    this.events = events;
    this.target = initialCount;
    try {
      await this.client.leader({ signal: this.abort.signal });
      let existing = await this.client.readJob(this.jobId, { signal: this.abort.signal });
      if (existing && !existing.Stop) {
        if (existing.Meta?.[META_SLOTPOOL] !== "true") {
          throw new ProvisionerError(
            `Nomad job '${this.jobId}' exists and is not a slotpool job (its Meta has no ${META_SLOTPOOL}="true"); ` +
              "choose another job ID or stop that job",
            "config",
          );
        }
        await this.owner.refuseOthersJob(existing.Meta);
      }
      if (this.options.purgeJobOnStart) {
        this.submitted = true; // a half-done purge is finished by stop()
        await this.purgeJob();
        existing = null;
      }
      const running = existing !== null && !existing.Stop ? existing : undefined;
      this.token = this.options.token ?? (running ? jobToken(running) : undefined) ?? randomBytes(24).toString("base64url");
      const spec = sandboxJob({
        ...this.jobOptions(),
        slots: this.options.slotsPerContainer,
        count: initialCount,
        token: this.token,
        ...(running?.Meta?.[META_CREATED] ? { created: running.Meta[META_CREATED] } : {}),
      });
      this.submitted = true;
      this.spec = spec;
      if (running) {
        // Keep the running count (PreserveCounts), then set ours with the scale endpoint.
        await this.client.registerJob(spec, { preserveCounts: true, signal: this.abort.signal });
        const count = running.TaskGroups?.find((g) => g.Name === SANDBOX_GROUP)?.Count ?? initialCount;
        if (count !== initialCount) {
          await this.client.scaleTaskGroup(this.jobId, SANDBOX_GROUP, initialCount, { message: "slotpool: pool started", signal: this.abort.signal });
        }
        this.logger.info({ job: this.jobId, run: this.runId, previousOwner: running.Meta?.[META_RUN], previousCount: count, count: initialCount }, "nomad provisioner: took over the running job (its owner is gone)");
      } else {
        await this.client.registerJob(spec, { signal: this.abort.signal });
        this.logger.info({ job: this.jobId, run: this.runId, count: initialCount }, "nomad provisioner: job submitted");
      }
    } catch (err) {
      throw toProvisionerError(err, `starting the sandbox job '${this.jobId}'`);
    }
    this.watcher = this.options.watch === "events" ? this.watchEvents() : this.watch();
    this.owner.beginHeartbeat();
  }

  /** The job settings, with this run as owner and, unless one was given, a job id of its own. */
  private jobOptions(): Omit<SandboxJobOptions, "slots" | "count" | "token"> {
    const job = this.options.job ?? {};
    return {
      ...job,
      jobId: job.jobId ?? `${DEFAULT_JOB_ID}-${this.runId}`,
      meta: { ...job.meta, [META_RUN]: this.runId },
    };
  }

  async setTargetCount(count: number, reason: string): Promise<void> {
    if (this.stopping) return;
    if (this.owner.lost) throw this.owner.lost;
    const message = `slotpool: ${reason}`.slice(0, 500);
    const deadline = performance.now() + (this.options.scaleBlockedWaitMs ?? 120_000);
    for (;;) {
      try {
        await this.client.scaleTaskGroup(this.jobId, SANDBOX_GROUP, count, { message, signal: this.abort.signal });
        break;
      } catch (err) {
        // A job version with an update strategy (someone's `nomad job run` of the job with an
        // `update` block; slotpool's own job has max_parallel = 0) has a deployment, and Nomad
        // refuses every scale until it ends. Wait for it, then scale again: Nomad 1.1 may have
        // stored the refused count already, but places nothing for it without a new call.
        if (err instanceof NomadNotFoundError) {
          await this.owner.checkJob();
          if (this.owner.lost) throw this.owner.lost;
        }
        if (!(err instanceof NomadScaleBlockedError) || performance.now() > deadline || this.stopping) throw err;
        await waitForDeploymentEnd(this.client, this.jobId, { deadline, signal: this.abort.signal, stopping: () => this.stopping, logger: this.logger });
      }
    }
    this.target = count;
    this.lastPlacementCheck = 0;
  }

  /**
   * Keeps placements off `nodes`: the job re-registered (counts preserved) with a
   * `${node.unique.id} != N` constraint per node, nothing else changed. Nomad 1.1.2 updates
   * allocations on other nodes in place (same allocation, no restart) and replaces only those
   * on the avoided nodes (`nomad job plan`: "1 create/destroy update, 2 in-place update").
   */
  async avoidNodes(nodes: readonly string[]): Promise<void> {
    if (this.stopping || !this.spec || this.owner.lost) return;
    try {
      await this.client.registerJob(withAvoidedNodes(this.spec, nodes), { preserveCounts: true, signal: this.abort.signal });
      this.logger.info({ job: this.jobId, avoid: nodes }, "nomad provisioner: placements kept off nodes");
    } catch (err) {
      throw toProvisionerError(err, `keeping the job '${this.jobId}' off nodes ${nodes.join(", ")}`);
    }
  }

  /**
   * A container that failed its health checks: its allocation is stopped through Nomad's API
   * (`POST /v1/allocation/:id/stop`), and Nomad places a replacement (the count is unchanged).
   * Left running, it would keep its node's resources and whatever state made it fail.
   */
  async replaceContainer(id: string, reason: string): Promise<void> {
    const t = this.tracked.get(id);
    try {
      const { EvalID } = await this.client.stopAllocation(t?.allocId ?? id, { signal: this.abort.signal });
      this.logger.warn({ alloc: t?.allocId ?? id, name: t?.name, reason, eval: EvalID }, "nomad provisioner: stopped an allocation the pool gave up on; Nomad replaces it");
    } catch (err) {
      throw toProvisionerError(err, `stopping allocation ${t?.name ?? id} (${reason})`);
    }
  }

  async describe(): Promise<string> {
    const lines: string[] = [`Nomad job '${this.jobId}' at ${this.client.address} (count ${this.target}):`];
    try {
      const { allocations } = await this.client.jobAllocations(this.jobId);
      for (const a of allocations.sort((x, y) => allocationNameIndex(x.Name) - allocationNameIndex(y.Name))) {
        const events = latestTaskEvents(a, 3);
        lines.push(`  ${a.Name ?? a.ID} ${a.ID}: ${a.ClientStatus}/${a.DesiredStatus}${events.length ? `; task events: ${events.join(" · ")}` : ""}`);
      }
      if (allocations.length === 0) lines.push("  (no allocations)");
      const failure = describePlacementFailure(await this.latestEvaluation());
      if (failure) lines.push(`  placement: ${failure}`);
    } catch (err) {
      lines.push(`  (cannot read the allocations: ${err instanceof Error ? err.message : String(err)})`);
    }
    return lines.join("\n");
  }

  async stop(options: { purge: boolean }): Promise<void> {
    if (this.stopping) return;
    this.stopping = true;
    this.owner.stop();
    this.abort.abort(new Error("the Nomad provisioner was stopped"));
    await this.watcher?.catch(() => undefined);
    try {
      // Only a job that is still ours: another run may have taken it over meanwhile.
      if (this.submitted && !this.owner.lost && (await this.owner.stillOurs())) await this.client.deregisterJob(this.jobId, { purge: options.purge });
      this.logger.info({ job: this.jobId, purge: options.purge }, "nomad provisioner: job stopped");
    } catch (err) {
      throw toProvisionerError(err, `stopping the sandbox job '${this.jobId}' (stop it with 'slotpool jobs prune' or 'nomad job stop')`);
    } finally {
      if (this.ownsClient) await this.client.close().catch(() => undefined);
    }
  }

  private async purgeJob(): Promise<void> {
    await this.client.deregisterJob(this.jobId, { purge: true, signal: this.abort.signal });
    // Purging is asynchronous: wait until the job is gone so the new one starts clean.
    const deadline = Date.now() + 15_000;
    while ((await this.client.readJob(this.jobId, { signal: this.abort.signal })) !== null) {
      if (Date.now() > deadline) throw new ProvisionerError(`Nomad job '${this.jobId}' was purged but is still readable after 15 s`, "other");
      await sleep(200, this.abort.signal);
    }
    this.logger.info({ job: this.jobId }, "nomad provisioner: purged the old job");
  }

  /** Blocking-query loop over the job's allocations. */
  private async watch(): Promise<void> {
    let index = 0;
    let failures = 0;
    const waitMs = this.options.blockingWaitMs ?? 30_000;
    while (!this.stopping) {
      const started = performance.now();
      try {
        const answer = await this.client.jobAllocations(this.jobId, { index, waitMs, signal: this.abort.signal });
        failures = 0;
        const unchanged = answer.index === index;
        // Nomad: an index going backwards means a snapshot restore; start over.
        index = answer.index < index ? 0 : answer.index;
        this.sync(answer.allocations);
        await this.checkPlacement();
        // A server that does not block would make this a busy loop; poll gently instead.
        if (unchanged && performance.now() - started < 50) await sleep(250, this.abort.signal);
      } catch (err) {
        if (this.stopping) return;
        failures++;
        this.logger.warn({ job: this.jobId, failures, err: err instanceof Error ? err.message : String(err) }, "nomad provisioner: watching allocations failed; retrying");
        if (err instanceof NomadAclDeniedError) this.reportOnce(`acl:${failures > 1 ? "again" : "first"}`, toProvisionerError(err, "watching the job's allocations"));
        index = 0;
        await sleep(Math.min(10_000, 250 * 2 ** Math.min(failures, 6)), this.abort.signal).catch(() => undefined);
      }
    }
  }

  /** Lists the allocations, then follows the event stream from that index; re-lists when it drops. */
  private async watchEvents(): Promise<void> {
    let failures = 0;
    while (!this.stopping) {
      try {
        const listed = await this.client.jobAllocations(this.jobId, { signal: this.abort.signal });
        this.sync(listed.allocations);
        await this.checkPlacement();
        const placementTimer = setInterval(() => void this.checkPlacement().catch(() => undefined), 2_000);
        try {
          for await (const event of this.client.eventStream({ topics: { Allocation: [this.jobId] }, index: listed.index, signal: this.abort.signal })) {
            failures = 0;
            const alloc = event.Payload?.Allocation;
            if (alloc && (alloc.JobID ?? this.jobId) === this.jobId) this.syncAllocation(alloc);
          }
        } finally {
          clearInterval(placementTimer);
        }
        this.logger.info({ job: this.jobId }, "nomad provisioner: event stream ended; re-listing allocations");
      } catch (err) {
        if (this.stopping) return;
        failures++;
        this.logger.warn({ job: this.jobId, failures, err: err instanceof Error ? err.message : String(err) }, "nomad provisioner: following allocation events failed; retrying");
        if (err instanceof NomadAclDeniedError) this.reportOnce("acl:events", toProvisionerError(err, "following the job's allocation events"));
        await sleep(Math.min(10_000, 250 * 2 ** Math.min(failures, 6)), this.abort.signal).catch(() => undefined);
      }
    }
  }

  private sync(allocations: AllocListStub[]): void {
    if (this.stopping || !this.events) return;
    const seen = new Set<string>();
    for (const a of allocations) {
      seen.add(a.ID);
      this.syncAllocation(a);
    }
    // Purged or garbage-collected allocations disappear from the list without a terminal state.
    // All of them at once: the job itself may be gone; find out now, not at the next scale call.
    if (allocations.length === 0 && [...this.tracked.values()].some((t) => t.state !== "gone")) void this.owner.checkJob();
    for (const t of this.tracked.values()) {
      if (!seen.has(t.allocId) && t.state !== "gone") {
        t.state = "gone";
        this.events.containerGone({ id: t.id, index: t.index, reason: `allocation ${t.allocId} (${t.name}) is no longer listed by Nomad (stopped and garbage-collected)`, expected: false });
      }
    }
  }

  /** Applies one allocation's current state (from a list or an event). */
  private syncAllocation(a: AllocListStub): void {
    if (this.stopping || !this.events) return;
    if (a.JobID && a.JobID !== this.jobId) return;
    if (a.TaskGroup && a.TaskGroup !== SANDBOX_GROUP) return;
    let t = this.tracked.get(a.ID);
    const restarts = taskRestarts(a);
    if (isAllocationTerminal(a)) {
      if (!t) {
        // Finished before we saw it run (e.g. failed at start): remember, and look for why.
        this.tracked.set(a.ID, { allocId: a.ID, id: a.ID, index: allocationNameIndex(a.Name), name: a.Name ?? a.ID, state: "gone", reading: false, restarts });
        if (a.ClientStatus === "failed") this.noteFailure(a);
      } else if (t.state !== "gone") {
        t.state = "gone";
        if (a.ClientStatus === "failed") this.noteFailure(a);
        const expected = a.DesiredStatus === "stop" && /not needed/i.test(a.DesiredDescription ?? "");
        this.events.containerGone({ id: t.id, index: t.index, reason: allocationReason(a), expected });
      }
      return;
    }
    if (!t) {
      t = { allocId: a.ID, id: a.ID, index: allocationNameIndex(a.Name), name: a.Name ?? a.ID, state: "starting", reading: false, restarts };
      this.tracked.set(a.ID, t);
      this.events.containerStarting(t.id, t.index);
    } else if (restarts > t.restarts && t.state !== "gone") {
      // Restarted in place (restart policy): same allocation, a fresh server. What the old
      // process held is gone; the new one joins as a new container once it runs.
      if (t.state === "up") {
        this.events.containerGone({ id: t.id, index: t.index, reason: `${allocationReason(a)} (its task restarted in place: restart ${restarts})`, expected: false });
      }
      t.restarts = restarts;
      t.id = `${a.ID}/restart-${restarts}`;
      t.state = "starting";
      this.events.containerStarting(t.id, t.index);
    }
    this.inspectTaskEvents(a);
    if (t.state === "starting" && !t.reading && isAllocationRunning(a, SANDBOX_TASK)) void this.announce(t, a);
  }

  /** Reads a running allocation for its address (list stubs carry no ports) and reports it up. */
  private async announce(t: TrackedAllocation, seen?: AllocListStub): Promise<void> {
    t.reading = true;
    const instance = t.id;
    try {
      // Allocation events carry the ports; list stubs do not, so read the allocation then.
      const alloc = seen && allocationHttpAddress(seen) ? seen : await this.client.readAllocation(t.allocId, { signal: this.abort.signal });
      // Skip if it changed meanwhile (stopped, or restarted again: the next sync announces that).
      if (!alloc || t.state !== "starting" || t.id !== instance || this.stopping) return;
      const address = allocationHttpAddress(alloc);
      if (!address) {
        this.reportOnce(`noport:${t.allocId}`, new ProvisionerError(`allocation ${t.allocId} (${t.name}) runs but has no port labelled "http"; check the job's network block`, "config"));
        return;
      }
      t.state = "up";
      this.events!.containerUp({ id: t.id, index: t.index, url: address.url, ...(this.token ? { token: this.token } : {}), slots: this.options.slotsPerContainer, ...(alloc.NodeID ? { node: alloc.NodeID } : {}) });
    } catch (err) {
      if (this.stopping) return;
      this.logger.warn({ allocation: t.allocId, err: err instanceof Error ? err.message : String(err) }, "nomad provisioner: cannot read allocation; retrying");
      // A running allocation may bring no further change to react to: retry on our own.
      setTimeout(() => {
        if (t.state === "starting" && t.id === instance && !t.reading && !this.stopping) void this.announce(t);
      }, 1_000).unref();
    } finally {
      t.reading = false;
    }
  }

  /** Image pull failures and crash loops show in the task events of a still-pending allocation. */
  private inspectTaskEvents(a: AllocListStub): void {
    for (const state of Object.values(a.TaskStates ?? {})) {
      for (const e of state.Events ?? []) {
        const text = `${e.Type ?? ""} ${e.DriverError ?? ""} ${e.DisplayMessage ?? ""} ${e.Message ?? ""}`;
        if (e.Type === "Driver Failure" || e.DriverError) {
          const pull = /pull|image|manifest|repository|registry/i.test(text);
          this.reportOnce(
            `driver:${a.ID}`,
            new ProvisionerError(
              `allocation ${a.ID} (${a.Name}) cannot start its task${pull ? ": the image could not be pulled" : ""}. Latest task events: ${latestTaskEvents(a, 5).join(" · ")}. ` +
                (pull ? "Check the image name and tag, and that the Nomad client can reach and log in to its registry." : "Check the task driver's configuration on the Nomad client."),
              pull ? "image-pull" : "driver",
            ),
          );
        }
      }
      if ((state.Restarts ?? 0) >= 2) {
        this.reportOnce(
          `restarts:${a.ID}`,
          new ProvisionerError(
            `allocation ${a.ID} (${a.Name}) is crash-looping (${state.Restarts} restarts). Latest task events: ${latestTaskEvents(a, 5).join(" · ")}. ` +
              "Check the allocation's logs (nomad alloc logs -stderr) and the sandbox-server flags.",
            "crash-loop",
          ),
        );
      }
    }
  }

  private noteFailure(a: AllocListStub): void {
    if (this.reported.has(`failed:${a.ID}`)) return;
    this.reported.add(`failed:${a.ID}`);
    this.failedAllocations++;
    this.inspectTaskEvents(a);
    if (this.failedAllocations >= 2) {
      this.reportOnce(
        "crash-loop",
        new ProvisionerError(
          `allocations of '${this.jobId}' keep failing (${this.failedAllocations} so far); latest: ${a.ID} (${a.Name}): ${allocationReason(a)}. ` +
            "Check the allocation's logs (nomad alloc logs -stderr) and the sandbox-server flags.",
          "crash-loop",
        ),
      );
    }
  }

  /** When fewer allocations exist than asked for, the latest evaluation says why (no capacity, constraints). */
  private async checkPlacement(): Promise<void> {
    let live = 0;
    for (const t of this.tracked.values()) if (t.state !== "gone") live++;
    if (live >= this.target || performance.now() - this.lastPlacementCheck < 2_000) return;
    this.lastPlacementCheck = performance.now();
    const evaluation = await this.latestEvaluation();
    const failure = describePlacementFailure(evaluation);
    if (evaluation && failure) {
      // Keyed by what failed, not by the evaluation: each scale call makes a new evaluation that fails the same way.
      this.reportOnce(
        `placement:${failure}`,
        new ProvisionerError(
          `Nomad could not place ${this.target - live} of ${this.target} sandbox allocations of '${this.jobId}': ${failure}. ${placementAdvice(failure, this.options.job?.driver ?? "docker")}`,
          "placement",
        ),
      );
    }
  }

  private async latestEvaluation(): Promise<Evaluation | undefined> {
    const evals = await this.client.jobEvaluations(this.jobId, { signal: this.abort.signal });
    return evals.reduce<Evaluation | undefined>((latest, e) => (!latest || (e.CreateIndex ?? 0) > (latest.CreateIndex ?? 0) ? e : latest), undefined);
  }

  private reportOnce(key: string, error: ProvisionerError): void {
    if (this.reported.has(key) || this.stopping) return;
    this.reported.add(key);
    // A pool listening logs the problem itself (once): a line here too would say it twice.
    if (this.events) this.events.problem(error);
    else this.logger.warn({ job: this.jobId, kind: error.kind, err: error.message }, "nomad provisioner: problem");
  }
}

function taskRestarts(a: AllocListStub): number {
  let n = 0;
  for (const state of Object.values(a.TaskStates ?? {})) n += state.Restarts ?? 0;
  return n;
}

function jobToken(job: Job): string | undefined {
  const group = job.TaskGroups?.find((g) => g.Name === SANDBOX_GROUP);
  const task = group?.Tasks?.find((t) => t.Name === SANDBOX_TASK) ?? group?.Tasks?.[0];
  const env = (task as { Env?: Record<string, string> | null } | undefined)?.Env;
  return env?.["SANDBOX_TOKEN"] || undefined;
}

function allocationReason(a: AllocListStub): string {
  const desired = a.DesiredStatus && a.DesiredStatus !== "run" ? ` (desired ${a.DesiredStatus}${a.DesiredDescription ? `: ${a.DesiredDescription}` : ""})` : "";
  const client = a.ClientDescription ? `: ${a.ClientDescription}` : "";
  const events = latestTaskEvents(a, 3);
  return `allocation ${a.ID} (${a.Name ?? "?"}) is ${a.ClientStatus ?? "unknown"}${client}${desired}${events.length ? `; latest task events: ${events.join(" · ")}` : ""}`;
}

function toProvisionerError(err: unknown, doing: string): ProvisionerError {
  if (err instanceof ProvisionerError) return err;
  if (err instanceof NomadUnreachableError) return new ProvisionerError(`${doing}: ${err.message}`, "unreachable", { cause: err });
  if (err instanceof NomadAclDeniedError) return new ProvisionerError(`${doing}: ${err.message}`, "acl", { cause: err });
  if (err instanceof NomadError) return new ProvisionerError(`${doing}: ${err.message}`, "nomad", { cause: err });
  return new ProvisionerError(`${doing}: ${err instanceof Error ? err.message : String(err)}`, "other", { cause: err });
}
