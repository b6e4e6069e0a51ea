import { Agent, request, type Dispatcher } from "undici";
import type { ChatTokenizer } from "./chat-template.js";
import { ChatRequestError, ChatResponseError } from "./errors.js";
import type { ChatMessage, OpenAIFunctionTool } from "./messages.js";

/** Which inference server the model runs on: `openai` (chat completions only, Phase 1), or a token-in, token-out server. */
export type ServerType = "openai" | "vllm" | "sglang";

export interface GenerateRequest {
  promptIds: readonly number[];
  n: number;
  maxTokens: number;
  temperature: number;
  signal?: AbortSignal;
}

/** One sampled continuation: the ids exactly as sampled (stop token included where the server returns it). */
export interface SampledCompletion {
  ids: number[];
  logprobs: number[];
  /** stop, length, … as the server reported it. */
  finishReason: string;
}

/** A token-in, token-out generation endpoint. */
export interface TokenBackend {
  /** The endpoint's URL, for messages. */
  readonly url: string;
  generate(req: GenerateRequest): Promise<SampledCompletion[]>;
  close(): Promise<void>;
}

export interface TokenBackendOptions {
  serverType: Exclude<ServerType, "openai">;
  /** The base URL as users write it: vLLM `http://host:8000/v1`; SGLang with or without `/v1`. */
  baseUrl: string;
  model: string;
  apiKey?: string;
  timeoutMs?: number;
  /** Further attempts after the first on 429/5xx/network errors. */
  maxRetries?: number;
  dispatcher?: Dispatcher;
}

/** The server's root: the base URL without a trailing `/v1` (the token endpoints live beside it). */
export function serverRoot(baseUrl: string): string {
  let u: URL;
  try {
    u = new URL(baseUrl);
  } catch {
    throw new ChatRequestError(`model URL '${baseUrl}' is not a valid URL (expected e.g. http://127.0.0.1:8000/v1)`, 0);
  }
  u.pathname = u.pathname.replace(/\/+$/, "").replace(/\/v1$/, "");
  return u.toString().replace(/\/+$/, "");
}

class JsonPoster {
  readonly dispatcher: Dispatcher;
  private readonly owns: boolean;
  constructor(private readonly options: TokenBackendOptions) {
    this.owns = !options.dispatcher;
    this.dispatcher = options.dispatcher ?? new Agent({ connections: 256, keepAliveTimeout: 30_000 });
  }

  async call(method: "GET" | "POST", url: string, body: unknown, signal?: AbortSignal): Promise<{ status: number; json: unknown }> {
    const timeout = this.options.timeoutMs ?? 120_000;
    const retries = this.options.maxRetries ?? 4;
    for (let attempt = 0; ; attempt++) {
      let failure: ChatRequestError;
      try {
        const headers: Record<string, string> = { "content-type": "application/json", accept: "application/json" };
        if (this.options.apiKey) headers["authorization"] = `Bearer ${this.options.apiKey}`;
        const res = await request(url, {
          method,
          headers,
          dispatcher: this.dispatcher,
          headersTimeout: timeout,
          bodyTimeout: timeout,
          ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
          ...(signal ? { signal } : {}),
        });
        const text = await res.body.text();
        if (res.statusCode < 500 && res.statusCode !== 429) {
          let json: unknown = undefined;
          try {
            json = text ? JSON.parse(text) : undefined;
          } catch {
            if (res.statusCode === 200) throw new ChatResponseError(`${url} answered 200 with a body that is not JSON: ${text.slice(0, 200)}`);
          }
          return { status: res.statusCode, json: json ?? text };
        }
        failure = new ChatRequestError(`${method} ${url} got HTTP ${res.statusCode}: ${text.slice(0, 300)}`, res.statusCode);
      } catch (err) {
        if (signal?.aborted || err instanceof ChatResponseError) throw err;
        failure = new ChatRequestError(`${method} ${url} failed: ${(err as Error).message}`, undefined, attempt + 1, { cause: err });
      }
      if (attempt >= retries) throw new ChatRequestError(`${failure.message} (gave up after ${attempt + 1} attempts; check that the model server is up)`, failure.status, attempt + 1);
      await new Promise((r) => setTimeout(r, Math.min(10_000, 250 * 2 ** attempt)));
    }
  }

  async close(): Promise<void> {
    if (this.owns) await this.dispatcher.close();
  }
}

const num = (v: unknown): number => (typeof v === "number" ? v : Number.NaN);

function requireIds(url: string, ids: unknown, what: string): number[] {
  if (!Array.isArray(ids) || !ids.every((x) => Number.isInteger(x))) throw new ChatResponseError(`${url} returned no ${what} (a list of token ids): is this the server type you named?`);
  return ids as number[];
}

function checkLogprobs(url: string, ids: number[], logprobs: number[]): number[] {
  if (logprobs.length !== ids.length || logprobs.some((l) => !Number.isFinite(l))) {
    throw new ChatResponseError(`${url} returned ${logprobs.length} logprobs for ${ids.length} sampled tokens; a trainer needs one per token`);
  }
  return logprobs;
}

/** Reads one OK answer or throws with the server's words. */
function ok(url: string, r: { status: number; json: unknown }): Record<string, unknown> | unknown[] {
  if (r.status !== 200) throw new ChatRequestError(`${url} got HTTP ${r.status}: ${JSON.stringify(r.json).slice(0, 300)}`, r.status);
  if (!r.json || typeof r.json !== "object") throw new ChatResponseError(`${url} answered with something that is not a JSON object`);
  return r.json as Record<string, unknown>;
}

type Choice = Record<string, unknown>;

/** vLLM `POST /v1/completions` with `prompt` as token ids. */
class VllmCompletions implements TokenBackend {
  readonly url: string;
  constructor(
    private readonly http: JsonPoster,
    private readonly options: TokenBackendOptions,
  ) {
    this.url = `${serverRoot(options.baseUrl)}/v1/completions`;
  }
  async generate(req: GenerateRequest): Promise<SampledCompletion[]> {
    const body = {
      model: this.options.model,
      prompt: req.promptIds,
      n: req.n,
      max_tokens: req.maxTokens,
      temperature: req.temperature,
      logprobs: 0,
      return_token_ids: true,
      skip_special_tokens: false,
      add_special_tokens: false,
    };
    const json = ok(this.url, await this.http.call("POST", this.url, body, req.signal)) as { choices?: Choice[] };
    const choices = [...(json.choices ?? [])].sort((a, b) => num(a["index"]) - num(b["index"]));
    return choices.map((c) => {
      const ids = requireIds(this.url, c["token_ids"], "choices[].token_ids (a vLLM that supports return_token_ids)");
      const lp = (c["logprobs"] as { token_logprobs?: unknown[] } | null)?.token_logprobs ?? [];
      return { ids, logprobs: checkLogprobs(this.url, ids, lp.map(num)), finishReason: String(c["finish_reason"] ?? "stop") };
    });
  }
  close = () => this.http.close();
}

/** vLLM's token-in, token-out `POST /inference/v1/generate`. */
class VllmGenerate implements TokenBackend {
  readonly url: string;
  constructor(
    private readonly http: JsonPoster,
    private readonly options: TokenBackendOptions,
  ) {
    this.url = `${serverRoot(options.baseUrl)}/inference/v1/generate`;
  }
  async generate(req: GenerateRequest): Promise<SampledCompletion[]> {
    const body = {
      model: this.options.model,
      token_ids: req.promptIds,
      stream: false,
      sampling_params: { n: req.n, max_tokens: req.maxTokens, temperature: req.temperature, logprobs: 0, skip_special_tokens: false },
    };
    const json = ok(this.url, await this.http.call("POST", this.url, body, req.signal)) as { choices?: Choice[] };
    const choices = [...(json.choices ?? [])].sort((a, b) => num(a["index"]) - num(b["index"]));
    return choices.map((c) => {
      const ids = requireIds(this.url, c["token_ids"], "choices[].token_ids");
      const raw = c["logprobs"] as { content?: Array<{ logprob?: unknown }> } | unknown[] | null | undefined;
      const lp = Array.isArray(raw) ? raw.map(num) : (raw?.content ?? []).map((e) => num(e.logprob));
      return { ids, logprobs: checkLogprobs(this.url, ids, lp), finishReason: String(c["finish_reason"] ?? "stop") };
    });
  }
  close = () => this.http.close();
}

/** SGLang's native `POST /generate` with `input_ids`. */
class SglangGenerate implements TokenBackend {
  readonly url: string;
  constructor(
    private readonly http: JsonPoster,
    _options: TokenBackendOptions,
  ) {
    this.url = `${serverRoot(_options.baseUrl)}/generate`;
  }
  async generate(req: GenerateRequest): Promise<SampledCompletion[]> {
    const body = {
      input_ids: req.promptIds,
      sampling_params: { n: req.n, max_new_tokens: req.maxTokens, temperature: req.temperature, skip_special_tokens: false, no_stop_trim: true },
      return_logprob: true,
    };
    const json = ok(this.url, await this.http.call("POST", this.url, body, req.signal));
    const outs = (Array.isArray(json) ? json : [json]) as Choice[];
    return outs.map((o) => {
      const meta = (o["meta_info"] ?? {}) as { output_token_logprobs?: unknown[]; finish_reason?: { type?: string } | string | null };
      const entries = (meta.output_token_logprobs ?? []) as unknown[][];
      const ids = requireIds(this.url, o["output_ids"] ?? entries.map((e) => e[1]), "output_ids");
      const finish = typeof meta.finish_reason === "string" ? meta.finish_reason : (meta.finish_reason?.type ?? "stop");
      return { ids, logprobs: checkLogprobs(this.url, ids, entries.map((e) => num(e[0]))), finishReason: finish };
    });
  }
  close = () => this.http.close();
}

/** The server's token path, chosen by probing (GET /openapi.json), and whether its renders match ours. */
export interface ProbedBackend {
  backend: TokenBackend;
  /** `checked`: the server's /tokenize agreed with the local template; `unavailable`: it has none. */
  templateCheck: "checked" | "unavailable";
}

const SAMPLE_CONVERSATION: ChatMessage[] = [
  { role: "system", content: "You are a helpful agent." },
  { role: "user", content: "List the files, then say how many there are." },
  { role: "assistant", content: null, tool_calls: [{ id: "call_0", type: "function", function: { name: "terminal", arguments: '{"command": "ls"}' } }] },
  { role: "tool", tool_call_id: "call_0", name: "terminal", content: '{"output": "a\\nb\\n", "exit_code": 0}' },
];
const SAMPLE_TOOLS: OpenAIFunctionTool[] = [
  { type: "function", function: { name: "terminal", description: "Run a shell command", parameters: { type: "object", properties: { command: { type: "string" } }, required: ["command"] } } },
];

/** The token template mismatch between this client and the inference server. */
export class TemplateMismatchError extends ChatRequestError {
  override name = "TemplateMismatchError";
}

/**
 * Picks the token-in, token-out endpoint of the server at `baseUrl` (vLLM: /inference/v1/generate
 * where the server lists it, else /v1/completions; SGLang: /generate) and, where the server
 * has `/tokenize` for chat messages (vLLM), checks that it renders a sample conversation to
 * the same ids as the local tokenizer and template. A mismatch fails: the trajectories would
 * hold ids the model never saw.
 */
export async function probeTokenBackend(options: TokenBackendOptions, tokenizer: ChatTokenizer): Promise<ProbedBackend> {
  const http = new JsonPoster({ ...options, maxRetries: Math.min(options.maxRetries ?? 4, 2) });
  const root = serverRoot(options.baseUrl);
  let paths: string[] = [];
  try {
    const r = await http.call("GET", `${root}/openapi.json`, undefined);
    if (r.status === 200 && r.json && typeof r.json === "object") paths = Object.keys((r.json as { paths?: object }).paths ?? {});
  } catch (err) {
    await http.close();
    throw new ChatRequestError(`cannot reach the ${options.serverType} server at ${root}: ${(err as Error).message}`, undefined, 1, { cause: err });
  }
  const real = new JsonPoster(options);
  await http.close();
  let backend: TokenBackend;
  if (options.serverType === "sglang") backend = new SglangGenerate(real, options);
  else if (paths.includes("/inference/v1/generate")) backend = new VllmGenerate(real, options);
  else backend = new VllmCompletions(real, options);

  if (options.serverType !== "vllm" || (paths.length > 0 && !paths.includes("/tokenize"))) return { backend, templateCheck: "unavailable" };
  const r = await real.call("POST", `${root}/tokenize`, { model: options.model, messages: SAMPLE_CONVERSATION, tools: SAMPLE_TOOLS, add_generation_prompt: true, add_special_tokens: false });
  if (r.status === 404) return { backend, templateCheck: "unavailable" };
  const theirs = (ok(`${root}/tokenize`, r) as { tokens?: unknown }).tokens;
  const ours = tokenizer.encode(tokenizer.render(SAMPLE_CONVERSATION, { tools: SAMPLE_TOOLS, addGenerationPrompt: true }));
  const same = Array.isArray(theirs) && theirs.length === ours.length && ours.every((id, i) => theirs[i] === id);
  if (!same) {
    await backend.close();
    const at = Array.isArray(theirs) ? ours.findIndex((id, i) => theirs[i] !== id) : 0;
    throw new TemplateMismatchError(
      `the local tokenizer and chat template render a sample conversation differently from the server at ${root} (first difference at token ${at}: ` +
        `ours ${JSON.stringify(tokenizer.decode(ours.slice(Math.max(0, at - 3), at + 5)))}, the server's ${Array.isArray(theirs) ? JSON.stringify(tokenizer.decode((theirs as number[]).slice(Math.max(0, at - 3), at + 5))) : "none"}). ` +
        "Point --tokenizer at the model's own tokenizer.json (with its tokenizer_config.json beside it), and start the server without --chat-template overrides.",
    );
  }
  return { backend, templateCheck: "checked" };
}
