/**
 * A stand-in for a Nomad agent's HTTP API, for integration tests (no Nomad binary runs on
 * these machines). It serves the endpoints `src/nomad/client.ts` uses, with Nomad's shapes
 * and status codes, and runs each allocation as a real `slotpool sandbox-server` process on
 * a free loopback port. Fault injection: kill an allocation, lose the node, make endpoints
 * fail or hang, delay starts, fail image pulls.
 *
 *   const nomad = await startNomadEmulator();
 *   const client = new NomadClient({ address: nomad.address });
 *   ...
 *   await nomad.stop();
 *
 * Comments marked "README:" cite shared/nomad-api/README.md; "README: nothing" marks a
 * guess the reference does not cover. The lifecycle lives in nomad-emulator-cluster.ts.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringifyNomadJson } from "../../src/nomad/json.js";
import { startSandboxProcess } from "../../src/pool/sandbox-process.js";
import {
  EmulatedCluster,
  allocationStubWire,
  allocationWire,
  evaluationWire,
  isLive,
  jobKey,
  omitEmpty,
  type EmittedEvent,
  type EmulatedJob,
  type Json,
  type ProcessFactory,
} from "./nomad-emulator-cluster.js";

export type { ProcessFactory } from "./nomad-emulator-cluster.js";

export interface NomadEmulatorOptions {
  /** When set, every call but /v1/status/leader needs this token (X-Nomad-Token or Bearer). */
  token?: string;
  /** Where allocation data dirs go (default: a fresh temp dir, removed on stop). */
  dataDir?: string;
  /** Replaces the real sandbox server (only while developing the emulator itself). */
  startProcess?: ProcessFactory;
  /** Extra `slotpool sandbox-server` arguments for every allocation (e.g. ["--no-network"]). */
  serverArgs?: string[];
  /** Delay before a failed allocation is replaced (default 500 ms; -1: never reschedule). */
  rescheduleDelayMs?: number;
  /** How long a deployment blocks scaling, for jobs whose update block creates deployments (default 3000 ms). */
  deploymentMs?: number;
  /** How long a stopped allocation's server gets after SIGTERM before SIGKILL (default 2000 ms; Nomad: the task's kill_timeout). */
  killTimeoutMs?: number;
  /** List jobs with their Meta on `?meta=true` (default true; false: like Nomad 1.1, which ignores it). */
  listMeta?: boolean;
  /** Datacenters may be glob patterns such as "*" (default true, Nomad >= 1.6; false: like Nomad 1.1). The node is in "dc1". */
  datacenterGlobs?: boolean;
  /** Interval of the `{}` heartbeat on the event stream (Nomad: 30 s; default here 30 s). */
  heartbeatMs?: number;
  /** How long a sandbox server may take to start listening (default 20 s). */
  processStartTimeoutMs?: number;
}

export interface RequestRecord {
  method: string;
  path: string;
  query: Record<string, string[]>;
  token: string | undefined;
}

export interface NomadEmulator {
  /** `http://127.0.0.1:<port>`: the NOMAD_ADDR to use. */
  address: string;
  stop(): Promise<void>;
  /** Kills an allocation's server process (SIGKILL by default) as a crash would: the allocation fails. */
  killAllocation(allocId: string, signal?: NodeJS.Signals): Promise<void>;
  /**
   * Freezes the allocation's server (SIGSTOP) as a node that vanished silently would: its
   * sockets stay open and its port accepts connections, but nothing answers. Nomad is not
   * told. Stopping the emulator ends it as usual (SIGKILL reaches a stopped process).
   */
  freezeAllocation(allocId: string): void;
  /** A second node joins and new allocations are placed there from now on; its NodeID. */
  placeOnNewNode(): string;
  /** New placements go back to a node seen before (its NodeID). */
  placeOnNode(nodeId: string): void;
  /** The node goes down: its allocations become `lost`, replacements start on a fresh node. */
  loseNode(): Promise<void>;
  /**
   * The next `times` requests whose "METHOD /path" matches get `status` with a plain-text
   * body (default "emulated failure"), or never get an answer ('hang'). A string matches as a
   * substring of "METHOD /path"; a RegExp is tested against it.
   */
  failNext(endpoint: string | RegExp, status: number | "hang", times?: number, message?: string): void;
  /** Delay between an allocation's placement and its start (ms). */
  delayAllocationStartMs: number;
  /** Allocations of `jobId` (or all, with `true`) fail with a docker-like image pull error from now on. */
  failImagePull(jobId: string | true, message?: string): void;
  /** Stops failing image pulls. */
  clearImagePullFailures(): void;
  /** Every allocation as GET /v1/allocation/:id prints it (oldest first), optionally of one job. */
  allocations(jobId?: string): Json[];
  /** Resolves once `predicate(allocations(jobId))` holds, re-checked after every change. */
  waitForAllocations(jobId: string, predicate: (allocs: Json[]) => boolean, timeoutMs?: number): Promise<Json[]>;
  /** The current raft-like index. */
  index(): number;
  /** Every request received, oldest first. */
  requests: RequestRecord[];
}

interface Injection {
  match: string | RegExp;
  status: number | "hang";
  remaining: number;
  message: string;
}

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const MAX_WAIT_MS = 300_000;

export async function startNomadEmulator(options: NomadEmulatorOptions = {}): Promise<NomadEmulator> {
  const ownDataDir = options.dataDir === undefined;
  const dataDir = options.dataDir ?? mkdtempSync(join(tmpdir(), "nomad-emulator-"));
  // The sandbox server runs slot commands as other uids (bubblewrap): they must be able to
  // traverse every parent of their workspace.
  if (ownDataDir) chmodSync(dataDir, 0o711);
  const cluster = new EmulatedCluster({
    dataDir,
    startProcess: options.startProcess ?? startSandboxProcess,
    serverArgs: options.serverArgs ?? [],
    rescheduleDelayMs: options.rescheduleDelayMs ?? 500,
    deploymentMs: options.deploymentMs ?? 3_000,
    killTimeoutMs: options.killTimeoutMs ?? 2_000,
    processStartTimeoutMs: options.processStartTimeoutMs ?? 20_000,
    datacenterGlobs: options.datacenterGlobs ?? true,
  });
  const heartbeatMs = options.heartbeatMs ?? 30_000;
  const injections: Injection[] = [];
  const requests: RequestRecord[] = [];
  const sockets = new Set<Socket>();
  const streams = new Set<ServerResponse>();

  const server: Server = createServer((req, res) => {
    void handle(req, res).catch((err: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      const status = err instanceof HttpError ? err.status : 500;
      sendText(res, status, err instanceof Error ? err.message : String(err));
    });
  });
  server.on("connection", (socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // Prefixed, not resolved against a base: a target like "//x" must stay a path.
    const url = new URL(`http://127.0.0.1${(req.url ?? "/").startsWith("/") ? "" : "/"}${req.url ?? "/"}`);
    const method = req.method ?? "GET";
    const path = url.pathname;
    const query: Record<string, string[]> = {};
    for (const [k, v] of url.searchParams) (query[k] ??= []).push(v);
    const token = presentedToken(req);
    requests.push({ method, path, query, token });

    const injection = injections.find((i) => i.remaining > 0 && matches(i.match, `${method} ${path}`));
    if (injection) {
      injection.remaining -= 1;
      // A hung request is never answered; the socket closes when the client gives up or on stop().
      if (injection.status === "hang") return;
      sendText(res, injection.status, injection.message);
      return;
    }

    // README l.59, l.70 "Base URL and methods": every path starts with /v1/; unknown paths outside the
    // routed prefixes get 404 with an empty body.
    if (!path.startsWith("/v1/")) {
      sendText(res, 404, "");
      return;
    }
    // README l.100 "GET /v1/status/leader": no ACL needed.
    if (path === "/v1/status/leader") {
      only(method, ["GET"]);
      // README l.101: the leader's RPC address, a bare JSON string, no X-Nomad-Index.
      sendJson(res, 200, "127.0.0.1:4647");
      return;
    }
    if (path === "/v1/event/stream") {
      only(method, ["GET"]);
      await eventStream(req, res, url, token);
      return;
    }
    checkAcl(token);

    const namespace = url.searchParams.get("namespace") || "default";
    const segments = path.split("/").slice(2).map(decodeURIComponent); // after "/v1"
    const [resource, id, sub, ...rest] = segments;
    if (rest.length) throw new HttpError(404, "resource not found");

    if (resource === "jobs" && id === undefined) {
      if (method === "GET") return listJobs(res, url, namespace);
      only(method, ["POST", "PUT"]);
      return registerJob(req, res, url, undefined);
    }
    if (resource === "job" && id) {
      if (sub === undefined) {
        if (method === "GET") return readJob(req, res, url, namespace, id);
        if (method === "DELETE") return deregisterJob(res, url, namespace, id);
        only(method, ["POST", "PUT"]);
        return registerJob(req, res, url, id);
      }
      if (sub === "allocations") {
        only(method, ["GET"]);
        return jobAllocations(req, res, url, namespace, id);
      }
      if (sub === "evaluations") {
        only(method, ["GET"]);
        const evals = [...cluster.evals.values()].filter((e) => e.namespace === namespace && e.jobId === id).map(evaluationWire);
        return sendJson(res, 200, evals, readHeaders(cluster.evalsTableIndex));
      }
      if (sub === "scale") {
        if (method === "GET") return scaleStatus(req, res, url, namespace, id);
        only(method, ["POST", "PUT"]);
        return scaleJob(req, res, url, namespace, id);
      }
      if (sub === "deployment") {
        // The latest deployment, or null (a real agent answers `null` for a job without one).
        only(method, ["GET"]);
        const job = findJob(namespace, id);
        const d = job?.deployment;
        if (!job || !d) return sendJson(res, 200, null, readHeaders(cluster.index));
        const active = cluster.deploymentActive(job);
        return sendJson(
          res,
          200,
          {
            ID: d.id,
            Namespace: job.namespace,
            JobID: job.id,
            JobVersion: d.jobVersion,
            JobCreateIndex: job.createIndex,
            Status: active ? "running" : "successful",
            StatusDescription: active ? "Deployment is running" : "Deployment completed successfully",
            CreateIndex: d.createIndex,
            ModifyIndex: d.createIndex,
          },
          readHeaders(cluster.index),
        );
      }
      if (sub === "summary") {
        only(method, ["GET"]);
        return jobSummary(res, namespace, id);
      }
    }
    if (resource === "allocation" && id && sub === undefined) {
      only(method, ["GET"]);
      return readAllocation(req, res, url, id);
    }
    if (resource === "allocation" && id && sub === "stop") {
      // Nomad's "Stop Allocation": POST (PUT accepted), answers {EvalID, Index}; 404 for an unknown id.
      only(method, ["POST", "PUT"]);
      const stopped = cluster.stopAndReplace(id);
      if (!stopped) throw new HttpError(404, "alloc not found");
      return sendJson(res, 200, { EvalID: stopped.evalId, Index: stopped.index }, { "X-Nomad-Index": String(stopped.index) });
    }
    if (resource === "evaluation" && id && sub === undefined) {
      only(method, ["GET"]);
      const e = cluster.evals.get(id);
      // README l.194 "GET /v1/evaluation/:eval_id": 404 `eval not found`.
      if (!e) throw new HttpError(404, "eval not found");
      return sendJson(res, 200, evaluationWire(e), readHeaders(e.modifyIndex));
    }
    // README: nothing on other /v1/ paths the client never calls; the emulator answers 404.
    throw new HttpError(404, "resource not found");
  }

  // ------------------------------------------------------------------ ACL

  function presentedToken(req: IncomingMessage): string | undefined {
    // README l.60 "Token": X-Nomad-Token, or Authorization: Bearer; X-Nomad-Token wins.
    const header = req.headers["x-nomad-token"];
    if (typeof header === "string" && header) return header;
    const auth = req.headers["authorization"];
    const m = typeof auth === "string" ? /^Bearer\s+(.+)$/i.exec(auth) : null;
    return m?.[1];
  }

  function checkAcl(token: string | undefined): void {
    if (!options.token) return;
    // README l.66 "Errors are plain text": messages ending in "Permission denied" or "ACL token
    // not found" become 403. README: nothing on which one a missing vs. unknown token gets;
    // the emulator answers the anonymous caller "Permission denied" and a wrong token
    // "ACL token not found".
    if (token === undefined) throw new HttpError(403, "Permission denied");
    if (token !== options.token) throw new HttpError(403, "ACL token not found");
  }

  // ------------------------------------------------------------------ jobs

  function listJobs(res: ServerResponse, url: URL, namespace: string): void {
    const prefix = url.searchParams.get("prefix") ?? "";
    const withMeta = url.searchParams.get("meta") === "true";
    const stubs = [...cluster.jobs.values()]
      .filter((j) => (namespace === "*" || j.namespace === namespace) && j.id.startsWith(prefix))
      .sort((a, b) => a.id.localeCompare(b.id))
      .map((j) => {
        const stub: Json = {
          ID: j.id,
          ParentID: "",
          Name: j.spec["Name"] ?? j.id,
          Namespace: j.namespace,
          Datacenters: j.spec["Datacenters"] ?? ["*"],
          Type: j.spec["Type"],
          Priority: 50,
          Periodic: false,
          ParameterizedJob: false,
          Stop: j.stop,
          Status: j.status,
          StatusDescription: "",
          JobSummary: summaryWire(j),
          CreateIndex: j.createIndex,
          ModifyIndex: j.modifyIndex,
          JobModifyIndex: j.jobModifyIndex,
          SubmitTime: j.submitTime,
        };
        // jobs.mdx "List Jobs": meta=true includes each job's meta (a real 1.1.2 agent ignores
        // the parameter: listMeta false).
        if (withMeta && options.listMeta !== false) stub["Meta"] = j.spec["Meta"] ?? null;
        return stub;
      });
    sendJson(res, 200, stubs, readHeaders(cluster.jobsTableIndex));
  }

  async function registerJob(req: IncomingMessage, res: ServerResponse, url: URL, pathId: string | undefined): Promise<void> {
    const body = await readJsonBody(req);
    // README l.121 "POST /v1/jobs" errors: 400 for a missing Job / ID, or an ID not matching the URL.
    const job = body["Job"] as Json | undefined;
    if (!job || typeof job !== "object") throw new HttpError(400, "Job must be specified");
    if (typeof job["ID"] !== "string" || job["ID"] === "") throw new HttpError(400, "Job ID hasn't been provided");
    if (pathId !== undefined && job["ID"] !== pathId) throw new HttpError(400, "Job ID does not match name");
    // README l.61 "Namespace": ?namespace=, then the body's Namespace, then Job.Namespace, then default.
    const namespace = url.searchParams.get("namespace") || (body["Namespace"] as string) || (job["Namespace"] as string) || "default";
    // README l.123: validation failures come back as uncoded errors, i.e. 500 with a multierror text.
    const groups = job["TaskGroups"];
    if (!Array.isArray(groups) || groups.length === 0) throw new HttpError(500, "1 error occurred:\n\t* Missing job task groups\n\n");
    for (const g of groups as Json[]) {
      if (typeof g["Name"] !== "string" || !g["Name"]) throw new HttpError(500, "1 error occurred:\n\t* Missing task group name\n\n");
      if (g["Count"] !== undefined && g["Count"] !== null && (!Number.isInteger(g["Count"]) || (g["Count"] as number) < 0)) {
        throw new HttpError(500, `1 error occurred:\n\t* Task group ${g["Name"]} validation failed: Task group count can't be negative\n\n`);
      }
      if (!Array.isArray(g["Tasks"]) || g["Tasks"].length === 0) throw new HttpError(500, `1 error occurred:\n\t* Task group ${g["Name"]} validation failed: Missing tasks for task group\n\n`);
    }
    const { job: registered, evalId, evalIndex } = cluster.register(namespace, job, body["PreserveCounts"] === true);
    // README l.116, l.72: structs.JobRegisterResponse; writes set only X-Nomad-Index.
    sendJson(res, 200, { EvalID: evalId, EvalCreateIndex: evalIndex, JobModifyIndex: registered.jobModifyIndex, Warnings: "", Index: evalIndex, LastContact: 0, KnownLeader: false, NextToken: "" }, { "X-Nomad-Index": String(evalIndex) });
  }

  function findJob(namespace: string, id: string): EmulatedJob | undefined {
    return cluster.jobs.get(jobKey(namespace, id));
  }

  async function readJob(req: IncomingMessage, res: ServerResponse, url: URL, namespace: string, id: string): Promise<void> {
    const { index, wait } = blocking(url);
    // README l.80 "Blocking queries": the job's ModifyIndex, or the jobs table index if missing.
    const current = () => findJob(namespace, id)?.modifyIndex ?? cluster.jobsTableIndex;
    await cluster.blockUntil(current, index, wait, closed(res));
    const job = findJob(namespace, id);
    // README l.131 "GET /v1/job/:job_id": 404 with body `job not found`.
    if (!job) throw new HttpError(404, "job not found");
    sendJson(res, 200, cluster.jobWire(job), readHeaders(job.modifyIndex));
  }

  function deregisterJob(res: ServerResponse, url: URL, namespace: string, id: string): void {
    const purgeRaw = url.searchParams.get("purge");
    // README l.180 "DELETE": a purge value that does not parse is an uncoded error, so 500.
    if (purgeRaw !== null && !["true", "false", "1", "0", "t", "f", "TRUE", "FALSE", "True", "False", ""].includes(purgeRaw)) {
      throw new HttpError(500, `Failed to parse value of "purge" (${purgeRaw}) as a bool: strconv.ParseBool: parsing "${purgeRaw}": invalid syntax`);
    }
    const purge = ["true", "1", "t", "TRUE", "True"].includes(purgeRaw ?? "");
    const job = findJob(namespace, id);
    // README l.179: deleting a job that does not exist returns 200 with zero values.
    if (!job) {
      sendJson(res, 200, { EvalID: "", EvalCreateIndex: 0, JobModifyIndex: 0, VolumeEvalID: "", VolumeEvalIndex: 0, Index: 0, LastContact: 0, KnownLeader: false, NextToken: "" }, { "X-Nomad-Index": "0" });
      return;
    }
    const { evalId, evalIndex } = cluster.deregister(job, purge);
    sendJson(res, 200, { EvalID: evalId, EvalCreateIndex: evalIndex, JobModifyIndex: job.jobModifyIndex, VolumeEvalID: "", VolumeEvalIndex: 0, Index: evalIndex, LastContact: 0, KnownLeader: false, NextToken: "" }, { "X-Nomad-Index": String(evalIndex) });
  }

  async function jobAllocations(req: IncomingMessage, res: ServerResponse, url: URL, namespace: string, id: string): Promise<void> {
    const { index, wait } = blocking(url);
    // README l.81 "Blocking queries": the whole allocs table index, so any allocation change wakes it.
    await cluster.blockUntil(() => cluster.allocsTableIndex, index, wait, closed(res));
    const all = url.searchParams.get("all") === "true";
    const job = findJob(namespace, id);
    // README l.136-137 "GET /v1/job/:job_id/allocations": `[]` for an unknown job; without `all` only the
    // current job instance (same job CreateIndex); a purged job's allocations are still listed.
    const allocs = [...cluster.allocs.values()]
      .filter((a) => a.namespace === namespace && a.jobId === id && (all || !job || a.jobCreateIndex === job.createIndex))
      // README l.139: the v2.0.x doc says the usual order is by allocation ID.
      .sort((a, b) => a.id.localeCompare(b.id))
      .map(allocationStubWire);
    sendJson(res, 200, allocs, readHeaders(cluster.allocsTableIndex));
  }

  async function readAllocation(req: IncomingMessage, res: ServerResponse, url: URL, id: string): Promise<void> {
    const { index, wait } = blocking(url);
    // README l.82 "Blocking queries": the allocation's ModifyIndex.
    await cluster.blockUntil(() => cluster.allocs.get(id)?.modifyIndex ?? 0, index, wait, closed(res));
    const alloc = cluster.allocs.get(id);
    // README l.149 "GET /v1/allocation/:alloc_id": 404 `alloc not found`.
    if (!alloc) throw new HttpError(404, "alloc not found");
    sendJson(res, 200, allocationWire(alloc, { withJob: true }), readHeaders(alloc.modifyIndex));
  }

  async function scaleJob(req: IncomingMessage, res: ServerResponse, url: URL, namespace: string, id: string): Promise<void> {
    const body = await readJsonBody(req);
    // README l.247-263 "What the scale endpoint requires", in its order.
    if (body["Error"] !== undefined && typeof body["Error"] !== "boolean") {
      throw new HttpError(400, `json: cannot unmarshal ${typeof body["Error"]} into Go struct field ScalingRequest.Error of type bool`);
    }
    const target = (body["Target"] ?? {}) as Record<string, string>;
    const group = target["Group"];
    if (!group) throw new HttpError(400, "missing task group name for scaling action");
    if (target["Job"] !== undefined && target["Job"] !== id) throw new HttpError(400, "job ID in payload did not match URL");
    if (target["Namespace"] !== undefined && target["Namespace"] !== namespace) throw new HttpError(400, "namespace in payload did not match header");
    const count = body["Count"] === undefined || body["Count"] === null ? undefined : Number(body["Count"]);
    if (count !== undefined && (!Number.isInteger(count) || count < 0)) throw new HttpError(400, "scaling action count can't be negative");
    if (count !== undefined && body["Error"] === true) throw new HttpError(400, "scaling action should not contain count if error is true");
    const job = findJob(namespace, id);
    if (!job) throw new HttpError(404, `job "${id}" not found`);
    if (!(job.spec["TaskGroups"] as Json[]).some((g) => g["Name"] === group)) {
      throw new HttpError(400, `task group "${group}" specified for scaling does not exist in job`);
    }
    // README l.264: 400 while the job's latest deployment is active (jobs whose update block
    // creates deployments). A real 1.1.2 agent stores the refused count all the same.
    if (count !== undefined && cluster.deploymentActive(job)) {
      cluster.storeRefusedCount(job, group, count);
      throw new HttpError(400, "job scaling blocked due to active deployment");
    }
    const { evalId, evalIndex } = cluster.scale(job, group, count, String(body["Message"] ?? ""), body["Error"] === true, (body["Meta"] as Json | undefined) ?? null);
    const index = evalIndex || cluster.index;
    sendJson(res, 200, { EvalID: evalId, EvalCreateIndex: evalIndex, JobModifyIndex: job.jobModifyIndex, Warnings: "", Index: index, LastContact: 0, KnownLeader: false, NextToken: "" }, { "X-Nomad-Index": String(index) });
  }

  async function scaleStatus(req: IncomingMessage, res: ServerResponse, url: URL, namespace: string, id: string): Promise<void> {
    const { index, wait } = blocking(url);
    // README l.84 "Blocking queries": the largest of job ModifyIndex, allocation and scaling indexes.
    const current = () => Math.max(findJob(namespace, id)?.modifyIndex ?? 0, cluster.allocsTableIndex);
    await cluster.blockUntil(current, index, wait, closed(res));
    const job = findJob(namespace, id);
    if (!job) throw new HttpError(404, "job not found");
    const groups: Json = {};
    for (const g of job.spec["TaskGroups"] as Json[]) {
      const name = String(g["Name"]);
      const live = cluster.jobAllocs(job).filter((a) => a.taskGroup === name && isLive(a));
      // README l.165-168 "GET /v1/job/:job_id/scale": Desired = Count, Placed = non-terminal, Running =
      // of those running; Healthy/Unhealthy come from deployments (none here: 0).
      groups[name] = {
        Desired: g["Count"],
        Placed: live.length,
        Running: live.filter((a) => a.clientStatus === "running").length,
        Healthy: 0,
        Unhealthy: 0,
        Events: job.scaleEvents[name]?.length ? job.scaleEvents[name] : null,
      };
    }
    // README l.169: JobModifyIndex here is the job's ModifyIndex.
    sendJson(res, 200, { JobID: job.id, Namespace: job.namespace, JobCreateIndex: job.createIndex, JobModifyIndex: job.modifyIndex, JobStopped: job.stop, TaskGroups: groups }, readHeaders(current()));
  }

  function summaryWire(job: EmulatedJob): Json {
    const summary: Json = {};
    for (const g of job.spec["TaskGroups"] as Json[]) {
      const allocs = cluster.jobAllocs(job).filter((a) => a.taskGroup === g["Name"]);
      const n = (s: string) => allocs.filter((a) => a.clientStatus === s).length;
      summary[String(g["Name"])] = { Queued: 0, Complete: n("complete"), Failed: n("failed"), Running: n("running"), Starting: n("pending"), Lost: n("lost"), Unknown: 0 };
    }
    return { JobID: job.id, Namespace: job.namespace, Summary: summary, Children: { Pending: 0, Running: 0, Dead: 0 }, CreateIndex: job.createIndex, ModifyIndex: job.modifyIndex };
  }

  function jobSummary(res: ServerResponse, namespace: string, id: string): void {
    const job = findJob(namespace, id);
    if (!job) throw new HttpError(404, "job not found");
    sendJson(res, 200, summaryWire(job), readHeaders(job.modifyIndex));
  }

  // ------------------------------------------------------------------ event stream

  async function eventStream(req: IncomingMessage, res: ServerResponse, url: URL, token: string | undefined): Promise<void> {
    const indexRaw = url.searchParams.get("index");
    // README l.199 "GET /v1/event/stream": a bad index gives 400 `Unable to parse index: …`.
    if (indexRaw !== null && !/^\d+$/.test(indexRaw)) throw new HttpError(400, `Unable to parse index: strconv.ParseUint: parsing "${indexRaw}": invalid syntax`);
    const since = indexRaw === null ? 0 : Number(indexRaw);
    const filters = new Map<string, Set<string>>();
    for (const t of url.searchParams.getAll("topic")) {
      const m = /^([A-Za-z*]+)(?::(.+))?$/.exec(t);
      if (!m) throw new HttpError(400, `Invalid topic query: ${t}`);
      const set = filters.get(m[1]!) ?? new Set<string>();
      set.add(m[2] ?? "*");
      filters.set(m[1]!, set);
    }
    const namespace = url.searchParams.get("namespace") || "default";
    // README l.208 "Errors after connect": since 2.0 the handler writes 200 before the subscription
    // is authorised; an ACL failure shows only as the stream closing.
    res.writeHead(200, { "Content-Type": "application/json" });
    const authorised = !options.token || token === options.token;
    // README l.205: the heartbeat `{}` is sent first, on connect, then every 30 s.
    res.write("{}\n");
    if (!authorised) {
      res.end();
      return;
    }
    const wanted = (e: EmittedEvent) => {
      if (namespace !== "*" && e.Namespace !== namespace && e.Namespace !== "") return false;
      if (filters.size === 0) return true;
      const keys = filters.get(e.Topic) ?? filters.get("*");
      if (!keys) return false;
      return keys.has("*") || keys.has(e.Key) || (e.FilterKeys ?? []).some((k) => keys.has(k));
    };
    const send = (frame: { Index: number; Events: EmittedEvent[] }) => {
      const events = frame.Events.filter(wanted);
      if (events.length) res.write(stringifyNomadJson({ Index: frame.Index, Events: events }) + "\n");
    };
    for (const frame of cluster.eventLog) if (frame.Index > since) send(frame);
    const unsubscribe = cluster.onEvents(send);
    const heartbeat = setInterval(() => res.write("{}\n"), heartbeatMs);
    streams.add(res);
    await new Promise<void>((resolve) => res.once("close", () => resolve()));
    clearInterval(heartbeat);
    unsubscribe();
    streams.delete(res);
  }

  // ------------------------------------------------------------------ helpers

  function blocking(url: URL): { index: number; wait: number } {
    const indexRaw = url.searchParams.get("index");
    const waitRaw = url.searchParams.get("wait");
    // README l.70, l.78 "Blocking queries": bad values give 400 `Invalid index` / `Invalid wait time`;
    // default wait 5 min, capped at 300 s.
    if (indexRaw !== null && !/^\d+$/.test(indexRaw)) throw new HttpError(400, "Invalid index");
    let wait = MAX_WAIT_MS;
    if (waitRaw !== null) {
      const ms = parseGoDuration(waitRaw);
      if (ms === undefined) throw new HttpError(400, "Invalid wait time");
      wait = Math.min(ms, MAX_WAIT_MS);
    }
    return { index: indexRaw === null ? 0 : Number(indexRaw), wait };
  }

  /** Aborts when the answer is done or the client went away (per response: keep-alive sockets carry many). */
  function closed(res: ServerResponse): AbortSignal {
    const ac = new AbortController();
    res.once("close", () => ac.abort());
    return ac.signal;
  }

  const emulator: NomadEmulator = {
    address: `http://127.0.0.1:${port}`,
    requests,
    get delayAllocationStartMs() {
      return cluster.delayAllocationStartMs;
    },
    set delayAllocationStartMs(ms: number) {
      cluster.delayAllocationStartMs = ms;
    },
    async stop() {
      for (const s of streams) s.end();
      await cluster.close();
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      if (ownDataDir) rmSync(dataDir, { recursive: true, force: true });
    },
    killAllocation: (id, signal) => cluster.killAllocation(id, signal),
    freezeAllocation: (id) => cluster.freezeAllocation(id),
    placeOnNewNode: () => cluster.placeOnNewNode(),
    placeOnNode: (nodeId) => cluster.placeOnNode(nodeId),
    loseNode: () => cluster.loseNode(),
    failNext(endpoint, status, times = 1, message = "emulated failure") {
      injections.push({ match: endpoint, status, remaining: times, message });
    },
    failImagePull(jobId, message) {
      cluster.imagePullFailures.push({ jobId, message });
    },
    clearImagePullFailures() {
      cluster.imagePullFailures = [];
    },
    allocations(jobId) {
      return [...cluster.allocs.values()]
        .filter((a) => jobId === undefined || a.jobId === jobId)
        .sort((a, b) => a.createIndex - b.createIndex)
        .map((a) => allocationWire(a, { withJob: false }));
    },
    async waitForAllocations(jobId, predicate, timeoutMs = 20_000) {
      let last: Json[] = [];
      await cluster.waitFor(() => predicate((last = emulator.allocations(jobId))), timeoutMs, () => `allocations of ${jobId} to match (last: ${JSON.stringify(last.map((a) => [a["Name"], a["ClientStatus"], a["DesiredStatus"]]))})`);
      return last;
    },
    index: () => cluster.index,
  };
  return emulator;
}

// ------------------------------------------------------------------ module helpers

function matches(match: string | RegExp, target: string): boolean {
  return typeof match === "string" ? target.includes(match) : match.test(target);
}

function only(method: string, allowed: string[]): void {
  // README l.59 "Base URL and methods": any other method gets `405 Invalid method`.
  if (!allowed.includes(method)) throw new HttpError(405, "Invalid method");
}

function readHeaders(index: number): Record<string, string> {
  // README l.72 "Response headers": reads set X-Nomad-Index, X-Nomad-LastContact, X-Nomad-KnownLeader.
  return { "X-Nomad-Index": String(index), "X-Nomad-LastContact": "0", "X-Nomad-KnownLeader": "true" };
}

function sendJson(res: ServerResponse, status: number, value: unknown, headers: Record<string, string> = {}): void {
  const body = stringifyNomadJson(value);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body), ...headers });
  res.end(body);
}

/** README l.63 "Errors are plain text, not JSON": text/plain, the message is the whole body. */
function sendText(res: ServerResponse, status: number, message: string): void {
  res.writeHead(status, { "Content-Type": "text/plain; charset=utf-8", "Content-Length": Buffer.byteLength(message) });
  res.end(message);
}

async function readJsonBody(req: IncomingMessage): Promise<Json> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > 20 * 1024 * 1024) throw new HttpError(413, "Request body too large");
    chunks.push(chunk as Buffer);
  }
  const text = Buffer.concat(chunks).toString("utf8");
  // README l.121 "POST /v1/jobs": 400 `Request body is empty` and JSON decode errors.
  if (text.trim() === "") throw new HttpError(400, "Request body is empty");
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new HttpError(400, `invalid character in request body: ${(err as Error).message}`);
  }
  if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new HttpError(400, "json: cannot unmarshal into Go value of type object");
  return parsed as Json;
}

/** Go's time.ParseDuration for the forms a client sends ("300ms", "10s", "5m", "1m30s"). */
function parseGoDuration(text: string): number | undefined {
  if (!/^(\d+(\.\d+)?(ns|us|µs|ms|s|m|h))+$/.test(text)) return undefined;
  const unit: Record<string, number> = { ns: 1e-6, us: 1e-3, µs: 1e-3, ms: 1, s: 1e3, m: 60e3, h: 3600e3 };
  let total = 0;
  for (const m of text.matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)) total += Number(m[1]) * unit[m[2]!]!;
  return total;
}

