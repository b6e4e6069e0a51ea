/**
 * The state machine behind the Nomad API emulator: jobs, allocations, evaluations, the
 * raft-like index, blocking-query waiters, the event log, and the allocation lifecycle
 * (each running allocation is a real `slotpool sandbox-server` child process).
 *
 * Comments marked "README:" cite shared/nomad-api/README.md, the reference this emulator
 * follows; "README: nothing" marks a guess the reference does not cover.
 */
import { randomUUID } from "node:crypto";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { SandboxProcess, SandboxProcessOptions } from "../../src/pool/sandbox-process.js";
import { hasSlotUidBase, SlotUidAllocator } from "../../src/host/slot-uid-blocks.js";

export type Json = Record<string, unknown>;
export type ProcessFactory = (options: SandboxProcessOptions) => Promise<SandboxProcess>;

export interface ClusterOptions {
  dataDir: string;
  startProcess: ProcessFactory;
  /** Extra `slotpool sandbox-server` arguments for every allocation. */
  serverArgs: string[];
  /** How long a failed allocation waits before its replacement is placed. */
  rescheduleDelayMs: number;
  /** How long a deployment stays active (jobs whose update block does create deployments). */
  deploymentMs: number;
  /** SIGTERM to SIGKILL when an allocation is stopped (Nomad: kill_timeout). */
  killTimeoutMs: number;
  processStartTimeoutMs: number;
  /**
   * Whether a job's datacenters may be glob patterns ("*", Nomad >= 1.6). false: like Nomad
   * 1.1, which takes them literally, so `["*"]` places nothing (seen on a real 1.1.2 agent).
   */
  datacenterGlobs: boolean;
}

/** The emulator's one node is in Nomad's default datacenter. */
export const NODE_DATACENTER = "dc1";

const NS_EPOCH = BigInt(Date.now()) * 1_000_000n - process.hrtime.bigint();
/** Unix nanoseconds, above 2^53 like Nomad's, so clients must keep them exact. */
export function nowNs(): bigint {
  return NS_EPOCH + process.hrtime.bigint();
}

export interface TaskEventRecord {
  Type: string;
  Time: bigint;
  Message: string;
  DisplayMessage: string;
  Details: Record<string, string>;
  FailsTask: boolean;
  DriverError: string;
  DriverMessage: string;
  SetupError: string;
  ExitCode: number;
  Signal: number;
  KillReason: string;
}

interface TaskStateRecord {
  State: "pending" | "running" | "dead";
  Failed: boolean;
  Restarts: number;
  StartedAt: string | null;
  FinishedAt: string | null;
  Events: TaskEventRecord[];
}

export interface EmulatedAllocation {
  id: string;
  namespace: string;
  evalId: string;
  name: string;
  nameIndex: number;
  nodeId: string;
  nodeName: string;
  jobId: string;
  jobVersion: number;
  jobCreateIndex: number;
  jobSnapshot: Json;
  taskGroup: string;
  taskName: string;
  desiredStatus: "run" | "stop" | "evict";
  desiredDescription: string;
  clientStatus: "pending" | "running" | "complete" | "failed" | "lost";
  clientDescription: string;
  task: TaskStateRecord;
  previousAllocation: string;
  nextAllocation: string;
  /** Stopped through the API (POST /v1/allocation/:id/stop): DesiredTransition.Migrate. */
  migrate?: boolean;
  rescheduleEvents: Json[];
  createIndex: number;
  modifyIndex: number;
  allocModifyIndex: number;
  createTime: bigint;
  modifyTime: bigint;
  port: number | undefined;
  process: SandboxProcess | undefined;
  /** Set when the emulator itself ends the process (stop, lost): its exit is not a failure. */
  ending: boolean;
}

export interface EmulatedJob {
  namespace: string;
  id: string;
  spec: Json;
  createIndex: number;
  modifyIndex: number;
  jobModifyIndex: number;
  version: number;
  stop: boolean;
  submitTime: bigint;
  status: "pending" | "running" | "dead";
  scaleEvents: Record<string, Json[]>;
  deploymentsEnabled: boolean;
  deploymentActiveUntil: number;
  /** The latest deployment (jobs whose update block creates them), as GET /v1/job/:id/deployment shows it. */
  deployment?: { id: string; jobVersion: number; createIndex: number };
}

export interface EmulatedEvaluation {
  id: string;
  namespace: string;
  jobId: string;
  triggeredBy: string;
  jobModifyIndex: number;
  createIndex: number;
  modifyIndex: number;
  createTime: bigint;
  previousEval: string;
  queued: Record<string, number>;
  /** structs.AllocMetric per group that could not be placed. */
  failedTGAllocs?: Record<string, Json>;
}

export interface EmittedEvent {
  Topic: string;
  Type: string;
  Key: string;
  Namespace: string;
  FilterKeys: string[] | null;
  Index: number;
  Payload: Json;
}

export interface ImagePullFailure {
  jobId: string | true;
  message: string | undefined;
}

export class EmulatedCluster {
  index = 1;
  jobsTableIndex = 1;
  allocsTableIndex = 1;
  evalsTableIndex = 1;
  readonly jobs = new Map<string, EmulatedJob>();
  readonly allocs = new Map<string, EmulatedAllocation>();
  readonly evals = new Map<string, EmulatedEvaluation>();
  /** Recent events for `?index=` replay on the event stream. */
  readonly eventLog: Array<{ Index: number; Events: EmittedEvent[] }> = [];
  delayAllocationStartMs = 0;
  imagePullFailures: ImagePullFailure[] = [];
  nodeId: string = randomUUID();
  nodeName = "emulator-node-1";
  closed = false;

  private nodeGeneration = 1;
  private waiters = new Set<() => void>();
  private eventListeners = new Set<(frame: { Index: number; Events: EmittedEvent[] }) => void>();
  private timers = new Set<NodeJS.Timeout>();
  private starting = new Set<Promise<void>>();
  private sleepers = new Set<() => void>();

  /**
   * Slot uids: every allocation's sandbox server gets its own host uid block (as the local
   * provisioner's containers do; see `src/host/slot-uid-blocks.ts`), so a fork bomb in one
   * allocation's slot cannot exhaust the per-uid process limit of another allocation's
   * slot, nor of another emulator's on this host. Up to 1000 slots per allocation; a
   * `--slot-uid-base` in `serverArgs` opts out.
   */
  private readonly uids = new SlotUidAllocator(1000);

  constructor(private readonly options: ClusterOptions) {}

  // ------------------------------------------------------------------ index, waiting, events

  /** Every change takes a new index, wakes blocking queries and (optionally) emits an event. */
  private bump(): number {
    this.index += 1;
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) w();
    return this.index;
  }

  /**
   * README l.76-78 "Blocking queries": hold until the watched index is greater than `minIndex`, or
   * until `waitMs`; without an index (or 0) never block. The emulator adds no jitter.
   */
  async blockUntil(current: () => number, minIndex: number, waitMs: number, cancelled: AbortSignal): Promise<void> {
    if (minIndex <= 0) return;
    const deadline = Date.now() + waitMs;
    while (current() <= minIndex && Date.now() < deadline && !cancelled.aborted && !this.closed) {
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          cancelled.removeEventListener("abort", done);
          this.waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, Math.max(0, deadline - Date.now()));
        cancelled.addEventListener("abort", done, { once: true });
        this.waiters.add(done);
      });
    }
  }

  /** Resolves when `predicate` holds (checked after every change), or rejects after `timeoutMs`. */
  async waitFor(predicate: () => boolean, timeoutMs: number, what: string | (() => string)): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!predicate()) {
      if (Date.now() >= deadline) throw new Error(`emulator: timed out after ${timeoutMs} ms waiting for ${typeof what === "string" ? what : what()}`);
      const signal = AbortSignal.timeout(Math.max(1, deadline - Date.now()));
      await this.blockUntil(() => this.index, this.index, timeoutMs, signal);
    }
  }

  onEvents(listener: (frame: { Index: number; Events: EmittedEvent[] }) => void): () => void {
    this.eventListeners.add(listener);
    return () => this.eventListeners.delete(listener);
  }

  private emit(events: Array<Omit<EmittedEvent, "Index">>, index: number): void {
    const frame = { Index: index, Events: events.map((e) => ({ ...e, Index: index })) };
    this.eventLog.push(frame);
    if (this.eventLog.length > 2_000) this.eventLog.shift();
    for (const l of [...this.eventListeners]) l(frame);
  }

  private allocChanged(alloc: EmulatedAllocation, eventType: string): void {
    const index = this.bump();
    alloc.modifyIndex = index;
    alloc.modifyTime = nowNs();
    this.allocsTableIndex = index;
    this.refreshJobStatus(alloc.namespace, alloc.jobId, index);
    // README l.206 "GET /v1/event/stream": Allocation events carry the full allocation without Job,
    // FilterKeys [JobID, DeploymentID]. README: nothing on which Type each change gets; the
    // names are events.mdx's (PlanResult for placements, AllocationUpdated for client updates,
    // AllocationUpdateDesiredStatus for server-side stops).
    const wire = allocationWire(alloc, { withJob: false });
    this.emit([{ Topic: "Allocation", Type: eventType, Key: alloc.id, Namespace: alloc.namespace, FilterKeys: [alloc.jobId, ""], Payload: { Allocation: wire } }], index);
  }

  private refreshJobStatus(namespace: string, jobId: string, index: number): void {
    const job = this.jobs.get(key(namespace, jobId));
    if (!job) return;
    const live = this.jobAllocs(job).filter(isLive);
    // README l.218 "Job Status": pending, running or dead. README: nothing on the rule; the
    // emulator follows Nomad's: running while any allocation is not terminal, dead once
    // stopped with nothing left, pending otherwise.
    const status = live.length > 0 ? "running" : job.stop ? "dead" : "pending";
    if (status !== job.status) {
      job.status = status;
      job.modifyIndex = index;
      this.jobsTableIndex = index;
    }
  }

  // ------------------------------------------------------------------ jobs

  jobAllocs(job: EmulatedJob): EmulatedAllocation[] {
    return [...this.allocs.values()].filter((a) => a.namespace === job.namespace && a.jobId === job.id && a.jobCreateIndex === job.createIndex);
  }

  register(namespace: string, spec: Json, preserveCounts: boolean): { job: EmulatedJob; evalId: string; evalIndex: number } {
    const id = String(spec["ID"]);
    const existing = this.jobs.get(key(namespace, id));
    const groups: Json[] = (spec["TaskGroups"] as Json[]).map((g) => ({ ...g, Count: g["Count"] ?? 1 }));
    // README l.124 "Gotcha": re-registering resets each group's Count to the spec's value unless
    // PreserveCounts is set.
    if (preserveCounts && existing && !existing.stop) {
      const old = new Map((existing.spec["TaskGroups"] as Json[]).map((g) => [g["Name"], g["Count"]]));
      for (const g of groups) if (old.has(g["Name"])) g["Count"] = old.get(g["Name"]);
    }
    const canonical: Json = { ...spec, Namespace: namespace, Type: spec["Type"] ?? "service", TaskGroups: groups };
    const index = this.bump();
    const job: EmulatedJob = existing
      ? existing
      : {
          namespace,
          id,
          spec: canonical,
          createIndex: index,
          modifyIndex: index,
          jobModifyIndex: index,
          version: 0,
          stop: false,
          submitTime: nowNs(),
          status: "pending",
          scaleEvents: {},
          deploymentsEnabled: true,
          deploymentActiveUntil: 0,
        };
    if (existing) {
      // README l.119 "POST /v1/jobs": re-registering always creates an evaluation; README: nothing
      // on versions, the emulator bumps the version on every register.
      job.version += 1;
      job.spec = canonical;
      job.stop = false;
      job.submitTime = nowNs();
    }
    job.modifyIndex = index;
    job.jobModifyIndex = index;
    if (existing) {
      // Nomad: an allocation whose node no longer meets the job's constraints cannot be
      // updated in place; it is stopped and replaced on a feasible node. The others are
      // updated in place (same allocation, no restart).
      for (const alloc of this.jobAllocs(job)) {
        const g = groups.find((x) => x["Name"] === alloc.taskGroup);
        if (isLive(alloc) && g && nodeExcluded(canonical, g, alloc.nodeId)) this.stopAllocation(alloc, "alloc is being updated due to job update");
        else if (isLive(alloc)) alloc.jobVersion = job.version;
      }
    }
    job.deploymentsEnabled = createsDeployments(canonical);
    if (job.deploymentsEnabled) this.startDeployment(job, index);
    this.jobs.set(key(namespace, id), job);
    this.jobsTableIndex = index;
    this.emit([{ Topic: "Job", Type: "JobRegistered", Key: id, Namespace: namespace, FilterKeys: null, Payload: { Job: this.jobWire(job) } }], index);
    const evaluation = this.createEval(job, "job-register");
    this.reconcile(job, evaluation.id);
    return { job, evalId: evaluation.id, evalIndex: evaluation.createIndex };
  }

  /** README l.260, l.269 "What the scale endpoint requires": a job-scaling evaluation; Count omitted records only an event. */
  scale(job: EmulatedJob, group: string, count: number | undefined, message: string, error: boolean, meta: Json | null): { evalId: string; evalIndex: number } {
    const groups = job.spec["TaskGroups"] as Json[];
    const tg = groups.find((g) => g["Name"] === group)!;
    const previous = Number(tg["Count"]);
    const event: Json = { Count: count ?? null, PreviousCount: previous, Message: message, Error: error, Meta: meta, EvalID: null, Time: nowNs(), CreateIndex: 0 };
    if (count === undefined) {
      const index = this.bump();
      event["CreateIndex"] = index;
      (job.scaleEvents[group] ??= []).unshift(event);
      job.modifyIndex = index;
      return { evalId: "", evalIndex: 0 };
    }
    tg["Count"] = count;
    const index = this.bump();
    job.version += 1;
    job.modifyIndex = index;
    job.jobModifyIndex = index;
    this.jobsTableIndex = index;
    if (job.deploymentsEnabled) this.startDeployment(job, index);
    const evaluation = this.createEval(job, "job-scaling");
    event["EvalID"] = evaluation.id;
    event["CreateIndex"] = index;
    (job.scaleEvents[group] ??= []).unshift(event);
    this.reconcile(job, evaluation.id);
    return { evalId: evaluation.id, evalIndex: evaluation.createIndex };
  }

  deregister(job: EmulatedJob, purge: boolean): { evalId: string; evalIndex: number } {
    const index = this.bump();
    job.stop = true;
    job.modifyIndex = index;
    job.jobModifyIndex = index;
    this.jobsTableIndex = index;
    const evaluation = this.createEval(job, "job-deregister");
    this.reconcile(job, evaluation.id);
    this.emit([{ Topic: "Job", Type: "JobDeregistered", Key: job.id, Namespace: job.namespace, FilterKeys: null, Payload: { Job: this.jobWire(job) } }], this.index);
    // README l.177-178, l.137 "DELETE /v1/job/:job_id": without purge the job stays readable with Stop: true;
    // with purge it is gone, while its allocations stay listed until GC (the emulator never GCs).
    if (purge) {
      this.jobs.delete(key(job.namespace, job.id));
      this.jobsTableIndex = this.bump();
    }
    return { evalId: evaluation.id, evalIndex: evaluation.createIndex };
  }

  /**
   * What a real 1.1.2 agent does with a scale call refused for an active deployment: the
   * count is stored (the job's version moves) but no evaluation places anything for it
   * (shared/tools/nomad/README.md, "Things a real agent does"). The refusal is the caller's.
   */
  storeRefusedCount(job: EmulatedJob, group: string, count: number): void {
    const tg = (job.spec["TaskGroups"] as Json[]).find((g) => g["Name"] === group)!;
    tg["Count"] = count;
    const index = this.bump();
    job.version += 1;
    job.modifyIndex = index;
    job.jobModifyIndex = index;
    this.jobsTableIndex = index;
  }

  private startDeployment(job: EmulatedJob, index: number): void {
    job.deploymentActiveUntil = Date.now() + this.options.deploymentMs;
    job.deployment = { id: randomUUID(), jobVersion: job.version, createIndex: index };
  }

  deploymentActive(job: EmulatedJob): boolean {
    return job.deploymentsEnabled && Date.now() < job.deploymentActiveUntil;
  }

  private createEval(job: EmulatedJob, triggeredBy: string): EmulatedEvaluation {
    const index = this.bump();
    const queued: Record<string, number> = {};
    for (const g of job.spec["TaskGroups"] as Json[]) queued[String(g["Name"])] = 0;
    const evaluation: EmulatedEvaluation = {
      id: randomUUID(),
      namespace: job.namespace,
      jobId: job.id,
      triggeredBy,
      jobModifyIndex: job.jobModifyIndex,
      createIndex: index,
      modifyIndex: index,
      createTime: nowNs(),
      previousEval: "",
      queued,
    };
    this.evals.set(evaluation.id, evaluation);
    this.evalsTableIndex = index;
    this.emit([{ Topic: "Evaluation", Type: "EvaluationUpdated", Key: evaluation.id, Namespace: job.namespace, FilterKeys: [job.id, ""], Payload: { Evaluation: evaluationWire(evaluation) } }], index);
    return evaluation;
  }

  /**
   * Brings each group's live allocations to its Count. README l.242 "Scale-down: which allocations
   * are stopped": the highest name indexes go first; "Scale-up fills the lowest free indexes
   * in [0, Count)". A stopped job stops everything. README: nothing on spec changes of running
   * allocations; the emulator keeps them (no destructive updates).
   */
  reconcile(job: EmulatedJob, evalId: string): void {
    const groupNames = new Set((job.spec["TaskGroups"] as Json[]).map((g) => String(g["Name"])));
    // A group dropped from the spec by a re-register loses all its allocations.
    for (const alloc of this.jobAllocs(job)) {
      if (!groupNames.has(alloc.taskGroup) && isLive(alloc)) this.stopAllocation(alloc, "alloc not needed due to job update");
    }
    for (const group of job.spec["TaskGroups"] as Json[]) {
      const groupName = String(group["Name"]);
      const live = this.jobAllocs(job).filter((a) => a.taskGroup === groupName && isLive(a));
      const count = job.stop ? 0 : Number(group["Count"]);
      if (live.length > count) {
        const byIndexDesc = [...live].sort((a, b) => b.nameIndex - a.nameIndex || b.createIndex - a.createIndex);
        for (const alloc of byIndexDesc.slice(0, live.length - count)) {
          // README l.216 "Allocation status values": a scaled-down allocation gets DesiredStatus stop
          // with this description. README: nothing on a stopped job's wording; the same is used.
          this.stopAllocation(alloc, "alloc not needed due to job update");
        }
      }
      const used = new Set(live.map((a) => a.nameIndex));
      let placed = live.length;
      const datacenters = ((job.spec["Datacenters"] as string[] | undefined) ?? ["*"]).map(String);
      if (placed < count && !datacenters.some((d) => this.datacenterMatches(d))) {
        // No node in any of the job's datacenters: the evaluation says so, nothing is placed
        // (structs.AllocMetric: NodesAvailable counts the ready nodes per datacenter asked for).
        const evaluation = this.evals.get(evalId);
        if (evaluation) {
          evaluation.queued[groupName] = count - placed;
          (evaluation.failedTGAllocs ??= {})[groupName] = {
            NodesEvaluated: 0,
            NodesFiltered: 0,
            NodesAvailable: Object.fromEntries(datacenters.map((d) => [d, 0])),
            CoalescedFailures: count - placed - 1,
          };
        }
        continue;
      }
      for (let i = 0; placed < count; i++) {
        if (used.has(i)) continue;
        this.place(job, group, i, evalId, undefined);
        placed++;
      }
    }
  }

  private datacenterMatches(pattern: string): boolean {
    if (!this.options.datacenterGlobs) return pattern === NODE_DATACENTER;
    const re = new RegExp(`^${pattern.replace(/[.+?^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*")}$`);
    return re.test(NODE_DATACENTER);
  }

  // ------------------------------------------------------------------ allocation lifecycle

  private place(job: EmulatedJob, group: Json, nameIndex: number, evalId: string, previous: EmulatedAllocation | undefined): EmulatedAllocation {
    // The node placements go to is ruled out by a `${node.unique.id}` constraint: a fresh node
    // (the emulator has room everywhere) takes them.
    if (nodeExcluded(job.spec, group, this.nodeId)) this.placeOnNewNode();
    const tasks = (group["Tasks"] as Json[] | undefined) ?? [];
    const task = tasks[0] ?? {};
    const groupName = String(group["Name"]);
    const alloc: EmulatedAllocation = {
      id: randomUUID(),
      namespace: job.namespace,
      evalId,
      name: `${job.id}.${groupName}[${nameIndex}]`,
      nameIndex,
      nodeId: this.nodeId,
      nodeName: this.nodeName,
      jobId: job.id,
      jobVersion: job.version,
      jobCreateIndex: job.createIndex,
      jobSnapshot: this.jobWire(job),
      taskGroup: groupName,
      taskName: String(task["Name"] ?? "task"),
      desiredStatus: "run",
      desiredDescription: "",
      clientStatus: "pending",
      clientDescription: "No tasks have started",
      task: { State: "pending", Failed: false, Restarts: 0, StartedAt: null, FinishedAt: null, Events: [] },
      previousAllocation: previous?.id ?? "",
      nextAllocation: "",
      rescheduleEvents: previous
        ? [...previous.rescheduleEvents, { PrevAllocID: previous.id, PrevNodeID: previous.nodeId, RescheduleTime: nowNs(), Delay: this.options.rescheduleDelayMs * 1_000_000 }]
        : [],
      createIndex: 0,
      modifyIndex: 0,
      allocModifyIndex: 0,
      createTime: nowNs(),
      modifyTime: nowNs(),
      port: undefined,
      process: undefined,
      ending: false,
    };
    const index = this.bump();
    alloc.createIndex = index;
    alloc.allocModifyIndex = index;
    this.allocs.set(alloc.id, alloc);
    if (previous) {
      previous.nextAllocation = alloc.id;
      this.allocChanged(previous, "AllocationUpdated");
    }
    addEvent(alloc, "Received", { DisplayMessage: "Task received by client" });
    this.allocChanged(alloc, "PlanResult");
    const run = this.run(alloc, job, task).catch((err: unknown) => this.failTask(alloc, "Driver Failure", { DriverError: String(err), DisplayMessage: String(err) }));
    this.starting.add(run);
    void run.finally(() => this.starting.delete(run));
    return alloc;
  }

  /** pending → (Task Setup, Driver) → running with a real sandbox server, or a failed pull. */
  private async run(alloc: EmulatedAllocation, job: EmulatedJob, task: Json): Promise<void> {
    if (this.delayAllocationStartMs > 0) await this.sleep(this.delayAllocationStartMs);
    if (!this.stillWanted(alloc)) return;
    addEvent(alloc, "Task Setup", { Message: "Building Task Directory", DisplayMessage: "Building Task Directory", Details: { message: "Building Task Directory" } });
    this.allocChanged(alloc, "AllocationUpdated");
    const config = (task["Config"] as Json | undefined) ?? {};
    const image = String(config["image"] ?? config["command"] ?? "");
    const pullFailure = this.imagePullFailures.find((f) => f.jobId === true || f.jobId === job.id);
    if (task["Driver"] === "docker" || pullFailure) {
      addEvent(alloc, "Driver", { DriverMessage: `Downloading image ${image}`, DisplayMessage: `Downloading image ${image}` });
      this.allocChanged(alloc, "AllocationUpdated");
    }
    if (pullFailure) {
      // README: nothing on image pull failures. Modelled on Nomad's docker driver: a
      // "Driver Failure" event whose error reads "Failed to pull `<image>`: <docker's reason>",
      // the task fails and the allocation fails (then is rescheduled, and fails again).
      const reason = pullFailure.message ?? `Error response from daemon: pull access denied for ${image.split(":")[0]}, repository does not exist or may require 'docker login': denied: requested access to the resource is denied`;
      const msg = `Failed to pull \`${image}\`: ${reason}`;
      this.failTask(alloc, "Driver Failure", { DriverError: msg, DisplayMessage: msg });
      return;
    }
    const slots = argValue(config["args"], "--slots") ?? 1;
    const env = (task["Env"] as Record<string, string> | undefined) ?? {};
    // The job's task-image flags reach the server as Nomad would pass them (the rest of its args
    // are the container's: --host/--port/--memory-mb stay the emulator's own), and its env too.
    const imageArgs = passedArgs(config["args"], ["--insecure-registry", "--image-budget-mb", "--image-pull-timeout"]);
    const { SANDBOX_TOKEN: _token, ...taskEnv } = env;
    const dataDir = join(this.options.dataDir, alloc.id);
    mkdirSync(dataDir, { recursive: true, mode: 0o711 });
    // The real job listens on 0.0.0.0:8080 inside a container; here every allocation is a
    // loopback process on a free port (the emulator never touches non-loopback addresses).
    const uidBase = hasSlotUidBase(this.options.serverArgs) || slots > this.uids.stride ? undefined : this.uids.acquire();
    const releaseUids = () => {
      if (uidBase !== undefined) this.uids.release(uidBase);
    };
    let proc: SandboxProcess;
    try {
      proc = await this.options.startProcess({
        slots,
        dataDir,
        host: "127.0.0.1",
        port: 0,
        ...(env["SANDBOX_TOKEN"] ? { token: env["SANDBOX_TOKEN"] } : {}),
        extraArgs: [...(uidBase !== undefined ? ["--slot-uid-base", String(uidBase)] : []), ...imageArgs, ...this.options.serverArgs],
        ...(Object.keys(taskEnv).length > 0 ? { env: taskEnv } : {}),
        startTimeoutMs: this.options.processStartTimeoutMs,
      });
      // The block is free again once the server has exited (its slot processes with it).
      void proc.exited.then(releaseUids, releaseUids);
    } catch (err) {
      releaseUids();
      if (!this.stillWanted(alloc)) return;
      this.failTask(alloc, "Driver Failure", { DriverError: (err as Error).message, DisplayMessage: (err as Error).message });
      return;
    }
    if (!this.stillWanted(alloc)) {
      alloc.ending = true;
      await proc.stop(2_000);
      return;
    }
    alloc.process = proc;
    alloc.port = proc.port;
    void proc.exited.then(({ code, signal }) => this.onExit(alloc, code, signal));
    addEvent(alloc, "Started", { DisplayMessage: "Task started by client" });
    alloc.task.State = "running";
    alloc.task.StartedAt = new Date().toISOString();
    alloc.clientStatus = "running";
    alloc.clientDescription = "Tasks are running";
    this.allocChanged(alloc, "AllocationUpdated");
  }

  private stillWanted(alloc: EmulatedAllocation): boolean {
    return !this.closed && alloc.desiredStatus === "run" && alloc.clientStatus === "pending";
  }

  /**
   * The sandbox server died on its own: README l.214 "Allocation status values" — failed is a
   * terminal ClientStatus. README: nothing on restarts; the emulator skips in-place restarts
   * (as with restart attempts = 0) and reports a "Terminated" event with the exit code.
   */
  private onExit(alloc: EmulatedAllocation, code: number | null, signal: NodeJS.Signals | null): void {
    alloc.process = undefined;
    if (alloc.ending || this.closed) return;
    const signo = signal ? signalNumber(signal) : 0;
    const exitCode = code ?? 128 + signo;
    this.failTask(alloc, "Terminated", {
      ExitCode: exitCode,
      Signal: signo,
      DisplayMessage: `Exit Code: ${exitCode}${signo ? `, Signal: ${signo}` : ""}`,
      Details: { exit_code: String(exitCode), signal: String(signo) },
    });
  }

  private failTask(alloc: EmulatedAllocation, type: string, fields: Partial<TaskEventRecord>): void {
    if (alloc.clientStatus !== "pending" && alloc.clientStatus !== "running") return;
    addEvent(alloc, type, { FailsTask: true, ...fields });
    alloc.task.State = "dead";
    alloc.task.Failed = true;
    alloc.task.FinishedAt = new Date().toISOString();
    alloc.clientStatus = "failed";
    alloc.clientDescription = "Failed tasks";
    this.allocChanged(alloc, "AllocationUpdated");
    this.scheduleReschedule(alloc, this.options.rescheduleDelayMs);
  }

  /**
   * README: nothing on rescheduling. Nomad replaces a failed allocation after its
   * ReschedulePolicy delay (the sandbox job: 5 s, exponential); the emulator uses its own
   * `rescheduleDelayMs`, and places the replacement under the same name only if the job still
   * wants that name and nothing else took it meanwhile.
   */
  private scheduleReschedule(alloc: EmulatedAllocation, delayMs: number): void {
    if (delayMs < 0) return;
    const timer = setTimeout(() => {
      this.timers.delete(timer);
      if (this.closed) return;
      const job = this.jobs.get(key(alloc.namespace, alloc.jobId));
      if (!job || job.stop || job.createIndex !== alloc.jobCreateIndex) return;
      const group = (job.spec["TaskGroups"] as Json[]).find((g) => g["Name"] === alloc.taskGroup);
      if (!group || alloc.nameIndex >= Number(group["Count"])) return;
      const taken = this.jobAllocs(job).some((a) => a.nameIndex === alloc.nameIndex && a.taskGroup === alloc.taskGroup && isLive(a));
      if (taken) return;
      const evaluation = this.createEval(job, alloc.clientStatus === "lost" ? "node-update" : "alloc-failure");
      this.place(job, group, alloc.nameIndex, evaluation.id, alloc);
    }, delayMs);
    this.timers.add(timer);
  }

  /** Server-side stop (scale-down, job stop): DesiredStatus stop, then the task is killed → complete. */
  stopAllocation(alloc: EmulatedAllocation, description: string): void {
    alloc.desiredStatus = "stop";
    alloc.desiredDescription = description;
    this.allocChanged(alloc, "AllocationUpdateDesiredStatus");
    if (alloc.clientStatus !== "pending" && alloc.clientStatus !== "running") return;
    const proc = alloc.process;
    const finish = () => {
      if (alloc.clientStatus !== "pending" && alloc.clientStatus !== "running") return;
      addEvent(alloc, "Killed", { DisplayMessage: "Task successfully killed" });
      alloc.task.State = "dead";
      alloc.task.FinishedAt = new Date().toISOString();
      alloc.clientStatus = "complete";
      alloc.clientDescription = "All tasks have completed";
      this.allocChanged(alloc, "AllocationUpdated");
    };
    if (!proc) {
      finish();
      return;
    }
    alloc.ending = true;
    const grace = this.options.killTimeoutMs;
    addEvent(alloc, "Killing", { DisplayMessage: `Sent interrupt. Waiting ${grace / 1000}s before force killing`, KillReason: description });
    this.allocChanged(alloc, "AllocationUpdated");
    void proc.stop(grace).then(finish, finish);
  }

  /**
   * POST /v1/allocation/:id/stop: the allocation is stopped (DesiredStatus stop, task
   * killed) and, while its job still wants that name, a replacement is placed at once
   * through an evaluation triggered by "alloc-stop" (Nomad: "stops and reschedules").
   * Undefined for an unknown allocation.
   */
  stopAndReplace(allocId: string): { evalId: string; index: number } | undefined {
    const alloc = this.allocs.get(allocId);
    if (!alloc) return undefined;
    const job = this.jobs.get(key(alloc.namespace, alloc.jobId));
    if (!job) return undefined;
    const evaluation = this.createEval(job, "alloc-stop");
    const wasLive = isLive(alloc);
    // As a real 1.1.2 agent words it: the stop is a migration (DesiredTransition.Migrate).
    alloc.migrate = true;
    this.stopAllocation(alloc, "alloc is being migrated");
    const group = (job.spec["TaskGroups"] as Json[]).find((g) => g["Name"] === alloc.taskGroup);
    const wanted = !job.stop && job.createIndex === alloc.jobCreateIndex && group !== undefined && alloc.nameIndex < Number(group["Count"]);
    const taken = this.jobAllocs(job).some((a) => a !== alloc && a.nameIndex === alloc.nameIndex && a.taskGroup === alloc.taskGroup && isLive(a));
    if (wasLive && wanted && !taken) this.place(job, group, alloc.nameIndex, evaluation.id, alloc);
    return { evalId: evaluation.id, index: evaluation.modifyIndex };
  }

  /** Kills the allocation's process as a crash would (not an emulator stop): the allocation fails. */
  async killAllocation(allocId: string, signal: NodeJS.Signals = "SIGKILL"): Promise<void> {
    const alloc = this.allocs.get(allocId);
    if (!alloc) throw new Error(`emulator: no allocation ${allocId}`);
    const proc = alloc.process;
    if (!proc) throw new Error(`emulator: allocation ${alloc.name} (${allocId}) has no running process (ClientStatus ${alloc.clientStatus})`);
    proc.child.kill(signal);
    await proc.exited;
  }

  /** New placements go to a fresh node (the old one keeps its allocations running). */
  placeOnNewNode(): string {
    this.nodeGeneration += 1;
    this.nodeId = randomUUID();
    this.nodeName = `emulator-node-${this.nodeGeneration}`;
    return this.nodeId;
  }

  /** New placements go back to a node seen before (its NodeID), e.g. the first one. */
  placeOnNode(nodeId: string): void {
    const seen = [...this.allocs.values()].find((a) => a.nodeId === nodeId);
    if (!seen) throw new Error(`emulator: no allocation was ever placed on node ${nodeId}`);
    this.nodeId = nodeId;
    this.nodeName = seen.nodeName;
  }

  /** SIGSTOP to the allocation's server: alive to the kernel (connections accepted), silent to clients. */
  freezeAllocation(allocId: string): void {
    const proc = this.allocs.get(allocId)?.process;
    if (!proc) throw new Error(`emulator: allocation ${allocId} has no running process`);
    proc.child.kill("SIGSTOP");
  }

  /**
   * The node goes down: README l.238 "Scale-down" step 1 (allocations on lost nodes are always
   * stopped) and "ClientStatus ... lost". README: nothing on replacement timing; Nomad places
   * replacements for lost allocations without the reschedule delay, on another node — here a
   * fresh node takes over at once.
   */
  async loseNode(): Promise<void> {
    const lost = [...this.allocs.values()].filter((a) => a.nodeId === this.nodeId && isLive(a));
    this.nodeGeneration += 1;
    this.nodeId = randomUUID();
    this.nodeName = `emulator-node-${this.nodeGeneration}`;
    const exits: Promise<unknown>[] = [];
    for (const alloc of lost) {
      alloc.ending = true;
      if (alloc.process) {
        alloc.process.child.kill("SIGKILL");
        exits.push(alloc.process.exited);
      }
      alloc.desiredStatus = "stop";
      alloc.desiredDescription = "alloc is lost since its node is down";
      alloc.clientStatus = "lost";
      alloc.clientDescription = "alloc is lost since its node is down";
      alloc.task.State = "dead";
      alloc.task.FinishedAt = new Date().toISOString();
      this.allocChanged(alloc, "AllocationUpdated");
    }
    await Promise.all(exits);
    for (const alloc of lost) this.scheduleReschedule(alloc, 0);
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const wake of [...this.sleepers]) wake();
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) w();
    await Promise.allSettled([...this.starting]);
    await Promise.allSettled(
      [...this.allocs.values()].map(async (a) => {
        a.ending = true;
        await a.process?.stop(2_000);
      }),
    );
  }

  /** A delay that ends early (resolves) when the cluster closes, so no start is left hanging. */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(t);
        this.timers.delete(t);
        this.sleepers.delete(wake);
        resolve();
      };
      const t = setTimeout(wake, ms);
      this.timers.add(t);
      this.sleepers.add(wake);
    });
  }

  // ------------------------------------------------------------------ wire shapes

  /** structs.Job as GET /v1/job/:id prints it: the submitted spec plus server fields. */
  jobWire(job: EmulatedJob): Json {
    return {
      Region: "global",
      Priority: 50,
      Datacenters: ["*"],
      NodePool: "default",
      ...job.spec,
      ID: job.id,
      Name: job.spec["Name"] ?? job.id,
      Namespace: job.namespace,
      Stop: job.stop,
      Status: job.status,
      StatusDescription: "",
      Stable: false,
      Version: job.version,
      SubmitTime: job.submitTime,
      CreateIndex: job.createIndex,
      ModifyIndex: job.modifyIndex,
      JobModifyIndex: job.jobModifyIndex,
    };
  }
}

function key(namespace: string, id: string): string {
  return `${namespace}\u0000${id}`;
}

export function jobKey(namespace: string, id: string): string {
  return key(namespace, id);
}

/** Neither stopped by the server nor terminal on the client. */
/**
 * A job's or group's `${node.unique.id}` constraints (operators "!=" and "=") rule out this
 * node. The emulator's nodes have no other attributes: other constraints always hold.
 */
function nodeExcluded(job: Json, group: Json, nodeId: string): boolean {
  const constraints = [...((job["Constraints"] as Json[] | undefined) ?? []), ...((group["Constraints"] as Json[] | undefined) ?? [])];
  return constraints.some(
    (c) => c["LTarget"] === "${node.unique.id}" && ((c["Operand"] === "!=" && c["RTarget"] === nodeId) || (c["Operand"] === "=" && c["RTarget"] !== nodeId)),
  );
}

export function isLive(a: EmulatedAllocation): boolean {
  return a.desiredStatus === "run" && (a.clientStatus === "pending" || a.clientStatus === "running");
}

/**
 * README l.265-267 "What the scale endpoint requires": a service job without an update block gets the
 * default strategy (MaxParallel 1) and so deployments; `"Update": {"MaxParallel": 0}` (job
 * level, and no group overriding it) creates none.
 */
function createsDeployments(spec: Json): boolean {
  if (spec["Type"] !== "service") return false;
  const jobUpdate = spec["Update"] as Json | null | undefined;
  const jobMax = jobUpdate?.["MaxParallel"];
  return (spec["TaskGroups"] as Json[]).some((g) => {
    const groupMax = (g["Update"] as Json | null | undefined)?.["MaxParallel"];
    const max = groupMax ?? jobMax ?? 1;
    return Number(max) > 0;
  });
}

function addEvent(alloc: EmulatedAllocation, type: string, fields: Partial<TaskEventRecord>): void {
  alloc.task.Events.push({
    Type: type,
    Time: nowNs(),
    Message: "",
    DisplayMessage: "",
    Details: {},
    FailsTask: false,
    DriverError: "",
    DriverMessage: "",
    SetupError: "",
    ExitCode: 0,
    Signal: 0,
    KillReason: "",
    ...fields,
  });
}

/** The `flag value` pairs of `args` whose flag is one of `flags`, in order. */
function passedArgs(args: unknown, flags: readonly string[]): string[] {
  if (!Array.isArray(args)) return [];
  const out: string[] = [];
  for (let i = 0; i < args.length - 1; i++) if (flags.includes(String(args[i]))) out.push(String(args[i]), String(args[++i]));
  return out;
}

function argValue(args: unknown, flag: string): number | undefined {
  if (!Array.isArray(args)) return undefined;
  const i = args.indexOf(flag);
  if (i < 0) return undefined;
  const n = Number(args[i + 1]);
  return Number.isInteger(n) && n > 0 ? n : undefined;
}

function signalNumber(signal: NodeJS.Signals): number {
  const table: Partial<Record<NodeJS.Signals, number>> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGABRT: 6, SIGKILL: 9, SIGSEGV: 11, SIGTERM: 15 };
  return table[signal] ?? 0;
}

/** Drops zero values: README l.88 "Encoding" — Allocation, Evaluation, NetworkResource, Port omit them. */
export function omitEmpty(obj: Json): Json {
  const out: Json = {};
  for (const [k, v] of Object.entries(obj)) {
    if (v === undefined || v === null || v === "" || v === 0 || v === 0n || v === false) continue;
    if (Array.isArray(v) && v.length === 0) continue;
    if (typeof v === "object" && !Array.isArray(v) && typeof v !== "bigint" && Object.keys(v as object).length === 0) continue;
    out[k] = v;
  }
  return out;
}

function taskEventWire(e: TaskEventRecord): Json {
  // structs.TaskEvent has no omitempty marker: every field is printed (as in the 2021 sample).
  return {
    Type: e.Type,
    Time: e.Time,
    Message: e.Message,
    DisplayMessage: e.DisplayMessage,
    Details: e.Details,
    FailsTask: e.FailsTask,
    RestartReason: "",
    SetupError: e.SetupError,
    DriverError: e.DriverError,
    ExitCode: e.ExitCode,
    Signal: e.Signal,
    KillTimeout: 0,
    KillError: "",
    KillReason: e.KillReason,
    StartDelay: 0,
    DownloadError: "",
    ValidationError: "",
    DiskLimit: 0,
    FailedSibling: "",
    VaultError: "",
    TaskSignalReason: "",
    TaskSignal: "",
    DriverMessage: e.DriverMessage,
    GenericSource: "",
  };
}

function taskStatesWire(alloc: EmulatedAllocation): Json {
  const t = alloc.task;
  return {
    [alloc.taskName]: {
      State: t.State,
      Failed: t.Failed,
      Restarts: t.Restarts,
      LastRestart: null,
      StartedAt: t.StartedAt,
      FinishedAt: t.FinishedAt,
      Events: t.Events.map(taskEventWire),
      Paused: "",
    },
  };
}

/**
 * README l.226-229 "Dynamic ports: where they appear": the canonical AllocatedResources.Shared.Ports
 * mapping {Label, Value: host port, To: 8080, HostIP} and the compatibility copy in
 * Shared.Networks[0]. README: nothing on when they appear; Nomad assigns them at placement,
 * the emulator only knows the port once the server listens (port 0), so pending allocations
 * carry no ports yet.
 */
function allocatedResourcesWire(alloc: EmulatedAllocation): Json {
  const group = ((alloc.jobSnapshot["TaskGroups"] as Json[]) ?? []).find((g) => g["Name"] === alloc.taskGroup);
  const dynamic = (((group?.["Networks"] as Json[] | undefined)?.[0]?.["DynamicPorts"] as Json[] | undefined) ?? []) as Json[];
  const shared: Json = { DiskMB: 300 };
  if (alloc.port !== undefined) {
    const labels = dynamic.length ? dynamic : [{ Label: "http" }];
    shared["Ports"] = labels.map((p) => omitEmpty({ Label: p["Label"], Value: alloc.port, To: p["To"], HostIP: "127.0.0.1" }));
    shared["Networks"] = [
      omitEmpty({
        Mode: "host",
        IP: "127.0.0.1",
        DynamicPorts: labels.map((p) => omitEmpty({ Label: p["Label"], Value: alloc.port, To: p["To"], HostNetwork: "default" })),
      }),
    ];
  }
  const task = ((group?.["Tasks"] as Json[] | undefined) ?? [])[0];
  const resources = (task?.["Resources"] as Json | undefined) ?? {};
  return {
    Tasks: { [alloc.taskName]: { Cpu: { CpuShares: resources["CPU"] ?? 100, ReservedCores: null }, Memory: { MemoryMB: resources["MemoryMB"] ?? 300, MemoryMaxMB: 0 }, Networks: null, Devices: null } },
    TaskLifecycles: { [alloc.taskName]: null },
    Shared: shared,
  };
}

/** GET /v1/allocation/:id (withJob) or an Allocation event payload (without Job). */
export function allocationWire(alloc: EmulatedAllocation, options: { withJob: boolean }): Json {
  return omitEmpty({
    ID: alloc.id,
    Namespace: alloc.namespace,
    EvalID: alloc.evalId,
    Name: alloc.name,
    NodeID: alloc.nodeId,
    NodeName: alloc.nodeName,
    JobID: alloc.jobId,
    Job: options.withJob ? alloc.jobSnapshot : undefined,
    TaskGroup: alloc.taskGroup,
    AllocatedResources: allocatedResourcesWire(alloc),
    DesiredStatus: alloc.desiredStatus,
    DesiredDescription: alloc.desiredDescription,
    ClientStatus: alloc.clientStatus,
    ClientDescription: alloc.clientDescription,
    TaskStates: taskStatesWire(alloc),
    PreviousAllocation: alloc.previousAllocation,
    NextAllocation: alloc.nextAllocation,
    RescheduleTracker: alloc.rescheduleEvents.length ? { Events: alloc.rescheduleEvents } : undefined,
    CreateIndex: alloc.createIndex,
    ModifyIndex: alloc.modifyIndex,
    AllocModifyIndex: alloc.allocModifyIndex,
    CreateTime: alloc.createTime,
    ModifyTime: alloc.modifyTime,
  });
}

/**
 * GET /v1/job/:id/allocations element: structs.AllocListStub has no omitempty marker, so
 * zero values are printed; README l.140 "No ports here": no AllocatedResources.
 */
export function allocationStubWire(alloc: EmulatedAllocation): Json {
  return {
    ID: alloc.id,
    EvalID: alloc.evalId,
    Name: alloc.name,
    Namespace: alloc.namespace,
    NodeID: alloc.nodeId,
    NodeName: alloc.nodeName,
    JobID: alloc.jobId,
    JobType: "service",
    JobVersion: alloc.jobVersion,
    TaskGroup: alloc.taskGroup,
    DesiredStatus: alloc.desiredStatus,
    DesiredDescription: alloc.desiredDescription,
    ClientStatus: alloc.clientStatus,
    ClientDescription: alloc.clientDescription,
    DesiredTransition: { Migrate: alloc.migrate ? true : null, Reschedule: null, ForceReschedule: null, NoShutdownDelay: null },
    TaskStates: taskStatesWire(alloc),
    DeploymentStatus: null,
    FollowupEvalID: "",
    NextAllocation: alloc.nextAllocation,
    RescheduleTracker: alloc.rescheduleEvents.length ? { Events: alloc.rescheduleEvents } : null,
    PreemptedAllocations: null,
    PreemptedByAllocation: "",
    CreateIndex: alloc.createIndex,
    ModifyIndex: alloc.modifyIndex,
    CreateTime: alloc.createTime,
    ModifyTime: alloc.modifyTime,
  };
}

export function evaluationWire(e: EmulatedEvaluation): Json {
  return omitEmpty({
    ID: e.id,
    Namespace: e.namespace,
    Priority: 50,
    Type: "service",
    TriggeredBy: e.triggeredBy,
    JobID: e.jobId,
    JobModifyIndex: e.jobModifyIndex,
    Status: "complete",
    PreviousEval: e.previousEval,
    QueuedAllocations: e.queued,
    FailedTGAllocs: e.failedTGAllocs,
    SnapshotIndex: e.createIndex,
    CreateIndex: e.createIndex,
    ModifyIndex: e.modifyIndex,
    CreateTime: e.createTime,
    ModifyTime: e.createTime,
  });
}
