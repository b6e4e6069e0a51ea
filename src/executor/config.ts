import { z } from "zod";
import { SlotpoolError, configProblems } from "../protocol/errors.js";

/**
 * The vision model `browser_vision` hands its screenshot to: an OpenAI-compatible chat
 * completions endpoint that takes image content parts. Unset: `browser_vision` answers "no
 * vision model configured". The API key itself is never part of a config, only the name of
 * the environment variable that holds it (sent when that variable is set).
 */
export const VisionModelConfigSchema = z.object({
  url: z.url({ protocol: /^https?$/, error: "must be an http(s) URL such as http://127.0.0.1:8000/v1" }),
  name: z.string().min(1, "name the vision model as its server knows it"),
  apiKeyEnv: z.string().min(1).default("OPENAI_API_KEY"),
  /** Most tokens of the model's answer (the seed's 2000). */
  maxTokens: z.number().int().positive().default(2000),
  /** One request's timeout. */
  timeoutMs: z.number().int().positive().default(60_000),
});
export type VisionModelConfig = z.output<typeof VisionModelConfigSchema>;

/** The browser tools' settings (docs/browser.md). */
export const BrowserToolsConfigSchema = z.object({
  /** A snapshot longer than this is cut, with the seed's "[... content truncated ...]" (the seed's 8000). */
  snapshotMaxChars: z.number().int().min(200, "snapshotMaxChars below 200 leaves no page to read").default(8000),
  vision: VisionModelConfigSchema.optional(),
});
export type BrowserToolsConfig = z.output<typeof BrowserToolsConfigSchema>;

/**
 * ToolExecutor settings. Policy fields (network, fail-closed sandboxing) come from the env
 * author here and are stamped onto every sandbox call; the model cannot change them.
 */
export const ToolExecutorConfigSchema = z.object({
  /**
   * How long the first queued call waits for others before a batch goes out (ms). 0 (the
   * default) still gathers every call issued in the same event-loop turn (a model's parallel
   * tool calls) and adds no delay; raise it (the original used 20) to gather calls arriving
   * over a few ms.
   */
  batchWindowMs: z.number().min(0, "batchWindowMs must be >= 0").max(1000, "batchWindowMs above 1000 ms would stall every call").default(0),
  /** Most calls dispatched by one batch; the rest go out in the next one, at once. */
  maxBatchSize: z.number().int().positive("maxBatchSize must be at least 1").default(200),
  /**
   * Requests in flight to one container at once. A trajectory has at most one request in
   * flight (its calls run in order), so the effective bound is also the container's slot
   * count; a lower value makes trajectories of one container wait for each other.
   */
  maxInFlightPerContainer: z.number().int().positive().default(256),
  /**
   * Timeout of a call whose arguments name none (seconds, clamped to 1..600). 30, as the
   * sandbox server's own default: an agent's commands (ls, grep, an edit, one test file)
   * take seconds, and a `sleep 1000` or `while true` then holds its whole group 30 s, not
   * 120. Raise it for envs whose agents build or test for longer.
   */
  defaultTimeoutS: z.number().positive().default(30),
  /**
   * The floor of a call's timeout (seconds, 1..600): a model's `timeout: 0.1` becomes this.
   * With `maxTimeoutS`, the env's bounds on the time the model may ask for.
   */
  minTimeoutS: z.number().min(1).max(600).default(1),
  /**
   * The ceiling of a call's timeout (seconds, 1..600): a model asking for `timeout: 3600`
   * gets this. An env whose agents run a long test suite keeps 600; one that must never
   * wait long on a command lowers it.
   */
  maxTimeoutS: z.number().min(1).max(600).default(600),
  /** How long a trajectory's first sandbox call may wait for a slot (ms); pool default when unset. */
  acquireTimeoutMs: z.number().int().positive().optional(),
  /** Sandbox commands may reach the network (off by default: fail closed; the model cannot turn it on). */
  allowNetwork: z.boolean().default(false),
  /** Refuse to run commands when bubblewrap is unavailable. */
  requireSandbox: z.boolean().default(false),
  /** Refuse the stateful terminal when it cannot be sandboxed. */
  requireStatefulSandbox: z.boolean().default(false),
  /** Base URL of the ToolServer hosting external tools. */
  toolServerUrl: z.url({ protocol: /^https?$/, error: "toolServerUrl must be an http(s) URL" }).optional(),
  toolServerToken: z.string().min(1).optional(),
  /** At start, register the external tools the ToolServer lists (GET /tools). */
  discoverExternalTools: z.boolean().default(true),
  /** The browser tools: how much of a snapshot the model reads, the vision model of `browser_vision`. */
  browser: BrowserToolsConfigSchema.prefault({}),
});
export type ToolExecutorConfig = z.output<typeof ToolExecutorConfigSchema>;
export type ToolExecutorConfigInput = z.input<typeof ToolExecutorConfigSchema>;

export class ToolExecutorConfigError extends SlotpoolError {
  override name = "ToolExecutorConfigError";
}

export function parseToolExecutorConfig(input: ToolExecutorConfigInput = {}): ToolExecutorConfig {
  const r = ToolExecutorConfigSchema.safeParse(input);
  if (!r.success) {
    const problems = configProblems(r.error.issues);
    throw new ToolExecutorConfigError(`invalid ToolExecutor config: ${problems}`);
  }
  const bounds = timeoutBoundsProblem(r.data);
  if (bounds) throw new ToolExecutorConfigError(`invalid ToolExecutor config: ${bounds}`);
  return r.data;
}

/**
 * What is wrong with the config's timeout bounds, if anything (a cross-field check, kept out
 * of the schema so that env authors can still `.extend()` it). The prefix names the section.
 */
export function timeoutBoundsProblem(config: Pick<ToolExecutorConfig, "minTimeoutS" | "maxTimeoutS" | "defaultTimeoutS">, prefix = ""): string | undefined {
  const { minTimeoutS: min, maxTimeoutS: max, defaultTimeoutS: def } = config;
  if (min > max) return `${prefix}minTimeoutS (${min}) must not be above ${prefix}maxTimeoutS (${max})`;
  if (def < min || def > max) return `${prefix}defaultTimeoutS (${def}) must lie within ${prefix}minTimeoutS..${prefix}maxTimeoutS (${min}..${max})`;
  return undefined;
}

export const MIN_TIMEOUT_S = 1;
export const MAX_TIMEOUT_S = 600;

/** A call's timeout in seconds, clamped to [1, 600], so no model can ask for "forever" or zero. */
export function clampTimeoutS(seconds: number): number {
  if (!Number.isFinite(seconds)) return MAX_TIMEOUT_S;
  return Math.min(MAX_TIMEOUT_S, Math.max(MIN_TIMEOUT_S, seconds));
}

/** The time a call may be given, seconds: what the model (or a caller) asks for is clamped to [minS, maxS]; `defaultS` when it asks for none. */
export interface TimeoutBounds {
  minS: number;
  maxS: number;
  defaultS: number;
}

/** An executor config's bounds (`minTimeoutS`, `maxTimeoutS`, `defaultTimeoutS`). */
export function timeoutBounds(config: Pick<ToolExecutorConfig, "minTimeoutS" | "maxTimeoutS" | "defaultTimeoutS">): TimeoutBounds {
  const minS = clampTimeoutS(config.minTimeoutS);
  const maxS = Math.max(minS, clampTimeoutS(config.maxTimeoutS));
  return { minS, maxS, defaultS: Math.min(maxS, Math.max(minS, config.defaultTimeoutS)) };
}

/** The `timeout` a call's arguments ask for, seconds (a number, or a string holding one), if any. */
export function requestedTimeoutS(args: Record<string, unknown>): number | undefined {
  const raw = args["timeout"];
  if (typeof raw === "number" && Number.isFinite(raw)) return raw;
  if (typeof raw === "string" && raw.trim() && Number.isFinite(Number(raw))) return Number(raw);
  return undefined;
}

/** A call's timeout within `bounds`: `askedS` (the model's, a step's) clamped into them, else their default. */
export function boundedTimeoutS(askedS: number | undefined, bounds: TimeoutBounds): number {
  if (askedS === undefined || Number.isNaN(askedS)) return bounds.defaultS;
  return Math.min(bounds.maxS, Math.max(bounds.minS, askedS));
}

/**
 * Timeout of one call: the caller's override (clamped to 1..600 only: the caller is the
 * operator's code, e.g. a reward's own command), else the call's `timeout` argument within
 * the bounds, else their default.
 */
export function callTimeoutS(args: Record<string, unknown>, overrideMs: number | undefined, bounds: TimeoutBounds): number {
  if (overrideMs !== undefined && Number.isFinite(overrideMs)) return clampTimeoutS(overrideMs / 1000);
  return boundedTimeoutS(requestedTimeoutS(args), bounds);
}
