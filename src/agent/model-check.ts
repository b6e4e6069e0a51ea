import { request } from "undici";
import { AgentError } from "./errors.js";

/** The model server cannot run this model: unreachable, refusing, or not serving the name. */
export class ModelServerError extends AgentError {
  override name = "ModelServerError";
  /**
   * `unknown_model`: the server answers but does not serve the name asked for (the caller's
   * typo: a usage error); `unreachable`, `refused` (an error status), `bad_answer` (not a
   * model list): the server's side.
   */
  constructor(
    message: string,
    readonly problem: "unreachable" | "refused" | "unknown_model" | "bad_answer" = "unreachable",
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface ModelCheckOptions {
  /** The OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (a trailing /chat/completions is accepted). */
  baseUrl: string;
  model: string;
  apiKey?: string;
  /** Name of the variable the key came from, for the 401 hint. */
  apiKeyEnv?: string;
  /** Whole check, ms (default 5 000): a dead server must fail a run in seconds, not after every retry. */
  timeoutMs?: number;
}

export interface ModelCheckResult {
  /** The ids the server listed, or undefined when it has no /models route (the name was then not checked). */
  served: string[] | undefined;
  url: string;
}

/**
 * Asks `GET {baseUrl}/models` once, before a run: the server is reachable and lists the
 * model. Throws ModelServerError naming the URL and what it answered (connection refused,
 * a status and its body, a list without the model). A server without a /models route (404)
 * passes, with `served: undefined`, so the caller can say the name was not checked.
 */
export async function checkModelServer(options: ModelCheckOptions): Promise<ModelCheckResult> {
  let url: URL;
  try {
    url = new URL(options.baseUrl);
  } catch {
    throw new ModelServerError(`model URL '${options.baseUrl}' is not a valid URL (expected e.g. http://127.0.0.1:8000/v1)`, "bad_answer");
  }
  url.pathname = `${url.pathname.replace(/\/+$/, "").replace(/\/chat\/completions$/, "")}/models`;
  const where = url.toString();
  const timeoutMs = options.timeoutMs ?? 5_000;
  let status: number;
  let text: string;
  try {
    const res = await request(where, {
      method: "GET",
      headers: options.apiKey ? { authorization: `Bearer ${options.apiKey}` } : {},
      headersTimeout: timeoutMs,
      bodyTimeout: timeoutMs,
      signal: AbortSignal.timeout(timeoutMs),
    });
    status = res.statusCode;
    text = await res.body.text();
  } catch (err) {
    throw new ModelServerError(`model server ${where} did not answer: ${describeNetworkError(err, timeoutMs)}`, "unreachable", { cause: err });
  }
  if (status === 404) return { served: undefined, url: where };
  if (status < 200 || status >= 300) {
    const hint = status === 401 || status === 403 ? ` (check the API key in $${options.apiKeyEnv ?? "OPENAI_API_KEY"})` : "";
    throw new ModelServerError(`model server ${where} answered ${status}: ${text.slice(0, 300).trim() || "(empty body)"}${hint}`, "refused");
  }
  let ids: string[];
  try {
    const body = JSON.parse(text) as { data?: Array<{ id?: unknown }> };
    ids = (body.data ?? []).map((m) => m.id).filter((id): id is string => typeof id === "string");
    if (!Array.isArray(body.data)) throw new Error("no data list");
  } catch {
    throw new ModelServerError(`model server ${where} answered 200 but not with a model list: ${text.slice(0, 200).trim()}`, "bad_answer");
  }
  if (!ids.includes(options.model)) {
    throw new ModelServerError(`model server ${where} does not serve '${options.model}'; it serves: ${ids.length ? ids.slice(0, 20).join(", ") : "(no models)"} — pass one of them as --model`, "unknown_model");
  }
  return { served: ids, url: where };
}

function describeNetworkError(err: unknown, timeoutMs: number): string {
  const e = err as { code?: string; name?: string; message?: string; cause?: { code?: string; message?: string } };
  const code = e.cause?.code ?? e.code;
  if (e.name === "TimeoutError" || code === "UND_ERR_HEADERS_TIMEOUT" || code === "UND_ERR_BODY_TIMEOUT") return `no answer within ${timeoutMs / 1000} s`;
  if (code === "ECONNREFUSED") return "connection refused (nothing listening there?)";
  if (code === "ENOTFOUND") return "host not found";
  return `${code ? `${code} ` : ""}${e.cause?.message ?? e.message ?? String(err)}`;
}
