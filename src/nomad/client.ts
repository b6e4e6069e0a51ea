// Longer than 500 lines on purpose: one method per Nomad endpoint the pool uses, each a few
// lines over the shared request/retry core; splitting by endpoint would scatter one API.
/**
 * Nomad HTTP API client for what the sandbox pool needs: register/read/scale/stop the
 * sandbox job, watch its allocations (blocking queries and the event stream) and read each
 * allocation's address.
 *
 * Transport: requests go through `globalThis.fetch` with an undici `Agent` as the
 * `dispatcher`. The Agent (npm undici 7) holds the keep-alive pool and the TLS settings
 * (NOMAD_CACERT, client certificate, skip-verify); Node 20's built-in fetch accepts it as
 * dispatcher (measured: plain HTTP, TLS with a private CA, mTLS). Calling fetch through
 * the global, looked up per request, is what lets nock 14 intercept the client in contract
 * tests: nock patches `http` and `globalThis.fetch` but not undici's own `request()` /
 * `fetch()` from the npm package (measured: with `nock.disableNetConnect()` an
 * `undici.fetch` call still went to the network, a `globalThis.fetch` call was refused).
 */
import { readFileSync } from "node:fs";
import { Agent } from "undici";
import type { z } from "zod";
import type { Logger } from "../observability/logger.js";
import { silentLogger } from "../observability/logger.js";
import type { Counter, Histogram, MetricsRegistry } from "../observability/metrics.js";
import { DEFAULT_NOMAD_ADDR, nomadOptionsFromEnv, type NomadClientOptions, type RetryOptions } from "./config.js";
import {
  NomadAclDeniedError,
  NomadConfigError,
  NomadError,
  NomadNotFoundError,
  NomadResponseError,
  NomadScaleBlockedError,
  NomadTimeoutError,
  NomadUnreachableError,
} from "./errors.js";
import { eventsFromNdjson } from "./event-stream.js";
import { parseNomadJson, stringifyNomadJson } from "./json.js";
import { backoffDelayMs, DEFAULT_RETRY, sleep } from "./retry.js";
import {
  AllocListSchema,
  AllocStopResponseSchema,
  AllocationSchema,
  DeploymentSchema,
  EvaluationListSchema,
  EvaluationSchema,
  JobDeregisterResponseSchema,
  JobListSchema,
  JobRegisterResponseSchema,
  JobScaleStatusSchema,
  JobSchema,
  LeaderSchema,
  type AllocListStub,
  type AllocStopResponse,
  type Allocation,
  type Deployment,
  type Evaluation,
  type Job,
  type JobDeregisterResponse,
  type JobListStub,
  type JobRegisterResponse,
  type JobScaleStatus,
  type NomadEvent,
} from "./schemas.js";

export type { NomadClientOptions, RetryOptions } from "./config.js";

export interface NomadClientInit extends NomadClientOptions {
  logger?: Logger;
  /**
   * Registers `slotpool_nomad_requests_total{route,outcome}`, `slotpool_nomad_request_seconds{route}`
   * and `slotpool_nomad_retries_total{route}` here (one client per registry).
   */
  metrics?: MetricsRegistry;
}

/** Options of a blocking query (shared/nomad-api/README.md "Blocking queries"). */
export interface BlockingOptions {
  /** The `X-Nomad-Index` of the previous answer; 0/undefined never blocks. */
  index?: number;
  /** How long the server may hold the request (ms); Nomad caps it at 300 s. Default 60 s. */
  waitMs?: number;
  signal?: AbortSignal;
}

export interface EventStreamOptions {
  /**
   * `{Allocation: [jobId]}` becomes `topic=Allocation:<jobId>`; an empty list subscribes to
   * the whole topic (`topic=Allocation`). A string array is sent as given (`"Job:my-job"`).
   */
  topics: Record<string, string[]> | string[];
  /** Replay events after this index. */
  index?: number;
  signal?: AbortSignal;
  /** Abort when no byte (not even a heartbeat, sent every 30 s) came for this long. Default 75 s. */
  idleTimeoutMs?: number;
}

/** Something a Nomad job spec can be: the builder's output or a job read back from Nomad. */
export type NomadJobSpec = { ID?: string | null } & Record<string, unknown>;

interface CallSpec {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  query?: Record<string, string | undefined>;
  body?: unknown;
  /** ACL capability named in a 403 message. */
  capability: string;
  /** Blocking query wait (ms) when `index` > 0: the attempt timeout grows accordingly. */
  blockingWaitMs?: number;
  signal?: AbortSignal | undefined;
}

const BLOCKING_DEFAULT_WAIT_MS = 60_000;
/** Nomad holds a blocking query up to wait + wait/16 jitter; this margin covers the network. */
const BLOCKING_MARGIN_MS = 5_000;
const MAX_BLOCKING_WAIT_MS = 300_000;
const CONNECTION_ERROR_NOT_TRANSIENT = /CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO_|ENOTFOUND|ERR_INVALID_URL/;
/**
 * 500s that retrying cannot fix: job validation errors and check-and-set conflicts are
 * returned uncoded, hence as 500 (shared/nomad-api/README.md, POST /v1/jobs "Errors").
 */
const PERMANENT_SERVER_ERROR = /error(s)? occurred|Enforcing job modify index|job_max_count|exceeds maximum/i;

export class NomadClient {
  /** As configured (NOMAD_ADDR); named in error messages. */
  readonly address: string;
  /** Where request URLs start (http://localhost for a unix socket). */
  private readonly baseUrl: string;
  readonly namespace: string | undefined;
  readonly region: string | undefined;
  private readonly token: string | undefined;
  private readonly timeoutMs: number;
  private readonly retry: RetryOptions;
  private readonly dispatcher: Agent;
  private readonly logger: Logger;
  private readonly metrics: { requests: Counter; seconds: Histogram; retries: Counter } | undefined;

  /** Settings from NOMAD_* in `process.env`, with `overrides` winning. */
  static fromEnv(overrides: NomadClientInit = {}, env: NodeJS.ProcessEnv = process.env): NomadClient {
    const { logger, metrics, ...rest } = overrides;
    return new NomadClient({ ...nomadOptionsFromEnv(env, rest), ...(logger ? { logger } : {}), ...(metrics ? { metrics } : {}) });
  }

  /** Explicit options only; use `NomadClient.fromEnv` to read NOMAD_* like the nomad CLI. */
  constructor(options: NomadClientInit = {}) {
    const address = (options.address ?? DEFAULT_NOMAD_ADDR).replace(/\/+$/, "");
    // unix:///path/api.sock: the agent's socket, e.g. the Task API socket Nomad gives a task
    // (secrets/api.sock). Requests then go to http://localhost over that socket.
    let socketPath: string | undefined;
    if (address.startsWith("unix://")) {
      socketPath = address.slice("unix://".length);
      if (!socketPath.startsWith("/")) throw new NomadConfigError(`NOMAD_ADDR unix:// needs an absolute socket path, got '${address}'`);
      this.baseUrl = "http://localhost";
    } else {
      let parsed: URL;
      try {
        parsed = new URL(address);
      } catch {
        throw new NomadConfigError(`NOMAD_ADDR must be a URL like ${DEFAULT_NOMAD_ADDR}, got '${address}'`);
      }
      if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
        throw new NomadConfigError(`NOMAD_ADDR must start with http://, https:// or unix://, got '${address}'`);
      }
      this.baseUrl = address;
    }
    this.address = address;
    this.token = options.token || undefined;
    this.namespace = options.namespace || undefined;
    this.region = options.region || undefined;
    this.timeoutMs = Math.ceil(options.timeoutMs ?? 30_000);
    if (!(this.timeoutMs > 0)) throw new NomadConfigError(`timeoutMs must be > 0, got ${options.timeoutMs}`);
    this.retry = { ...DEFAULT_RETRY, ...options.retry };
    if (!(this.retry.attempts >= 1)) throw new NomadConfigError(`retry.attempts must be >= 1, got ${this.retry.attempts}`);
    this.logger = options.logger ?? silentLogger();
    this.metrics = options.metrics && {
      requests: options.metrics.counter("slotpool_nomad_requests_total", "Nomad API request attempts by route and outcome (HTTP status, timeout, unreachable)"),
      seconds: options.metrics.histogram("slotpool_nomad_request_seconds", "Duration of Nomad API request attempts (blocking queries include their wait)"),
      retries: options.metrics.counter("slotpool_nomad_retries_total", "Nomad API request attempts that were retries"),
    };
    if (options.clientCert && !options.clientKey) throw new NomadConfigError("NOMAD_CLIENT_CERT is set but NOMAD_CLIENT_KEY is not: set both for mTLS");
    if (options.clientKey && !options.clientCert) throw new NomadConfigError("NOMAD_CLIENT_KEY is set but NOMAD_CLIENT_CERT is not: set both for mTLS");
    this.dispatcher = new Agent({
      keepAliveTimeout: 30_000,
      connect: {
        ...(socketPath ? { socketPath } : {}),
        ...(options.caCert ? { ca: readPem(options.caCert, "NOMAD_CACERT") } : {}),
        ...(options.clientCert ? { cert: readPem(options.clientCert, "NOMAD_CLIENT_CERT") } : {}),
        ...(options.clientKey ? { key: readPem(options.clientKey, "NOMAD_CLIENT_KEY") } : {}),
        ...(options.skipVerify ? { rejectUnauthorized: false } : {}),
      },
    });
  }

  /** Closes idle keep-alive connections. In-flight calls are not aborted. */
  async close(): Promise<void> {
    await this.dispatcher.close();
  }

  // ------------------------------------------------------------------ status

  /** The leader's RPC address (e.g. "127.0.0.1:4647"); also a cheap health check. */
  async leader(options: { signal?: AbortSignal } = {}): Promise<string> {
    const { value } = await this.call({ method: "GET", path: "/v1/status/leader", capability: "no capability", signal: options.signal }, LeaderSchema);
    return value;
  }

  // ------------------------------------------------------------------ jobs

  /**
   * Registers (creates or updates) a job. Re-registering resets every group's Count to the
   * spec's value unless `preserveCounts` is set (README "Gotcha"): set it when updating a
   * job whose count the pool has scaled.
   */
  async registerJob(
    job: NomadJobSpec,
    options: { preserveCounts?: boolean; enforceIndex?: number; signal?: AbortSignal } = {},
  ): Promise<JobRegisterResponse> {
    if (!job || typeof job !== "object" || typeof job.ID !== "string" || job.ID === "") {
      throw new NomadConfigError("registerJob needs a job object with a non-empty ID");
    }
    const body: Record<string, unknown> = { Job: job };
    if (options.preserveCounts) body["PreserveCounts"] = true;
    if (options.enforceIndex !== undefined) {
      body["EnforceIndex"] = true;
      body["JobModifyIndex"] = options.enforceIndex;
    }
    const { value } = await this.call(
      { method: "POST", path: "/v1/jobs", body, capability: "namespace:submit-job", signal: options.signal },
      JobRegisterResponseSchema,
    );
    return value;
  }

  /** The job, or null when Nomad answers 404 `job not found` (never registered, or purged). */
  async readJob(jobId: string, options: { signal?: AbortSignal } = {}): Promise<Job | null> {
    return this.nullOn404(async () => {
      const { value } = await this.call(
        { method: "GET", path: `/v1/job/${enc(jobId)}`, capability: "namespace:read-job", signal: options.signal },
        JobSchema,
      );
      return value;
    });
  }

  /**
   * GET /v1/jobs. `meta: true` includes each job's Meta (to find slotpool's jobs): newer Nomad
   * puts it in the list; older agents ignore `meta=true` (a real 1.1.2 agent lists no Meta at
   * all), so each job without the key is read for it (`namespace:read-job`).
   */
  async listJobs(options: { prefix?: string; meta?: boolean; signal?: AbortSignal } = {}): Promise<JobListStub[]> {
    const { value } = await this.call(
      {
        method: "GET",
        path: "/v1/jobs",
        query: { prefix: options.prefix || undefined, meta: options.meta ? "true" : undefined },
        capability: "namespace:list-jobs",
        signal: options.signal,
      },
      JobListSchema,
    );
    if (options.meta) {
      const missing = value.filter((j) => j.Meta === undefined);
      // A few at a time: one read per job on an old agent.
      for (let i = 0; i < missing.length; i += 8) {
        await Promise.all(
          missing.slice(i, i + 8).map(async (stub) => {
            const job = await this.readJob(stub.ID, { ...(options.signal ? { signal: options.signal } : {}) });
            stub.Meta = job?.Meta ?? null;
          }),
        );
      }
    }
    return value;
  }

  /**
   * Stops a job. Without `purge` it stays readable with `Stop: true` until garbage
   * collection; with it, readJob returns null afterwards. A missing job answers 200.
   */
  async deregisterJob(jobId: string, options: { purge?: boolean; signal?: AbortSignal } = {}): Promise<JobDeregisterResponse> {
    const { value } = await this.call(
      {
        method: "DELETE",
        path: `/v1/job/${enc(jobId)}`,
        query: { purge: options.purge ? "true" : undefined },
        capability: options.purge ? "namespace:submit-job (Nomad 2: namespace:purge-job)" : "namespace:submit-job (Nomad 2: namespace:deregister-job)",
        signal: options.signal,
      },
      JobDeregisterResponseSchema,
    );
    return value;
  }

  /**
   * The job's allocations (stubs: no ports, read each allocation for its address). `[]` for
   * an unknown job. With `index`, a blocking query: Nomad answers once any allocation in the
   * cluster changed past `index`, or when `waitMs` ran out (200 either way; compare `index`).
   */
  async jobAllocations(
    jobId: string,
    options: BlockingOptions & { all?: boolean } = {},
  ): Promise<{ allocations: AllocListStub[]; index: number }> {
    const { value, index } = await this.call(
      {
        method: "GET",
        path: `/v1/job/${enc(jobId)}/allocations`,
        query: { all: options.all ? "true" : undefined, ...blockingQuery(options) },
        capability: "namespace:read-job",
        blockingWaitMs: blockingWait(options),
        signal: options.signal,
      },
      AllocListSchema,
    );
    return { allocations: value, index: index ?? 0 };
  }

  /** The full allocation (with AllocatedResources, hence its ports), or null on 404. Blocking with `index`. */
  async readAllocation(allocId: string, options: BlockingOptions = {}): Promise<Allocation | null> {
    return (await this.readAllocationWithIndex(allocId, options)).allocation;
  }

  /** Like readAllocation, also returning `X-Nomad-Index` (the allocation's ModifyIndex) for the next blocking read. */
  async readAllocationWithIndex(allocId: string, options: BlockingOptions = {}): Promise<{ allocation: Allocation | null; index: number }> {
    try {
      const { value, index } = await this.call(
        {
          method: "GET",
          path: `/v1/allocation/${enc(allocId)}`,
          query: blockingQuery(options),
          capability: "namespace:read-job",
          blockingWaitMs: blockingWait(options),
          signal: options.signal,
        },
        AllocationSchema,
      );
      return { allocation: value, index: index ?? 0 };
    } catch (err) {
      if (err instanceof NomadNotFoundError) return { allocation: null, index: 0 };
      throw err;
    }
  }

  /**
   * Stops one allocation; Nomad places a replacement (the job's count is unchanged), through
   * the evaluation it answers with. Throws NomadNotFoundError for an unknown allocation.
   */
  async stopAllocation(allocId: string, options: { signal?: AbortSignal } = {}): Promise<AllocStopResponse> {
    const { value } = await this.call(
      {
        method: "POST",
        path: `/v1/allocation/${enc(allocId)}/stop`,
        capability: "namespace:alloc-lifecycle",
        signal: options.signal,
      },
      AllocStopResponseSchema,
    );
    return value;
  }

  // ------------------------------------------------------------------ scaling

  /**
   * Sets a task group's count. Throws NomadScaleBlockedError while a deployment is active,
   * NomadNotFoundError for a missing job (404 `job "<id>" not found`).
   */
  async scaleTaskGroup(
    jobId: string,
    group: string,
    count: number,
    options: { message?: string; meta?: Record<string, unknown>; signal?: AbortSignal } = {},
  ): Promise<JobRegisterResponse> {
    if (!Number.isInteger(count) || count < 0) throw new NomadConfigError(`scale count must be a whole number >= 0, got ${count}`);
    const body: Record<string, unknown> = { Count: count, Target: { Group: group } };
    if (options.message) body["Message"] = options.message;
    if (options.meta) body["Meta"] = options.meta;
    const { value } = await this.call(
      {
        method: "POST",
        path: `/v1/job/${enc(jobId)}/scale`,
        body,
        capability: "namespace:scale-job or namespace:submit-job",
        signal: options.signal,
      },
      JobRegisterResponseSchema,
    );
    return value;
  }

  /**
   * Records a scaling event without changing the count (`POST /v1/job/:id/scale` with no
   * Count): no job version, no evaluation. slotpool's owner heartbeat (nomad/ownership.ts).
   */
  async recordScaleEvent(jobId: string, group: string, options: { message: string; meta?: Record<string, unknown>; signal?: AbortSignal }): Promise<void> {
    const body: Record<string, unknown> = { Target: { Group: group }, Message: options.message };
    if (options.meta) body["Meta"] = options.meta;
    await this.call(
      { method: "POST", path: `/v1/job/${enc(jobId)}/scale`, body, capability: "namespace:scale-job or namespace:submit-job", signal: options.signal },
      JobRegisterResponseSchema,
    );
  }

  /** Desired/placed/running counts per group, or null when the job does not exist. */
  async scaleStatus(jobId: string, options: { signal?: AbortSignal } = {}): Promise<JobScaleStatus | null> {
    return this.nullOn404(async () => {
      const { value } = await this.call(
        { method: "GET", path: `/v1/job/${enc(jobId)}/scale`, capability: "namespace:read-job", signal: options.signal },
        JobScaleStatusSchema,
      );
      return value;
    });
  }

  /**
   * The job's most recent deployment (`GET /v1/job/:id/deployment`), or null when it has none
   * (Nomad answers `null`) or the job is unknown. Blocking with `index`.
   */
  async latestDeployment(jobId: string, options: BlockingOptions = {}): Promise<{ deployment: Deployment | null; index: number }> {
    try {
      const { value, index } = await this.call(
        {
          method: "GET",
          path: `/v1/job/${enc(jobId)}/deployment`,
          query: blockingQuery(options),
          capability: "namespace:read-job",
          blockingWaitMs: blockingWait(options),
          signal: options.signal,
        },
        DeploymentSchema.nullable(),
      );
      return { deployment: value, index: index ?? 0 };
    } catch (err) {
      if (err instanceof NomadNotFoundError) return { deployment: null, index: 0 };
      throw err;
    }
  }

  // ------------------------------------------------------------------ evaluations

  async jobEvaluations(jobId: string, options: { signal?: AbortSignal } = {}): Promise<Evaluation[]> {
    const { value } = await this.call(
      { method: "GET", path: `/v1/job/${enc(jobId)}/evaluations`, capability: "namespace:read-job", signal: options.signal },
      EvaluationListSchema,
    );
    return value;
  }

  /** The evaluation (with `RelatedEvals` when `related`), or null on 404 `eval not found`. */
  async readEvaluation(evalId: string, options: { related?: boolean; signal?: AbortSignal } = {}): Promise<Evaluation | null> {
    return this.nullOn404(async () => {
      const { value } = await this.call(
        {
          method: "GET",
          path: `/v1/evaluation/${enc(evalId)}`,
          query: { related: options.related ? "true" : undefined },
          capability: "namespace:read-job",
          signal: options.signal,
        },
        EvaluationSchema,
      );
      return value;
    });
  }

  // ------------------------------------------------------------------ event stream

  /**
   * Subscribes to /v1/event/stream and yields its events (heartbeats skipped). The iterable
   * ends when the server closes the stream; resubscribe with `index` = the last event's
   * Index. Breaking out of the loop or aborting `signal` closes the connection.
   *
   * Note: since Nomad 2.0 the stream answers 200 before authorising the subscription, so an
   * ACL failure shows up as the stream ending, not as a 403 (README "Errors after connect").
   */
  async *eventStream(options: EventStreamOptions): AsyncGenerator<NomadEvent> {
    const query = new URLSearchParams();
    if (Array.isArray(options.topics)) {
      for (const t of options.topics) query.append("topic", t);
    } else {
      for (const [topic, keys] of Object.entries(options.topics)) {
        if (keys.length === 0) query.append("topic", topic);
        for (const key of keys) query.append("topic", `${topic}:${key}`);
      }
    }
    if (options.index !== undefined && options.index > 0) query.set("index", String(options.index));
    this.addScope(query);
    const path = "/v1/event/stream";
    const url = `${this.baseUrl}${path}?${query.toString()}`;
    const idleMs = options.idleTimeoutMs ?? 75_000;

    const abort = new AbortController();
    let idleTimer: NodeJS.Timeout | undefined;
    const armIdle = (ms: number) => {
      clearTimeout(idleTimer);
      idleTimer = setTimeout(() => abort.abort(new NomadTimeoutError({ method: "GET", path, timeoutMs: ms, address: this.address })), ms);
    };
    const onCallerAbort = () => abort.abort(options.signal!.reason);
    if (options.signal?.aborted) throw options.signal.reason;
    options.signal?.addEventListener("abort", onCallerAbort, { once: true });
    try {
      armIdle(Math.min(idleMs, this.timeoutMs));
      let res: Response;
      try {
        res = await this.fetch(url, { method: "GET", headers: this.headers(false), signal: abort.signal });
      } catch (err) {
        throw this.transportError(err, abort.signal, options.signal, "GET", path, this.timeoutMs);
      }
      if (!res.ok) {
        const text = await res.text().catch(() => "");
        throw this.errorFromStatus(res.status, "GET", path, text, "namespace:read-job");
      }
      if (!res.body) return;
      armIdle(idleMs);
      try {
        yield* eventsFromNdjson(res.body as unknown as AsyncIterable<Uint8Array>, () => armIdle(idleMs));
      } catch (err) {
        if (abort.signal.aborted) {
          if (options.signal?.aborted) throw options.signal.reason;
          throw abort.signal.reason;
        }
        throw err;
      }
    } finally {
      clearTimeout(idleTimer);
      options.signal?.removeEventListener("abort", onCallerAbort);
      // Ends the never-ending body when the consumer stops early.
      if (!abort.signal.aborted) abort.abort(new Error("event stream closed by the consumer"));
    }
  }

  // ------------------------------------------------------------------ transport

  private async nullOn404<T>(fn: () => Promise<T>): Promise<T | null> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof NomadNotFoundError) return null;
      throw err;
    }
  }

  private headers(withBody: boolean): Record<string, string> {
    const h: Record<string, string> = { Accept: "application/json" };
    if (withBody) h["Content-Type"] = "application/json";
    if (this.token) h["X-Nomad-Token"] = this.token;
    return h;
  }

  private addScope(query: URLSearchParams): void {
    if (this.namespace && !query.has("namespace")) query.set("namespace", this.namespace);
    if (this.region && !query.has("region")) query.set("region", this.region);
  }

  private fetch(url: string, init: RequestInit): Promise<Response> {
    // Looked up per call so a fetch patched by nock in tests is honoured (see the file comment).
    return globalThis.fetch(url, { ...init, dispatcher: this.dispatcher } as unknown as RequestInit);
  }

  /**
   * One API call: retries on connection errors, timeouts and retryable 5xx with capped
   * exponential backoff and jitter; every attempt has a deadline, so no call can hang.
   * Every call slotpool makes is idempotent (reads, DELETE, register of the same spec,
   * scale to an absolute count), so every call may be retried.
   */
  private async call<S extends z.ZodType>(spec: CallSpec, schema: S): Promise<{ value: z.output<S>; index: number | undefined }> {
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(spec.query ?? {})) if (v !== undefined) query.set(k, v);
    this.addScope(query);
    const qs = query.toString();
    const url = `${this.baseUrl}${spec.path}${qs ? `?${qs}` : ""}`;
    const body = spec.body === undefined ? undefined : stringifyNomadJson(spec.body);
    const attemptTimeoutMs =
      spec.blockingWaitMs !== undefined ? Math.ceil(spec.blockingWaitMs + spec.blockingWaitMs / 16 + BLOCKING_MARGIN_MS) : this.timeoutMs;

    const route = `${spec.method} ${routeOf(spec.path)}`;
    const record = (outcome: string, started: number) => {
      this.metrics?.requests.inc({ route, outcome });
      this.metrics?.seconds.observe((Date.now() - started) / 1000, { route });
    };
    let lastError: NomadError | undefined;
    for (let attempt = 1; attempt <= this.retry.attempts; attempt++) {
      if (attempt > 1) {
        this.metrics?.retries.inc({ route });
        const delay = backoffDelayMs(attempt - 1, this.retry);
        this.logger.debug({ method: spec.method, path: spec.path, attempt, delayMs: delay, err: lastError?.message }, "retrying Nomad call");
        await sleep(delay, spec.signal);
      }
      const timeout = AbortSignal.timeout(attemptTimeoutMs);
      const signal = spec.signal ? AbortSignal.any([timeout, spec.signal]) : timeout;
      const started = Date.now();
      let status: number;
      let text: string;
      let indexHeader: string | null;
      try {
        const res = await this.fetch(url, {
          method: spec.method,
          headers: this.headers(body !== undefined),
          ...(body !== undefined ? { body } : {}),
          signal,
        });
        status = res.status;
        indexHeader = res.headers.get("x-nomad-index");
        text = await res.text();
      } catch (err) {
        record(timeout.aborted ? "timeout" : spec.signal?.aborted ? "aborted" : "unreachable", started);
        lastError = this.transportError(err, timeout, spec.signal, spec.method, spec.path, attemptTimeoutMs);
        if (lastError instanceof NomadUnreachableError && CONNECTION_ERROR_NOT_TRANSIENT.test(errorCode(err))) throw lastError;
        continue;
      }
      this.logger.debug({ method: spec.method, path: spec.path, status, ms: Date.now() - started }, "Nomad call");
      record(String(status), started);
      if (status >= 200 && status < 300) {
        let raw: unknown;
        try {
          raw = parseNomadJson(text);
        } catch {
          throw new NomadResponseError({ status, method: spec.method, path: spec.path, problem: `not JSON: ${text.slice(0, 200)}` });
        }
        const parsed = schema.safeParse(raw);
        if (!parsed.success) {
          throw new NomadResponseError({ status, method: spec.method, path: spec.path, problem: parsed.error.message.slice(0, 1000) });
        }
        const index = indexHeader !== null && /^\d+$/.test(indexHeader) ? Number(indexHeader) : undefined;
        return { value: parsed.data, index };
      }
      lastError = this.errorFromStatus(status, spec.method, spec.path, text, spec.capability);
      const retryable = (status >= 500 || status === 429) && !PERMANENT_SERVER_ERROR.test(lastError.nomadMessage);
      if (!retryable) throw lastError;
    }
    throw lastError!;
  }

  private transportError(
    err: unknown,
    timeout: AbortSignal,
    callerSignal: AbortSignal | undefined,
    method: string,
    path: string,
    timeoutMs: number,
  ): NomadError {
    if (callerSignal?.aborted) throw callerSignal.reason;
    if (timeout.aborted) {
      const reason = timeout.reason;
      if (reason instanceof NomadTimeoutError) return reason;
      return new NomadTimeoutError({ method, path, timeoutMs, address: this.address }, { cause: err });
    }
    const cause = (err as { cause?: unknown })?.cause ?? err;
    const reason = [errorCode(err), (cause as Error)?.message ?? String(cause)].filter(Boolean).join(" ");
    return new NomadUnreachableError({ method, path, address: this.address, reason }, { cause: err });
  }

  private errorFromStatus(status: number, method: string, path: string, body: string, capability: string): NomadError {
    const nomadMessage = body.trim().slice(0, 2_000);
    if (status === 403) return new NomadAclDeniedError({ method, path, nomadMessage, capability });
    if (status === 404) return new NomadNotFoundError({ method, path, nomadMessage });
    if (status === 400 && /scaling blocked due to active deployment/i.test(nomadMessage)) {
      return new NomadScaleBlockedError({ method, path, nomadMessage });
    }
    return new NomadError({ status, method, path, nomadMessage });
  }
}

function errorCode(err: unknown): string {
  const cause = (err as { cause?: { code?: unknown } })?.cause;
  const code = cause?.code ?? (err as { code?: unknown })?.code;
  return typeof code === "string" ? code : "";
}

/** The path with IDs replaced, as a low-cardinality metric label ("/v1/job/:id/allocations"). */
function routeOf(path: string): string {
  return path.replace(/^(\/v1\/(?:job|allocation|evaluation))\/[^/]+/, "$1/:id");
}

function enc(id: string): string {
  if (typeof id !== "string" || id === "") throw new NomadConfigError("a Nomad ID must be a non-empty string");
  return encodeURIComponent(id);
}

function blockingWait(options: BlockingOptions): number | undefined {
  if (!options.index) return undefined;
  return Math.min(options.waitMs ?? BLOCKING_DEFAULT_WAIT_MS, MAX_BLOCKING_WAIT_MS);
}

function blockingQuery(options: BlockingOptions): Record<string, string | undefined> {
  const wait = blockingWait(options);
  if (wait === undefined) return {};
  return { index: String(options.index), wait: `${Math.max(1, Math.round(wait))}ms` };
}

function readPem(path: string, variable: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    throw new NomadConfigError(`cannot read ${variable} file '${path}': ${(err as Error).message}`);
  }
}
