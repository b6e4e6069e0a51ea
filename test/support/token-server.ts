/**
 * A scripted token-in, token-out inference server for tests, speaking the endpoints
 * token-exact generation uses: vLLM `POST /v1/completions` with token-id prompts, vLLM
 * `POST /inference/v1/generate`, SGLang `POST /generate`, vLLM `POST /tokenize` for chat
 * messages, and `GET /openapi.json` listing whichever of them this instance serves.
 *
 * Each request's prompt ids are recorded, decoded and handed to `respond`, which returns
 * the sampled ids of each choice (build them with `sampleOf`: thinking, tool calls, a
 * non-canonical split of a word, truncation). Logprobs are a fixed function of (id, position)
 * so a test can recompute them.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { ChatTokenizer } from "../../src/agent/chat-template.js";
import type { ChatMessage, OpenAIFunctionTool } from "../../src/agent/messages.js";

export type TokenServerFlavour = "vllm-completions" | "vllm-generate" | "sglang";

export interface ScriptedSample {
  ids: number[];
  finishReason: "stop" | "length";
}

export interface PromptContext {
  ids: number[];
  /** The prompt decoded, special tokens kept. */
  text: string;
  /** 0-based count of generation requests before this one. */
  index: number;
  n: number;
}

export interface TokenServerOptions {
  tokenizer: ChatTokenizer;
  flavour: TokenServerFlavour;
  respond: (prompt: PromptContext) => ScriptedSample | ScriptedSample[];
  /** Serve POST /tokenize (vLLM); `mismatch` renders one token differently, as a server with another template would. */
  tokenize?: "same" | "mismatch" | "absent";
}

export interface TokenServer {
  /** The base URL as a user writes it (vLLM and SGLang: …/v1). */
  url: string;
  /** Every generation prompt, in order. */
  prompts: number[][];
  /** Every sampled completion, in order (one entry per choice). */
  samples: Array<{ prompt: number[]; sample: ScriptedSample; logprobs: number[] }>;
  /** Every request: path and body. */
  requests: Array<{ path: string; body: unknown }>;
  close(): Promise<void>;
}

/** The fake model's logprob of sampling `id` at completion position `pos`. */
export function fakeLogprob(id: number, pos: number): number {
  return -(((id * 31 + pos * 7) % 1000) + 1) / 1000;
}

/** Qwen3: " international" is one token (6489), but a model may sample it as " intern" + "ational". */
export const INTERNATIONAL = { canonical: [6489], split: [2590, 1663] } as const;

/**
 * The ids a model samples for `text`: the tokenizer's ids with every canonical
 * " international" sampled as its non-canonical split, then the end-of-turn token unless
 * the turn is cut off (`truncateTo` ids, finish_reason length).
 */
export function sampleOf(tokenizer: ChatTokenizer, text: string, options: { truncateTo?: number; canonicalOnly?: boolean } = {}): ScriptedSample {
  const ids: number[] = [];
  for (const id of tokenizer.encode(text)) {
    if (!options.canonicalOnly && id === INTERNATIONAL.canonical[0]) ids.push(...INTERNATIONAL.split);
    else ids.push(id);
  }
  if (options.truncateTo !== undefined) return { ids: ids.slice(0, options.truncateTo), finishReason: "length" };
  return { ids: [...ids, ...tokenizer.endOfTurnIds], finishReason: "stop" };
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  const text = Buffer.concat(chunks).toString("utf8");
  return text ? (JSON.parse(text) as Record<string, unknown>) : {};
}

const PATHS: Record<TokenServerFlavour, string> = {
  "vllm-completions": "/v1/completions",
  "vllm-generate": "/inference/v1/generate",
  sglang: "/generate",
};

export async function startTokenServer(options: TokenServerOptions): Promise<TokenServer> {
  const { tokenizer } = options;
  const prompts: number[][] = [];
  const samples: TokenServer["samples"] = [];
  const requests: TokenServer["requests"] = [];
  const genPath = PATHS[options.flavour];
  const tokenize = options.tokenize ?? (options.flavour === "sglang" ? "absent" : "same");

  const generate = (ids: number[], n: number) => {
    const index = prompts.length;
    prompts.push(ids);
    const got = options.respond({ ids, text: tokenizer.decode(ids), index, n });
    const list = Array.isArray(got) ? got : Array.from({ length: n }, () => got);
    if (list.length !== n) throw new Error(`script returned ${list.length} samples for n=${n}`);
    return list.map((sample) => {
      const logprobs = sample.ids.map((id, pos) => fakeLogprob(id, pos));
      samples.push({ prompt: ids, sample, logprobs });
      return { sample, logprobs, text: tokenizer.decode(sample.ids) };
    });
  };

  const server: Server = createServer(async (req, res) => {
    const send = (status: number, body: unknown) => res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
    try {
      const path = (req.url ?? "").split("?")[0]!;
      const body = req.method === "POST" ? await readJson(req) : {};
      requests.push({ path, body });
      if (req.method === "GET" && path === "/openapi.json") {
        const paths: Record<string, object> = { [genPath]: {}, "/health": {} };
        if (tokenize !== "absent") paths["/tokenize"] = {};
        if (options.flavour !== "sglang") paths["/v1/chat/completions"] = {};
        return send(200, { openapi: "3.1.0", paths });
      }
      if (req.method !== "POST") return send(404, { detail: "Not Found" });
      if (path === "/tokenize" && tokenize !== "absent") {
        const messages = body["messages"] as ChatMessage[];
        const tools = (body["tools"] as OpenAIFunctionTool[] | undefined) ?? [];
        const ids = tokenizer.encode(tokenizer.render(messages, { tools, addGenerationPrompt: body["add_generation_prompt"] === true }));
        if (tokenize === "mismatch") ids[5] = ids[5]! + 1;
        return send(200, { count: ids.length, max_model_len: 32768, tokens: ids });
      }
      if (path !== genPath) return send(404, { detail: "Not Found" });
      if (options.flavour === "vllm-completions") {
        const prompt = body["prompt"];
        if (!Array.isArray(prompt) || body["return_token_ids"] !== true || body["skip_special_tokens"] !== false || body["add_special_tokens"] !== false) {
          return send(400, { error: "expected a token-id prompt with return_token_ids, skip_special_tokens=false, add_special_tokens=false" });
        }
        const out = generate(prompt as number[], Number(body["n"] ?? 1));
        return send(200, {
          id: "cmpl-test",
          object: "text_completion",
          choices: out.map((o, index) => ({
            index,
            text: o.text,
            token_ids: o.sample.ids,
            prompt_token_ids: index === 0 ? prompt : null,
            finish_reason: o.sample.finishReason,
            logprobs: { tokens: o.sample.ids.map((id) => tokenizer.decode([id])), token_logprobs: o.logprobs, top_logprobs: null, text_offset: [] },
          })),
          usage: { prompt_tokens: prompt.length, completion_tokens: out.reduce((a, o) => a + o.sample.ids.length, 0) },
        });
      }
      if (options.flavour === "vllm-generate") {
        const prompt = body["token_ids"] as number[];
        const sp = (body["sampling_params"] ?? {}) as Record<string, unknown>;
        const out = generate(prompt, Number(sp["n"] ?? 1));
        return send(200, {
          request_id: "gen-test",
          choices: out.map((o, index) => ({
            index,
            token_ids: o.sample.ids,
            finish_reason: o.sample.finishReason,
            logprobs: { content: o.sample.ids.map((id, i) => ({ token: `token_id:${id}`, logprob: o.logprobs[i] })) },
          })),
        });
      }
      const prompt = body["input_ids"] as number[];
      const sp = (body["sampling_params"] ?? {}) as Record<string, unknown>;
      if (body["return_logprob"] !== true || sp["no_stop_trim"] !== true || sp["skip_special_tokens"] !== false) {
        return send(400, { error: "expected return_logprob, no_stop_trim and skip_special_tokens=false" });
      }
      const n = Number(sp["n"] ?? 1);
      const out = generate(prompt, n).map((o) => ({
        text: o.text,
        output_ids: o.sample.ids,
        meta_info: { finish_reason: { type: o.sample.finishReason }, output_token_logprobs: o.sample.ids.map((id, i) => [o.logprobs[i], id, null]) },
      }));
      return send(200, n === 1 ? out[0] : out);
    } catch (err) {
      send(500, { error: String(err) });
    }
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    prompts,
    samples,
    requests,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
