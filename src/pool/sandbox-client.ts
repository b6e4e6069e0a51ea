import pLimit, { type LimitFunction } from "p-limit";
import { Pool, type Dispatcher } from "undici";
import type { z } from "zod";
import {
  ArtifactArchiveResponseSchema,
  ArtifactListResponseSchema,
  ArtifactReadResponseSchema,
  BatchResponseSchema,
  BatchStreamLineSchema,
  ErrorBodySchema,
  ExecuteResponseSchema,
  ForkResponseSchema,
  HealthResponseSchema,
  ResetResponseSchema,
  TemplateBuildResponseSchema,
  type ArtifactArchiveResponse,
  type ArtifactListResponse,
  type ArtifactReadResponse,
  type ExecuteRequest,
  type ExecuteResponse,
  type HealthResponse,
  type ResetResponse,
  type TemplateBuildRequest,
  type TemplateBuildResponse,
  type ForkResponse,
} from "../protocol/sandbox.js";
import { isImageUnavailable } from "../protocol/images.js";
import { ImageUnavailableError, SandboxRequestError } from "./errors.js";

/**
 * HTTP client to one sandbox server (one container). One keep-alive connection pool per
 * container, a bound on concurrent calls per container, and a deadline on every call.
 * Connection failures become `SandboxRequestError`s and are reported through
 * `onConnectionFailure`, which the pool treats as a loss signal.
 */

export interface SandboxClientOptions {
  containerId: string;
  url: string;
  token?: string;
  /** Calls in flight to this container at once (default 32); the rest queue here. */
  maxConcurrency?: number;
  /** Keep-alive connections to this container (default: maxConcurrency). */
  connections?: number;
  /** Timeout the server applies when a call names none, seconds (server default: 30). */
  defaultCallTimeoutS?: number;
  /** Added to a call's own timeout to get the HTTP deadline (default 10 s). */
  timeoutMarginMs?: number;
  /** Deadline of calls without a timeout of their own: health, reset, artifacts (default 60 s). */
  controlTimeoutMs?: number;
  /** Deadline of a reset into a task image, which may fetch it first (default 30 min, the server's --image-pull-timeout default). */
  imageResetTimeoutMs?: number;
  /** Called for every failure to connect or keep the connection (refused, reset, closed). */
  onConnectionFailure?: (error: SandboxRequestError) => void;
}

/** What a reset makes of the slot: a template's view, a task image's root, or (neither) a plain workspace. */
export interface ResetInto {
  template?: string;
  image?: string;
}

export interface RequestOptions {
  signal?: AbortSignal;
  /** Overrides the computed deadline, ms. */
  timeoutMs?: number;
}

/** What the pool needs from a sandbox client; the in-memory test double implements it too. */
export interface SandboxClientLike {
  health(options?: RequestOptions): Promise<HealthResponse>;
  execute(request: ExecuteRequest, options?: RequestOptions): Promise<ExecuteResponse>;
  batch(requests: ExecuteRequest[], options?: RequestOptions): Promise<ExecuteResponse[]>;
  batchStream(requests: ExecuteRequest[], onLine: (index: number, result: ExecuteResponse) => void, options?: RequestOptions): Promise<ExecuteResponse[]>;
  /**
   * With `template`: the workspace becomes a copy-on-write view of that (built) template; with
   * `image`: the slot's root becomes that task image (fetched by the server when it lacks it;
   * one it cannot get rejects with ImageUnavailableError, the slot left as it was).
   */
  reset(slotId: string, options?: RequestOptions & ResetInto): Promise<ResetResponse>;
  /** POST /fork: the `into` slots become copy-on-write copies of `slotId`'s workspace (docs/fork.md). */
  fork?(slotId: string, into: string[], options?: RequestOptions): Promise<ForkResponse>;
  /** Builds a workspace template on this container (idempotent; see docs/templates.md). */
  buildTemplate?(request: TemplateBuildRequest, options?: RequestOptions): Promise<TemplateBuildResponse>;
  readArtifact(request: { slot_id: string; path: string; encoding?: "text" | "base64"; max_bytes?: number; include_sha256?: boolean }, options?: RequestOptions): Promise<ArtifactReadResponse>;
  listArtifacts(request: { slot_id: string; path?: string; recursive?: boolean; max_entries?: number }, options?: RequestOptions): Promise<ArtifactListResponse>;
  archiveArtifacts(request: { slot_id: string; path?: string; max_bytes?: number; max_entries?: number }, options?: RequestOptions): Promise<ArtifactArchiveResponse>;
  close(): Promise<void>;
}

const CONNECTION_ERROR_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "EPIPE",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ETIMEDOUT",
  "UND_ERR_SOCKET",
  "UND_ERR_CONNECT_TIMEOUT",
  "UND_ERR_CLOSED",
  "UND_ERR_DESTROYED",
]);

/** Whether an error (or its cause chain) is a failure to reach or stay connected to the server. */
export function isConnectionFailure(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; e && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === "string" && CONNECTION_ERROR_CODES.has(code)) return true;
    e = (e as { cause?: unknown }).cause;
  }
  return false;
}

function errorText(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as { code?: unknown }).code;
  const cause = (err as { cause?: unknown }).cause;
  const causeText = cause instanceof Error ? `: ${cause.message}` : "";
  return `${typeof code === "string" ? `${code} ` : ""}${err.message}${causeText}`;
}

/** The pool's client of a container's sandbox server (SlotPoolOptions.createClient's default). */
export function sandboxClientFor(info: { id: string; url: string; token?: string }, hooks: { onConnectionFailure: (error: Error) => void; maxConcurrency: number }): SandboxClient {
  return new SandboxClient({ containerId: info.id, url: info.url, ...(info.token ? { token: info.token } : {}), maxConcurrency: hooks.maxConcurrency, onConnectionFailure: hooks.onConnectionFailure });
}

export class SandboxClient implements SandboxClientLike {
  readonly containerId: string;
  readonly url: string;
  private readonly pool: Pool;
  private readonly limit: LimitFunction;
  private readonly headers: Record<string, string>;
  private readonly defaultCallTimeoutS: number;
  private readonly marginMs: number;
  private readonly controlTimeoutMs: number;
  private readonly imageResetTimeoutMs: number;
  private readonly onConnectionFailure: ((error: SandboxRequestError) => void) | undefined;
  private closed = false;

  constructor(options: SandboxClientOptions) {
    let origin: URL;
    try {
      origin = new URL(options.url);
    } catch {
      throw new SandboxRequestError(`sandbox URL '${options.url}' is not a valid URL`, options.containerId);
    }
    if (origin.protocol !== "http:" && origin.protocol !== "https:") {
      throw new SandboxRequestError(`sandbox URL '${options.url}' must use http or https`, options.containerId);
    }
    this.containerId = options.containerId;
    this.url = origin.origin;
    const maxConcurrency = options.maxConcurrency ?? 32;
    this.limit = pLimit(maxConcurrency);
    this.pool = new Pool(origin.origin, {
      connections: options.connections ?? maxConcurrency,
      keepAliveTimeout: 30_000,
      connectTimeout: 5_000,
      // Deadlines are ours (per call); undici's defaults (300 s) would cut long commands.
      headersTimeout: 0,
      bodyTimeout: 0,
    });
    this.headers = { "content-type": "application/json" };
    if (options.token) this.headers["authorization"] = `Bearer ${options.token}`;
    this.defaultCallTimeoutS = options.defaultCallTimeoutS ?? 30;
    this.marginMs = options.timeoutMarginMs ?? 10_000;
    this.controlTimeoutMs = options.controlTimeoutMs ?? 60_000;
    this.imageResetTimeoutMs = options.imageResetTimeoutMs ?? 30 * 60_000 + this.marginMs;
    this.onConnectionFailure = options.onConnectionFailure;
  }

  health(options: RequestOptions = {}): Promise<HealthResponse> {
    // Health checks skip the concurrency bound: a container busy with long commands is still healthy.
    return this.request("GET", "/health", undefined, HealthResponseSchema, options.timeoutMs ?? 5_000, options.signal, false);
  }

  execute(request: ExecuteRequest, options: RequestOptions = {}): Promise<ExecuteResponse> {
    return this.request("POST", "/execute", request, ExecuteResponseSchema, options.timeoutMs ?? this.callDeadline([request]), options.signal);
  }

  batch(requests: ExecuteRequest[], options: RequestOptions = {}): Promise<ExecuteResponse[]> {
    return this.request("POST", "/batch", requests, BatchResponseSchema, options.timeoutMs ?? this.callDeadline(requests), options.signal);
  }

  /**
   * `POST /batch?stream=1`: one NDJSON line `{index, ...result}` per call as it finishes.
   * Resolves with all results in request order once the stream ends.
   */
  batchStream(
    requests: ExecuteRequest[],
    onLine: (index: number, result: ExecuteResponse) => void,
    options: RequestOptions = {},
  ): Promise<ExecuteResponse[]> {
    const deadline = options.timeoutMs ?? this.callDeadline(requests);
    return this.limit(() =>
      this.withDeadline("POST", "/batch?stream=1", deadline, options.signal, async (signal) => {
        const res = await this.pool.request({
          path: "/batch?stream=1",
          method: "POST",
          headers: this.headers,
          body: JSON.stringify(requests),
          signal,
        });
        if (res.statusCode < 200 || res.statusCode >= 300) {
          throw this.httpError("POST", "/batch?stream=1", res.statusCode, await res.body.text());
        }
        const results = new Array<ExecuteResponse | undefined>(requests.length);
        let buffered = "";
        const handleLine = (line: string): void => {
          if (!line.trim()) return;
          const parsed = this.parse("POST", "/batch?stream=1", BatchStreamLineSchema, line);
          const { index, ...result } = parsed;
          if (index >= requests.length) {
            throw new SandboxRequestError(
              `sandbox ${this.containerId} streamed a result for call ${index} of a batch of ${requests.length}`,
              this.containerId,
            );
          }
          results[index] = result;
          onLine(index, result);
        };
        res.body.setEncoding("utf8");
        for await (const chunk of res.body as AsyncIterable<string>) {
          buffered += chunk;
          let nl: number;
          while ((nl = buffered.indexOf("\n")) >= 0) {
            handleLine(buffered.slice(0, nl));
            buffered = buffered.slice(nl + 1);
          }
        }
        handleLine(buffered);
        const missing = results.findIndex((r) => r === undefined);
        if (missing >= 0) {
          throw new SandboxRequestError(
            `sandbox ${this.containerId} ended the result stream without call ${missing} of ${requests.length}`,
            this.containerId,
          );
        }
        return results as ExecuteResponse[];
      }),
    );
  }

  reset(slotId: string, options: RequestOptions & ResetInto = {}): Promise<ResetResponse> {
    const body = { slot_id: slotId, ...(options.template !== undefined ? { template: options.template } : {}), ...(options.image !== undefined ? { image: options.image } : {}) };
    // A reset into an image the server lacks fetches it first: bounded by the server's own
    // pull timeout (--image-pull-timeout), not the control deadline, unless the caller says.
    const deadline = options.timeoutMs ?? (options.image !== undefined ? this.imageResetTimeoutMs : this.controlTimeoutMs);
    return this.request("POST", "/reset", body, ResetResponseSchema, deadline, options.signal);
  }

  fork(slotId: string, into: string[], options: RequestOptions = {}): Promise<ForkResponse> {
    return this.request("POST", "/fork", { slot_id: slotId, into }, ForkResponseSchema, options.timeoutMs ?? this.controlTimeoutMs, options.signal);
  }

  /** The build runs on the server under its own timeout: the HTTP deadline is that plus the margin. */
  buildTemplate(request: TemplateBuildRequest, options: RequestOptions = {}): Promise<TemplateBuildResponse> {
    const deadline = options.timeoutMs ?? Math.ceil((request.timeout ?? 600) * 1000) + this.marginMs;
    return this.request("POST", "/templates", request, TemplateBuildResponseSchema, deadline, options.signal, false);
  }

  readArtifact(request: Parameters<SandboxClientLike["readArtifact"]>[0], options: RequestOptions = {}): Promise<ArtifactReadResponse> {
    return this.request("POST", "/artifacts/read", request, ArtifactReadResponseSchema, options.timeoutMs ?? this.controlTimeoutMs, options.signal);
  }

  listArtifacts(request: Parameters<SandboxClientLike["listArtifacts"]>[0], options: RequestOptions = {}): Promise<ArtifactListResponse> {
    return this.request("POST", "/artifacts/list", request, ArtifactListResponseSchema, options.timeoutMs ?? this.controlTimeoutMs, options.signal);
  }

  archiveArtifacts(request: Parameters<SandboxClientLike["archiveArtifacts"]>[0], options: RequestOptions = {}): Promise<ArtifactArchiveResponse> {
    return this.request("POST", "/artifacts/archive", request, ArtifactArchiveResponseSchema, options.timeoutMs ?? this.controlTimeoutMs, options.signal);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.limit.clearQueue();
    await this.pool.destroy().catch(() => undefined);
  }

  /** The HTTP deadline of calls run one after another on a slot: their timeouts plus a margin. */
  private callDeadline(requests: ExecuteRequest[]): number {
    let seconds = 0;
    for (const r of requests) seconds += r.timeout ?? this.defaultCallTimeoutS;
    return Math.ceil(seconds * 1000) + this.marginMs;
  }

  private request<S extends z.ZodType>(
    method: "GET" | "POST",
    path: string,
    body: unknown,
    schema: S,
    timeoutMs: number,
    signal: AbortSignal | undefined,
    bounded = true,
  ): Promise<z.infer<S>> {
    const run = () =>
      this.withDeadline(method, path, timeoutMs, signal, async (combined) => {
        const res: Dispatcher.ResponseData = await this.pool.request({
          path,
          method,
          headers: this.headers,
          body: body === undefined ? null : JSON.stringify(body),
          signal: combined,
        });
        const text = await res.body.text();
        if (res.statusCode < 200 || res.statusCode >= 300) throw this.httpError(method, path, res.statusCode, text);
        return this.parse(method, path, schema, text);
      });
    return bounded ? this.limit(run) : run();
  }

  /** Runs `fn` under a deadline and the caller's signal; turns transport failures into SandboxRequestError. */
  private async withDeadline<T>(
    method: string,
    path: string,
    timeoutMs: number,
    callerSignal: AbortSignal | undefined,
    fn: (signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    if (this.closed) {
      throw new SandboxRequestError(`sandbox client for ${this.containerId} is closed`, this.containerId);
    }
    callerSignal?.throwIfAborted();
    const controller = new AbortController();
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      controller.abort(new Error("deadline"));
    }, timeoutMs);
    const onAbort = () => controller.abort(callerSignal!.reason);
    callerSignal?.addEventListener("abort", onAbort, { once: true });
    try {
      return await fn(controller.signal);
    } catch (err) {
      if (err instanceof SandboxRequestError) throw err;
      if (callerSignal?.aborted) throw callerSignal.reason;
      if (timedOut) {
        throw new SandboxRequestError(
          `sandbox ${this.containerId} (${this.url}) did not answer ${method} ${path} within ${timeoutMs} ms`,
          this.containerId,
          undefined,
          { cause: err },
        );
      }
      const error = new SandboxRequestError(
        `cannot reach sandbox ${this.containerId} at ${this.url} (${method} ${path}): ${errorText(err)}`,
        this.containerId,
        undefined,
        { cause: err },
      );
      if (isConnectionFailure(err) && !this.closed) this.onConnectionFailure?.(error);
      throw error;
    } finally {
      clearTimeout(timer);
      callerSignal?.removeEventListener("abort", onAbort);
    }
  }

  private httpError(method: string, path: string, status: number, text: string): SandboxRequestError {
    let detail = text.trim().slice(0, 500);
    let body: unknown;
    try {
      body = JSON.parse(text);
      const parsed = ErrorBodySchema.safeParse(body);
      if (parsed.success) detail = parsed.data.field ? `${parsed.data.error} (field ${parsed.data.field})` : parsed.data.error;
    } catch {
      // not JSON: keep the raw text
    }
    // An image the server could not get: classified by the answer's code, never by its text.
    if (isImageUnavailable(body)) {
      return new ImageUnavailableError(`sandbox ${this.containerId} could not give a slot the image${body.image ? ` ${body.image}` : ""} (${body.reason}): ${body.error.slice(0, 1000)}`, this.containerId, status, body.reason, body.image);
    }
    const hint = status === 401 || status === 403 ? "; the pool's token does not match the server's SANDBOX_TOKEN" : "";
    return new SandboxRequestError(
      `sandbox ${this.containerId} answered ${method} ${path} with ${status}: ${detail || "(empty body)"}${hint}`,
      this.containerId,
      status,
    );
  }

  private parse<S extends z.ZodType>(method: string, path: string, schema: S, text: string): z.infer<S> {
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      throw new SandboxRequestError(
        `sandbox ${this.containerId} answered ${method} ${path} with non-JSON: ${text.slice(0, 200)}`,
        this.containerId,
      );
    }
    const parsed = schema.safeParse(json);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      throw new SandboxRequestError(
        `sandbox ${this.containerId} answered ${method} ${path} with an unexpected body: ` +
          `${issue ? `${issue.path.join(".") || "(root)"}: ${issue.message}` : "invalid"}`,
        this.containerId,
      );
    }
    return parsed.data;
  }
}
