import { Agent, request, type Dispatcher } from "undici";
import { z } from "zod";
import type { ChatMessage, OpenAIFunctionTool, TokenUsage } from "./messages.js";
import { ChatRequestError, ChatResponseError } from "./errors.js";
import { LatencyWindow } from "../observability/latency-window.js";

export interface ChatClientOptions {
  /** Base URL of the OpenAI-compatible API, e.g. http://127.0.0.1:8000/v1 (a trailing /chat/completions is accepted). */
  baseUrl: string;
  /** Sent as `Authorization: Bearer …`; defaults to none. Never logged. */
  apiKey?: string;
  /** Per-request timeout (headers and body), ms. Default 120 000. */
  timeoutMs?: number;
  /** Further attempts after the first on 429/5xx/timeouts/network errors. Default 4. */
  maxRetries?: number;
  /** First back-off delay, doubled each retry with jitter, capped at maxBackoffMs. Default 500. */
  initialBackoffMs?: number;
  maxBackoffMs?: number;
  /**
   * Largest answer read, bytes: the body is counted as it streams in and cut past this (an
   * error naming the cap, not retried). Default: no cap (an env's own configured endpoint);
   * the OpenEnv server's POST /run always sets one, since its endpoint is the client's.
   */
  maxResponseBytes?: number;
  /** Extra headers (e.g. OpenRouter's HTTP-Referer). */
  headers?: Record<string, string>;
  dispatcher?: Dispatcher;
}

export interface ChatRequest {
  model: string;
  messages: ChatMessage[];
  tools?: OpenAIFunctionTool[];
  tool_choice?: "auto" | "none" | "required";
  temperature?: number;
  max_tokens?: number;
  /** Provider-specific parameters merged into the body last (OpenRouter `provider`, vLLM `return_token_ids`, ...). */
  extra_body?: Record<string, unknown>;
}

const LogprobEntrySchema = z.object({ token: z.string().optional(), logprob: z.number().nullable().optional() }).passthrough();

const ChoiceSchema = z
  .object({
    index: z.number().optional(),
    finish_reason: z.string().nullable().optional(),
    message: z
      .object({
        role: z.string().optional(),
        content: z.string().nullable().optional(),
        reasoning_content: z.string().nullable().optional(),
        reasoning: z.string().nullable().optional(),
        tool_calls: z
          .array(
            z.object({
              id: z.string().optional(),
              type: z.string().optional(),
              function: z.object({ name: z.string(), arguments: z.union([z.string(), z.record(z.string(), z.unknown())]).optional() }),
            }),
          )
          .nullable()
          .optional(),
        // NeMo Gym's model servers put the turn's token information on the message itself.
        prompt_token_ids: z.array(z.number().int()).nullable().optional(),
        generation_token_ids: z.array(z.number().int()).nullable().optional(),
        generation_log_probs: z.array(z.number()).nullable().optional(),
      })
      .passthrough(),
    logprobs: z.object({ content: z.array(LogprobEntrySchema).nullable().optional() }).passthrough().nullable().optional(),
    token_ids: z.array(z.number().int()).nullable().optional(),
    prompt_token_ids: z.array(z.number().int()).nullable().optional(),
  })
  .passthrough();

export const ChatCompletionSchema = z
  .object({
    id: z.string().optional(),
    model: z.string().optional(),
    choices: z.array(ChoiceSchema).min(1, "the completion has no choices"),
    usage: z
      .object({ prompt_tokens: z.number().optional(), completion_tokens: z.number().optional(), total_tokens: z.number().optional() })
      .passthrough()
      .nullable()
      .optional(),
    prompt_token_ids: z.array(z.number().int()).nullable().optional(),
  })
  .passthrough();
export type ChatCompletion = z.infer<typeof ChatCompletionSchema>;

export interface ChatCallOptions {
  signal?: AbortSignal;
}

/** Aggregate counts for the run summary. */
export interface ChatClientStats {
  /** HTTP requests sent (first tries and retries). */
  requests: number;
  /** Requests that were a retry of a failed one. */
  retries: number;
  /** Calls (`complete`) that needed at least one retry, whether they then succeeded or not. */
  retriedCalls: number;
  /** Calls that gave up (retries exhausted, or an error not worth retrying). */
  failures: number;
  /** Calls that returned a completion. */
  completed: number;
  usage: TokenUsage;
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });

/**
 * A client for `POST {baseUrl}/chat/completions` on any OpenAI-compatible server (vLLM,
 * SGLang, OpenAI, OpenRouter). Retries 429, 5xx, timeouts and network errors with
 * exponential back-off (honouring `Retry-After`); other 4xx fail at once, since repeating
 * a bad request cannot help.
 */
export class ChatCompletionsClient {
  readonly url: string;
  private readonly dispatcher: Dispatcher;
  private readonly ownsDispatcher: boolean;
  private readonly timeoutMs: number;
  private readonly maxRetries: number;
  private readonly initialBackoffMs: number;
  private readonly maxBackoffMs: number;
  readonly counters: ChatClientStats = { requests: 0, retries: 0, retriedCalls: 0, failures: 0, completed: 0, usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 } };
  /** Wall time of each completed call, retries and back-off included (what a trajectory waited). */
  readonly latency = new LatencyWindow();

  constructor(private readonly options: ChatClientOptions) {
    let base: URL;
    try {
      base = new URL(options.baseUrl);
    } catch {
      throw new ChatRequestError(`model URL '${options.baseUrl}' is not a valid URL (expected e.g. http://127.0.0.1:8000/v1)`, 0);
    }
    const path = base.pathname.replace(/\/+$/, "");
    base.pathname = path.endsWith("/chat/completions") ? path : `${path}/chat/completions`;
    this.url = base.toString();
    this.timeoutMs = options.timeoutMs ?? 120_000;
    this.maxRetries = options.maxRetries ?? 4;
    this.initialBackoffMs = options.initialBackoffMs ?? 500;
    this.maxBackoffMs = options.maxBackoffMs ?? 20_000;
    this.ownsDispatcher = !options.dispatcher;
    this.dispatcher = options.dispatcher ?? new Agent({ connections: 256, keepAliveTimeout: 30_000 });
  }

  async complete(req: ChatRequest, callOptions: ChatCallOptions = {}): Promise<ChatCompletion> {
    const { extra_body, ...rest } = req;
    const body: Record<string, unknown> = { ...rest, ...(extra_body ?? {}) };
    if (!body["tools"] || (body["tools"] as unknown[]).length === 0) {
      delete body["tools"];
      delete body["tool_choice"];
    }
    for (const k of Object.keys(body)) if (body[k] === undefined) delete body[k];
    const payload = JSON.stringify(body);

    let lastError: ChatRequestError | ChatResponseError | undefined;
    const started = performance.now();
    for (let attempt = 0; attempt <= this.maxRetries; attempt++) {
      this.counters.requests++;
      if (attempt === 1) this.counters.retriedCalls++;
      let retryAfterMs: number | undefined;
      try {
        const completion = await this.once(payload, callOptions.signal);
        const u = completion.usage;
        if (u) {
          this.counters.usage.prompt_tokens += u.prompt_tokens ?? 0;
          this.counters.usage.completion_tokens += u.completion_tokens ?? 0;
          this.counters.usage.total_tokens += u.total_tokens ?? 0;
        }
        this.counters.completed++;
        this.latency.record(performance.now() - started);
        return completion;
      } catch (err) {
        if (callOptions.signal?.aborted) throw err;
        if (!(err instanceof ChatRequestError) && !(err instanceof ChatResponseError)) {
          this.counters.failures++;
          throw err;
        }
        lastError = err;
        if (!isRetryable(err) || attempt === this.maxRetries) break;
        retryAfterMs = (err as ChatRequestError & { retryAfterMs?: number }).retryAfterMs;
      }
      this.counters.retries++;
      const backoff = Math.min(this.maxBackoffMs, this.initialBackoffMs * 2 ** attempt);
      const jittered = backoff / 2 + Math.random() * (backoff / 2);
      await sleep(Math.max(jittered, retryAfterMs ?? 0), callOptions.signal);
    }
    this.counters.failures++;
    const attempts = this.maxRetries + 1;
    if (lastError instanceof ChatResponseError && !isRetryable(lastError)) throw lastError;
    throw new ChatRequestError(
      isRetryable(lastError!)
        ? `${lastError!.message} (gave up after ${attempts} attempts; check that the model server at ${this.url} is up and not overloaded)`
        : lastError!.message,
      lastError instanceof ChatRequestError ? lastError.status : undefined,
      attempts,
      { cause: lastError },
    );
  }

  private async once(payload: string, signal?: AbortSignal): Promise<ChatCompletion> {
    const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json", ...(this.options.headers ?? {}) };
    if (this.options.apiKey) headers["authorization"] = `Bearer ${this.options.apiKey}`;
    let res: Dispatcher.ResponseData;
    try {
      res = await request(this.url, {
        method: "POST",
        body: payload,
        headers,
        dispatcher: this.dispatcher,
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
        ...(signal ? { signal } : {}),
      });
    } catch (err) {
      if (signal?.aborted) throw err;
      const code = (err as { code?: string }).code ?? "";
      const what = code.includes("TIMEOUT") ? `timed out after ${this.timeoutMs} ms` : `failed: ${(err as Error).message}`;
      throw new ChatRequestError(`chat completion request to ${this.url} ${what}`, undefined, 1, { cause: err });
    }
    let text: string;
    try {
      text = await this.readBody(res);
    } catch (err) {
      // Cut by the caller (a deadline, a client gone): that is no failure of the model server.
      if (signal?.aborted) throw err;
      if (err instanceof ChatResponseError) throw err;
      throw new ChatRequestError(`reading the chat completion from ${this.url} failed: ${(err as Error).message}`, undefined, 1, { cause: err });
    }
    if (res.statusCode !== 200) {
      const e = new ChatRequestError(`chat completion request to ${this.url} got HTTP ${res.statusCode}: ${text.slice(0, 300)}`, res.statusCode);
      const ra = res.headers["retry-after"];
      const seconds = Number(Array.isArray(ra) ? ra[0] : ra);
      if (Number.isFinite(seconds) && seconds > 0) (e as ChatRequestError & { retryAfterMs?: number }).retryAfterMs = Math.min(seconds * 1000, this.maxBackoffMs);
      throw e;
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch {
      // A proxy or load balancer's error page (HTML) sent with 200: as passing as a 5xx, so retried like one.
      throw new ChatResponseError(`the model server at ${this.url} answered 200 with a body that is not JSON: ${text.slice(0, 200)}`, { retryable: true });
    }
    const parsed = ChatCompletionSchema.safeParse(json);
    if (!parsed.success) {
      throw new ChatResponseError(
        `the model server at ${this.url} answered with something that is not a chat completion: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
      );
    }
    return parsed.data;
  }

  /** The answer's text, counted as it arrives and cut past maxResponseBytes (never held whole beyond the cap). */
  private async readBody(res: Dispatcher.ResponseData): Promise<string> {
    const max = this.options.maxResponseBytes;
    if (max === undefined) return res.body.text();
    const tooBig = () => new ChatResponseError(`the model server at ${this.url} answered more than ${max} bytes (this server's cap on a model answer): the answer was cut and not read`);
    const declared = Number(res.headers["content-length"]);
    if (Number.isFinite(declared) && declared > max) {
      res.body.destroy();
      throw tooBig();
    }
    const chunks: Buffer[] = [];
    let size = 0;
    for await (const chunk of res.body) {
      size += (chunk as Buffer).length;
      if (size > max) {
        res.body.destroy();
        throw tooBig();
      }
      chunks.push(chunk as Buffer);
    }
    return Buffer.concat(chunks).toString("utf8");
  }

  /** The run summary's figures: calls completed, retried and failed, and completed calls' latency. */
  summary(): ChatCallSummary {
    const latency = this.latency.summary();
    return { completed: this.counters.completed, retriedCalls: this.counters.retriedCalls, retries: this.counters.retries, failed: this.counters.failures, latencyP50Ms: latency.p50, latencyP99Ms: latency.p99 };
  }

  async close(): Promise<void> {
    if (this.ownsDispatcher) await this.dispatcher.close();
  }
}

/** The client of an env's model config: its endpoint, timeout, retries, and the API key from the variable `apiKeyEnv` names. */
export function chatClientFor(model: { url: string; timeoutMs: number; maxRetries: number; apiKeyEnv: string }): ChatCompletionsClient {
  const apiKey = process.env[model.apiKeyEnv];
  return new ChatCompletionsClient({ baseUrl: model.url, timeoutMs: model.timeoutMs, maxRetries: model.maxRetries, ...(apiKey ? { apiKey } : {}) });
}

/** A model client's counts over a run. */
export interface ChatCallSummary {
  /** Calls that returned a completion. */
  completed: number;
  /** Calls that needed at least one retry. */
  retriedCalls: number;
  /** Retries sent in all. */
  retries: number;
  /** Calls that gave up (retries exhausted or not retryable): each is a `model` infra failure. */
  failed: number;
  /** Wall time of completed calls, retries included, ms. */
  latencyP50Ms: number;
  latencyP99Ms: number;
}

function isRetryable(err: ChatRequestError | ChatResponseError): boolean {
  return err.retryable;
}
