/**
 * A test double of Atropos's trajectory API server (`atroposlib/api/server.py`), built from
 * the protocol note (shared/atropos-protocol.md): the trainer side (/register, /batch) and
 * the env side (/register-env with its "wait for trainer" answer, /info, /status-env as a GET
 * with a JSON body, /scored_data and /scored_data_list with gzip bodies, validation and
 * per-env buffering). It records every request so tests can check what an env sent.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { gunzipSync } from "node:zlib";

export const SCORED_DATA_KEYS = [
  "tokens", "masks", "scores", "advantages", "ref_logprobs", "messages", "generation_params",
  "inference_logprobs", "overrides", "group_overrides", "images", "env_id", "distill_token_ids", "distill_logprobs",
] as const;

export interface RecordedRequest {
  method: string;
  path: string;
  query: string;
  headers: IncomingMessage["headers"];
  /** The body as sent on the wire (still gzipped when it was). */
  rawBytes: number;
  gzipped: boolean;
  body: unknown;
}

interface EnvEntry {
  env_id: number;
  name: string;
  group_size: number;
  max_token_length: number;
  weight: number;
  min_batch_allocation: number | null;
  connected: boolean;
}

export interface AtroposDouble {
  url: string;
  requests: RecordedRequest[];
  /** Groups stored as the server stores them (all 14 keys). */
  queue: Array<Record<string, unknown>>;
  envs: EnvEntry[];
  state: { started: boolean; batchSize: number; maxTokenLen: number; numSteps: number; startingStep: number; currentStep: number };
  /** Forces /status-env's queue_size (back-off tests); null: computed. */
  setQueueSize(n: number | null): void;
  /** The next `times` requests to `path` get HTTP `status`. */
  failNext(path: string, status: number, times?: number): void;
  /** Trainer: POST /register. */
  registerTrainer(body?: Partial<{ batch_size: number; max_token_len: number; num_steps: number; starting_step: number; checkpoint_dir: string; save_checkpoint_interval: number }>): Promise<unknown>;
  /** Trainer: GET /batch. */
  getBatch(): Promise<{ batch: unknown[] | null }>;
  close(): Promise<void>;
}

function reply(res: import("node:http").ServerResponse, status: number, body: unknown) {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

/** Pydantic-like validation of ScoredData: the checks the real server makes (422 otherwise). */
function validateScored(d: unknown): string | null {
  if (!d || typeof d !== "object" || Array.isArray(d)) return "body must be an object";
  const o = d as Record<string, unknown>;
  for (const k of ["tokens", "masks"]) {
    if (!Array.isArray(o[k]) || !(o[k] as unknown[]).every((r) => Array.isArray(r) && r.every((x) => Number.isInteger(x)))) return `${k}: must be List[List[int]]`;
  }
  if (!Array.isArray(o["scores"]) || !(o["scores"] as unknown[]).every((x) => typeof x === "number")) return "scores: must be List[float]";
  const msgs = o["messages"];
  if (msgs !== null && msgs !== undefined) {
    if (!Array.isArray(msgs)) return "messages: must be a list";
    for (const seq of msgs) {
      if (!Array.isArray(seq)) return "messages: each entry must be a list";
      for (const m of seq) if (!m || typeof m !== "object" || !("role" in m) || !("content" in m)) return "messages: every message needs 'role' and 'content'";
    }
  }
  return null;
}

export async function startAtroposDouble(): Promise<AtroposDouble> {
  const requests: RecordedRequest[] = [];
  const queue: Array<Record<string, unknown>> = [];
  const envs: EnvEntry[] = [];
  const buffers = new Map<number, Array<Record<string, unknown>>>();
  const state = { started: false, registered: false, batchSize: -1, maxTokenLen: -1, numSteps: -1, startingStep: 0, currentStep: 0, checkpointDir: "", checkpointInterval: -1 };
  let queueOverride: number | null = null;
  const failures = new Map<string, { status: number; times: number }>();

  const enqueue = (raw: Record<string, unknown>) => {
    const item: Record<string, unknown> = {};
    for (const k of SCORED_DATA_KEYS) item[k] = raw[k] ?? null; // unknown keys vanish, missing ones are null
    const envId = typeof item["env_id"] === "number" ? (item["env_id"] as number) : null;
    const env = envId === null ? undefined : envs[envId];
    const n = (item["tokens"] as unknown[]).length;
    if (!env || n === env.group_size) {
      queue.push(item);
      return { status: "received" as const };
    }
    const buf = buffers.get(env.env_id) ?? [];
    buf.push(item);
    buffers.set(env.env_id, buf);
    const total = buf.reduce((a, g) => a + (g["tokens"] as unknown[]).length, 0);
    if (total === env.group_size) {
      queue.push(...buf);
      buffers.set(env.env_id, []);
      return { status: "received" as const };
    }
    return { status: "buffered" as const, buffer_size: buf.length };
  };

  const server: Server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    let raw = Buffer.concat(chunks);
    const [path = "", query = ""] = (req.url ?? "").split("?");
    const gz = String(req.headers["content-encoding"] ?? "").includes("gzip");
    const rec: RecordedRequest = { method: req.method ?? "", path, query, headers: req.headers, rawBytes: raw.length, gzipped: gz, body: undefined };
    requests.push(rec);
    if (gz) {
      try {
        raw = gunzipSync(raw);
      } catch {
        return reply(res, 400, { detail: "Invalid gzip payload" });
      }
    }
    let body: unknown;
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw.toString("utf8"));
      } catch {
        return reply(res, 422, { detail: "body is not JSON" });
      }
    }
    rec.body = body;
    const fail = failures.get(path);
    if (fail && fail.times > 0) {
      fail.times--;
      return reply(res, fail.status, { detail: "scripted failure" });
    }
    const b = (body ?? {}) as Record<string, unknown>;
    const key = `${req.method} ${path}`;
    switch (key) {
      case "POST /register": {
        for (const k of ["wandb_group", "wandb_project", "checkpoint_dir", "batch_size", "max_token_len", "save_checkpoint_interval", "starting_step", "num_steps"]) {
          if (!(k in b)) return reply(res, 422, { detail: `field required: ${k}` });
        }
        if (!state.registered) {
          state.registered = true;
          state.batchSize = b["batch_size"] as number;
          state.maxTokenLen = b["max_token_len"] as number;
          state.numSteps = b["num_steps"] as number;
          state.startingStep = b["starting_step"] as number;
          state.currentStep = state.startingStep;
          state.checkpointDir = b["checkpoint_dir"] as string;
          state.checkpointInterval = b["save_checkpoint_interval"] as number;
        }
        // A 128-bit uuid as a JSON integer, beyond Number.MAX_SAFE_INTEGER.
        res.writeHead(200, { "content-type": "application/json" }).end(`{"uuid": 271828182845904523536028747135266249775}`);
        return;
      }
      case "GET /batch": {
        if (!state.registered) return reply(res, 200, { status: "error", message: "trainer not registered", batch: [] });
        state.started = true;
        let seqs = 0;
        let take = 0;
        while (take < queue.length && seqs < state.batchSize) seqs += (queue[take++]!["tokens"] as unknown[]).length;
        if (seqs !== state.batchSize) return reply(res, 200, { batch: null });
        const batch = queue.splice(0, take);
        state.currentStep++;
        return reply(res, 200, { batch });
      }
      case "POST /register-env": {
        if (typeof b["desired_name"] !== "string") return reply(res, 422, { detail: "desired_name: none is not an allowed value" });
        for (const k of ["max_token_length", "weight", "group_size"]) if (typeof b[k] !== "number") return reply(res, 422, { detail: `${k}: field required` });
        if (!state.started) return reply(res, 200, { status: "wait for trainer to start" });
        const name = b["desired_name"] as string;
        const same = envs.filter((e) => e.name === name).length;
        const entry: EnvEntry = {
          env_id: envs.length,
          name,
          group_size: b["group_size"] as number,
          max_token_length: b["max_token_length"] as number,
          weight: b["weight"] as number,
          min_batch_allocation: (b["min_batch_allocation"] as number | null | undefined) ?? null,
          connected: true,
        };
        envs.push(entry);
        return reply(res, 200, {
          status: "success",
          env_id: entry.env_id,
          wandb_name: `${name}_${same}`,
          checkpoint_dir: state.checkpointDir,
          starting_step: state.startingStep,
          checkpoint_interval: state.checkpointInterval,
          num_steps: state.numSteps,
        });
      }
      case "GET /info":
        return reply(res, 200, { batch_size: state.registered ? state.batchSize : -1, max_token_len: state.registered ? state.maxTokenLen : -1 });
      case "GET /status-env": {
        if (query) return reply(res, 422, { detail: "env_id must be in the JSON body" });
        const id = b["env_id"];
        if (typeof id !== "number" || !envs[id]) return reply(res, 422, { detail: "env_id: field required (JSON body)" });
        const env = envs[id]!;
        const own = queue.filter((g) => g["env_id"] === id).reduce((a, g) => a + (g["tokens"] as unknown[]).length, 0);
        const all = queue.reduce((a, g) => a + (g["tokens"] as unknown[]).length, 0);
        const weights = envs.map((e) => Math.max(0, e.max_token_length * e.weight));
        const sum = weights.reduce((a, w) => a + w, 0);
        if (sum === 0) return reply(res, 500, { detail: "all weights are 0" });
        return reply(res, 200, {
          current_step: state.currentStep,
          queue_size: queueOverride ?? Math.floor(all / env.group_size),
          unallocated_fraction: 1.0,
          self_queue_size: Math.floor(own / env.group_size),
          max_group_size: env.group_size,
          env_weight: Math.max(0.01, weights[id]! / sum),
        });
      }
      case "POST /scored_data": {
        const err = validateScored(body);
        if (err) return reply(res, 422, { detail: err });
        return reply(res, 200, enqueue(b));
      }
      case "POST /scored_data_list": {
        if (!Array.isArray(body)) return reply(res, 422, { detail: "body must be a list" });
        for (const g of body) {
          const err = validateScored(g);
          if (err) return reply(res, 422, { detail: err });
        }
        let buffered = 0;
        let last = 0;
        for (const g of body as Array<Record<string, unknown>>) {
          const r = enqueue(g);
          if (r.status === "buffered") {
            buffered++;
            last = r.buffer_size;
          }
        }
        return reply(res, 200, { status: "received", groups_processed: body.length, ...(buffered ? { buffered, last_buffer_size: last } : {}) });
      }
      case "GET /status":
        return reply(res, 200, { current_step: state.currentStep, queue_size: queue.length });
      default:
        return reply(res, 404, { detail: "Not Found" });
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${url}${path}`, { method, ...(body ? { body: JSON.stringify(body), headers: { "content-type": "application/json" } } : {}) });
    return JSON.parse(await r.text()) as unknown;
  };
  return {
    url,
    requests,
    queue,
    envs,
    state,
    setQueueSize: (n) => {
      queueOverride = n;
    },
    failNext: (path, status, times = 1) => {
      failures.set(path, { status, times });
    },
    registerTrainer: (over = {}) =>
      call("POST", "/register", {
        wandb_group: "g",
        wandb_project: "p",
        checkpoint_dir: over.checkpoint_dir ?? "/ckpt",
        batch_size: over.batch_size ?? 4,
        max_token_len: over.max_token_len ?? 4096,
        save_checkpoint_interval: over.save_checkpoint_interval ?? 100,
        starting_step: over.starting_step ?? 0,
        num_steps: over.num_steps ?? 1000,
      }),
    getBatch: async () => (await call("GET", "/batch")) as { batch: unknown[] | null },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
