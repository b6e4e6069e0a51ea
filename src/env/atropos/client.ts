import { gzipSync } from "node:zlib";
import { Agent, request, type Dispatcher } from "undici";
import { z } from "zod";
import type { Logger } from "../../observability/logger.js";
import { silentLogger } from "../../observability/logger.js";
import { EnvError } from "../errors.js";
import type { ScoredDataGroup } from "../scored-group.js";

/** The trajectory API said no, or kept failing. */
export class AtroposError extends EnvError {
  override name = "AtroposError";
  constructor(
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

export interface RegisterEnvRequest {
  max_token_length: number;
  desired_name: string;
  weight: number;
  group_size: number;
  min_batch_allocation?: number | null;
}

export const RegisterEnvResponseSchema = z
  .object({
    status: z.string(),
    env_id: z.number().int().optional(),
    wandb_name: z.string().optional(),
    checkpoint_dir: z.string().optional(),
    starting_step: z.number().int().optional(),
    checkpoint_interval: z.number().int().optional(),
    num_steps: z.number().int().optional(),
  })
  .passthrough();
export type RegisterEnvResponse = z.infer<typeof RegisterEnvResponseSchema>;

export interface Registration {
  env_id: number;
  wandb_name: string;
  checkpoint_dir: string;
  starting_step: number;
  checkpoint_interval: number;
  num_steps: number;
}

export const InfoSchema = z.object({ batch_size: z.number().int(), max_token_len: z.number().int() }).passthrough();
export type TrainerInfo = z.infer<typeof InfoSchema>;

export const StatusEnvSchema = z
  .object({
    current_step: z.number().int(),
    queue_size: z.number(),
    unallocated_fraction: z.number().optional(),
    self_queue_size: z.number().optional(),
    max_group_size: z.number().optional(),
    env_weight: z.number().optional(),
  })
  .passthrough();
export type EnvStatus = z.infer<typeof StatusEnvSchema>;

export interface AtroposClientOptions {
  /** Base URL of the trajectory API, e.g. http://localhost:8000 */
  url: string;
  logger?: Logger;
  /** Attempts per call for 5xx and network errors (BaseEnv: 3). */
  attempts?: number;
  /** Largest wait between attempts (BaseEnv: 10 s); waits are random exponential below it. */
  maxWaitMs?: number;
  /** Pause between /register-env tries while the trainer has not started (BaseEnv: 1 s). */
  registerPollMs?: number;
  /** Bodies of at least this many bytes are gzipped when that shrinks them (BaseEnv: 1024). */
  gzipMinBytes?: number;
  timeoutMs?: number;
  dispatcher?: Dispatcher;
}

/** What a send did: sent (with the server's answer) or dropped after a 4xx, as BaseEnv does. */
export type SendResult = { sent: true; response: Record<string, unknown>; gzipped: boolean } | { sent: false; status: number; error: string };

/** A wait the signal cuts short; its abort listener goes with it (a poll every second once piled one per wait on the run's signal: MaxListenersExceededWarning while `serve` waited for the trainer). */
const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });

/** NaN/Infinity would become null in JSON and get a 422: refuse before sending. */
function assertFiniteScores(group: ScoredDataGroup): void {
  for (const s of group.scores) {
    if (!Number.isFinite(s)) throw new AtroposError(`a score is ${s}; Atropos needs finite numbers (JSON has no NaN)`);
  }
}

/**
 * Client of Atropos's trajectory API (`atroposlib/api/server.py`), as BaseEnv talks to it:
 * register (waiting for the trainer), /info, /status-env (a GET with a JSON body), scored
 * data with gzip for large bodies, 3 attempts on 5xx/network errors, 4xx dropped.
 */
export class AtroposClient {
  readonly url: string;
  private readonly log: Logger;
  private readonly dispatcher: Dispatcher;
  private readonly ownsDispatcher: boolean;
  private readonly attempts: number;
  private readonly maxWaitMs: number;
  private readonly registerPollMs: number;
  private readonly gzipMinBytes: number;
  private readonly timeoutMs: number;
  registration: Registration | undefined;

  constructor(options: AtroposClientOptions) {
    try {
      new URL(options.url);
    } catch {
      throw new AtroposError(`--atropos-url '${options.url}' is not a valid URL (expected e.g. http://localhost:8000)`);
    }
    this.url = options.url.replace(/\/+$/, "");
    this.log = options.logger ?? silentLogger();
    this.attempts = options.attempts ?? 3;
    this.maxWaitMs = options.maxWaitMs ?? 10_000;
    this.registerPollMs = options.registerPollMs ?? 1_000;
    this.gzipMinBytes = options.gzipMinBytes ?? 1024;
    this.timeoutMs = options.timeoutMs ?? 60_000;
    this.ownsDispatcher = !options.dispatcher;
    this.dispatcher = options.dispatcher ?? new Agent({ keepAliveTimeout: 30_000 });
  }

  /** POST /register-env, repeated every registerPollMs while the trainer has not started. */
  async registerEnv(req: RegisterEnvRequest, signal?: AbortSignal): Promise<Registration> {
    if (!req.desired_name) throw new AtroposError("the env needs a name to register (config.name); Atropos answers 422 to a null name");
    const body: Record<string, unknown> = { max_token_length: req.max_token_length, desired_name: req.desired_name, weight: req.weight, group_size: req.group_size };
    if (req.min_batch_allocation !== undefined) body["min_batch_allocation"] = req.min_batch_allocation;
    let waited = false;
    for (;;) {
      const raw = await this.call("POST", "/register-env", body, signal);
      const res = RegisterEnvResponseSchema.parse(raw.json);
      if (res.status === "success") {
        const reg: Registration = {
          env_id: res.env_id ?? 0,
          wandb_name: res.wandb_name ?? req.desired_name,
          checkpoint_dir: res.checkpoint_dir ?? "",
          starting_step: res.starting_step ?? 0,
          checkpoint_interval: res.checkpoint_interval ?? -1,
          num_steps: res.num_steps ?? -1,
        };
        this.registration = reg;
        this.log.info({ env_id: reg.env_id, wandb_name: reg.wandb_name, starting_step: reg.starting_step, num_steps: reg.num_steps }, "registered with the trajectory API");
        return reg;
      }
      if (!waited) this.log.info({ status: res.status }, "trajectory API is waiting for the trainer; retrying every second");
      waited = true;
      await sleep(this.registerPollMs, signal);
    }
  }

  /** GET /info: the trainer's batch_size and max_token_len (-1 before it registers). */
  async info(signal?: AbortSignal): Promise<TrainerInfo> {
    return InfoSchema.parse((await this.call("GET", "/info", undefined, signal)).json);
  }

  /** GET /status-env with a JSON body `{"env_id": N}` (query parameters get 422). */
  async statusEnv(envId: number, signal?: AbortSignal): Promise<EnvStatus> {
    return StatusEnvSchema.parse((await this.call("GET", "/status-env", { env_id: envId }, signal)).json);
  }

  /** One group → /scored_data; several → /scored_data_list (even a list of one goes there). */
  async sendScoredData(data: ScoredDataGroup | ScoredDataGroup[], signal?: AbortSignal): Promise<SendResult> {
    const list = Array.isArray(data);
    const groups = list ? data : [data];
    const envId = this.registration?.env_id;
    const withId = groups.map((g) => {
      assertFiniteScores(g);
      return envId === undefined ? g : { ...g, env_id: envId };
    });
    try {
      const r = await this.call("POST", list ? "/scored_data_list" : "/scored_data", list ? withId : withId[0], signal, true);
      return { sent: true, response: r.json as Record<string, unknown>, gzipped: r.gzipped };
    } catch (err) {
      if (err instanceof AtroposError && err.status !== undefined && err.status >= 400 && err.status < 500) {
        // BaseEnv logs and drops on 4xx: the data is invalid and retrying cannot fix it.
        this.log.error({ status: err.status, err: err.message }, "the trajectory API rejected a scored group; dropped");
        return { sent: false, status: err.status, error: err.message };
      }
      throw err;
    }
  }

  private async call(method: "GET" | "POST", path: string, body: unknown, signal?: AbortSignal, compress = false): Promise<{ json: unknown; gzipped: boolean }> {
    let payload: Buffer | undefined;
    let gzipped = false;
    const headers: Record<string, string> = { accept: "application/json" };
    if (body !== undefined) {
      payload = Buffer.from(JSON.stringify(body), "utf8");
      headers["content-type"] = "application/json";
      if (compress && payload.length >= this.gzipMinBytes) {
        const z = gzipSync(payload);
        if (z.length < payload.length) {
          payload = z;
          gzipped = true;
          headers["content-encoding"] = "gzip";
        }
      }
    }
    let last: AtroposError | undefined;
    for (let attempt = 1; attempt <= this.attempts; attempt++) {
      try {
        // undici sends a body with GET (fetch refuses to): /status-env needs it.
        const res = await request(`${this.url}${path}`, {
          method,
          headers,
          ...(payload ? { body: payload } : {}),
          dispatcher: this.dispatcher,
          headersTimeout: this.timeoutMs,
          bodyTimeout: this.timeoutMs,
          ...(signal ? { signal } : {}),
        });
        const text = await res.body.text();
        if (res.statusCode >= 200 && res.statusCode < 300) {
          try {
            return { json: JSON.parse(text), gzipped };
          } catch {
            throw new AtroposError(`${method} ${path} answered ${res.statusCode} with a body that is not JSON: ${text.slice(0, 200)}`, res.statusCode);
          }
        }
        last = new AtroposError(`${method} ${this.url}${path} got HTTP ${res.statusCode}: ${text.slice(0, 300)}`, res.statusCode);
        if (res.statusCode < 500) throw last;
      } catch (err) {
        if (signal?.aborted) throw err;
        if (err instanceof AtroposError && err.status !== undefined && err.status < 500) throw err;
        last = err instanceof AtroposError ? err : new AtroposError(`${method} ${this.url}${path} failed: ${(err as Error).message}`);
      }
      if (attempt < this.attempts) {
        // random exponential wait, capped (tenacity's wait_random_exponential)
        const cap = Math.min(this.maxWaitMs, 1000 * 2 ** (attempt - 1));
        await sleep(Math.random() * cap, signal);
      }
    }
    throw new AtroposError(`${last!.message} (after ${this.attempts} attempts; is the trajectory API at ${this.url} up?)`, last!.status);
  }

  async close(): Promise<void> {
    if (this.ownsDispatcher) await this.dispatcher.close();
  }
}
