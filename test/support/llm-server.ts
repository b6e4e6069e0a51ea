/**
 * A scripted OpenAI-compatible chat completions server for tests. Each request is answered
 * by a `respond` function that sees the request body (and how many requests came before):
 * native `tool_calls`, raw Hermes text, an HTTP error (429/500, to test retries), or a delay.
 *
 * With `tokenIds: true` it also returns vLLM-style `prompt_token_ids`, `choices[].token_ids`
 * and `logprobs`. Its "tokenizer" is one token per UTF-16 code unit of a ChatML rendering,
 * so that every turn's prompt extends the previous prompt + completion exactly as a real
 * chat template does.
 */
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";

export interface ChatRequestBody {
  model: string;
  messages: Array<{ role: string; content: string | null; tool_calls?: Array<{ id: string; function: { name: string; arguments: string } }>; tool_call_id?: string; name?: string }>;
  tools?: unknown[];
  tool_choice?: unknown;
  temperature?: number;
  max_tokens?: number;
  [extra: string]: unknown;
}

export type ScriptedReply =
  | { toolCalls: Array<{ name: string; arguments: Record<string, unknown> | string }>; content?: string | null; reasoning?: string; finishReason?: string }
  | { text: string; reasoning?: string; finishReason?: string }
  | { status: number; body?: string; retryAfterSeconds?: number }
  | { hangMs: number };

export interface LlmServerOptions {
  respond: (body: ChatRequestBody, index: number) => ScriptedReply | Promise<ScriptedReply>;
  /**
   * Return prompt/completion token ids and logprobs: `true` as vLLM's `return_token_ids` does
   * (`prompt_token_ids`, `choices[].token_ids`, `logprobs`); `"nemo-gym"` as NeMo Gym's model
   * servers do (`message.prompt_token_ids`, `message.generation_token_ids`,
   * `message.generation_log_probs`, and no choice-level fields).
   */
  tokenIds?: boolean | "nemo-gym";
  /** Listen on this port (default: a free one), so a test can allow the URL before the server starts. */
  port?: number;
  /** Answer `GET /v1/models` with these ids (default: 404, as a server without the route). */
  models?: string[];
}

export interface LlmServer {
  /** Base URL to pass as the model URL, ending in /v1. */
  url: string;
  /** Every request body received, in order. */
  requests: ChatRequestBody[];
  /** Status codes answered, in order. */
  statuses: number[];
  /** TCP connections accepted so far. */
  connections(): number;
  close(): Promise<void>;
}

/** The test tokenizer: one id per UTF-16 code unit. */
export function testTokenize(text: string): number[] {
  return Array.from({ length: text.length }, (_, i) => text.charCodeAt(i));
}

function renderToolCallsText(calls: Array<{ function: { name: string; arguments: string } }>): string {
  return calls.map((c) => `<tool_call>\n{"name": "${c.function.name}", "arguments": ${c.function.arguments}}\n</tool_call>`).join("\n");
}

/** ChatML without separators between messages, so prompt(t+1) starts with prompt(t) + completion(t). */
export function renderPrompt(messages: ChatRequestBody["messages"]): string {
  let s = "";
  for (const m of messages) {
    const content = m.role === "assistant" && m.tool_calls?.length ? [m.content ?? "", renderToolCallsText(m.tool_calls)].filter(Boolean).join("\n") : (m.content ?? "");
    s += `<|im_start|>${m.role}\n${content}<|im_end|>`;
  }
  return s + "<|im_start|>assistant\n";
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks).toString("utf8");
}

export async function startLlmServer(options: LlmServerOptions): Promise<LlmServer> {
  const requests: ChatRequestBody[] = [];
  const statuses: number[] = [];
  let counter = 0;
  let connections = 0;
  const server: Server = createServer(async (req, res) => {
    if (req.method === "GET" && req.url?.endsWith("/models") && options.models) {
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ object: "list", data: options.models.map((id) => ({ id, object: "model" })) }));
      return;
    }
    if (req.method !== "POST" || !req.url?.endsWith("/chat/completions")) {
      res.writeHead(404, { "content-type": "application/json" }).end(JSON.stringify({ error: "not found" }));
      return;
    }
    const body = JSON.parse(await readBody(req)) as ChatRequestBody;
    const index = counter++;
    requests.push(body);
    let reply: ScriptedReply;
    try {
      reply = await options.respond(body, index);
    } catch (err) {
      reply = { status: 500, body: String(err) };
    }
    if ("hangMs" in reply) {
      const ms = reply.hangMs;
      // wait: the scripted model's own delay (a test asks for it)
      await new Promise((r) => setTimeout(r, ms));
      if (res.destroyed) return;
      reply = { text: "late" };
    }
    if ("status" in reply) {
      statuses.push(reply.status);
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (reply.retryAfterSeconds !== undefined) headers["retry-after"] = String(reply.retryAfterSeconds);
      res.writeHead(reply.status, headers).end(reply.body ?? JSON.stringify({ error: { message: "scripted failure" } }));
      return;
    }
    let message: Record<string, unknown>;
    let completionText: string;
    let finish: string;
    if ("toolCalls" in reply) {
      const calls = reply.toolCalls.map((c, i) => ({
        id: `call_${index}_${i}`,
        type: "function",
        function: { name: c.name, arguments: typeof c.arguments === "string" ? c.arguments : JSON.stringify(c.arguments) },
      }));
      message = { role: "assistant", content: reply.content ?? null, tool_calls: calls };
      completionText = [reply.content ?? "", renderToolCallsText(calls)].filter(Boolean).join("\n");
      finish = reply.finishReason ?? "tool_calls";
    } else {
      message = { role: "assistant", content: reply.text };
      completionText = reply.text;
      finish = reply.finishReason ?? "stop";
    }
    if (reply.reasoning) message["reasoning_content"] = reply.reasoning;
    const prompt = renderPrompt(body.messages);
    const completionIds = testTokenize(completionText + "<|im_end|>");
    const choice: Record<string, unknown> = { index: 0, message, finish_reason: finish };
    if (options.tokenIds === "nemo-gym") {
      Object.assign(message, { prompt_token_ids: testTokenize(prompt), generation_token_ids: completionIds, generation_log_probs: completionIds.map((_, i) => -0.01 * ((i % 7) + 1)) });
    } else if (options.tokenIds) {
      choice["token_ids"] = completionIds;
      choice["logprobs"] = { content: completionIds.map((id, i) => ({ token: String.fromCharCode(id), logprob: -0.01 * ((i % 7) + 1) })) };
    }
    const out: Record<string, unknown> = {
      id: `chatcmpl-${index}`,
      object: "chat.completion",
      model: body.model,
      choices: [choice],
      usage: { prompt_tokens: prompt.length, completion_tokens: completionIds.length, total_tokens: prompt.length + completionIds.length },
    };
    if (options.tokenIds === true) out["prompt_token_ids"] = testTokenize(prompt);
    statuses.push(200);
    res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify(out));
  });
  server.on("connection", () => connections++);
  await new Promise<void>((resolve) => server.listen(options.port ?? 0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    statuses,
    connections: () => connections,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Which turn of its conversation a request is (1 + assistant messages so far). */
export function turnOf(body: ChatRequestBody): number {
  return 1 + body.messages.filter((m) => m.role === "assistant").length;
}

/** The first user message's text (the task). */
export function taskOf(body: ChatRequestBody): string {
  return body.messages.find((m) => m.role === "user")?.content ?? "";
}
