import { z } from "zod";

/**
 * The model client's settings: the `model` section of an env config. Unset `url`: the env's
 * oracle policy plays the model. The API key itself is never part of a config, only the name
 * of the environment variable that holds it.
 */
export const ModelConfigSchema = z.object({
  /** OpenAI-compatible endpoint (…/v1). Unset: the env's oracle policy plays the model. */
  url: z.url({ protocol: /^https?$/, error: "must be an http(s) URL such as http://127.0.0.1:8000/v1" }).optional(),
  /** The model as the server knows it (needed with `url`). */
  name: z.string().min(1).optional(),
  /** Environment variable holding the API key. */
  apiKeyEnv: z.string().min(1).default("OPENAI_API_KEY"),
  /** `native`: tools= and server-side parsing; `hermes`: tools in the prompt, `<tool_call>` parsed here. */
  toolCallFormat: z.enum(["native", "hermes"]).default("native"),
  temperature: z.number().min(0).max(2).default(1.0),
  /** Most tokens per model response; also the generation budget sent to Atropos (`max_token_length`). */
  maxTokens: z.number().int().positive().default(2048),
  /** Extra fields merged into every chat-completions request body. */
  extraBody: z.record(z.string(), z.unknown()).optional(),
  /** One model request's timeout. */
  timeoutMs: z.number().int().positive().default(120_000),
  /** Retries of a failed model request (5xx, connection errors). */
  maxRetries: z.number().int().min(0).max(20).default(4),
  /**
   * `openai`: chat completions, re-rendered each turn (not token-exact); `vllm` / `sglang`:
   * token in, token out (needs tokenizerPath), every trained id as sampled.
   */
  serverType: z.enum(["openai", "vllm", "sglang"]).default("openai"),
  /** A local HF `tokenizer.json` (tokenizer_config.json beside it): tokens/masks when the server returns no ids, and the chat template for token-exact servers. */
  tokenizerPath: z.string().min(1).optional(),
  /** Token-exact servers: how tool calls are read from the sampled text (one parser per model family). */
  toolCallParser: z.enum(["hermes", "qwen3"]).default("hermes"),
});

export type ModelConfig = z.output<typeof ModelConfigSchema>;
export type ModelConfigInput = z.input<typeof ModelConfigSchema>;
