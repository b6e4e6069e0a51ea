/**
 * What slotpool adds to each JSONL line beside Atropos's fields: the facts about a rollout
 * that the messages do not hold (tool timings, exit codes, tool errors, slot losses). It is
 * one optional key, `slotpool`, so Atropos's readers (which ignore unknown keys) and
 * `jsonl2html` keep working; a line without it still renders, from its messages alone.
 *
 *   {"tokens": …, "scores": …, "messages": …, "slotpool": {"version": 1, "trajectories": [RolloutExtras, …]}}
 */

import type { BranchTree } from "./branch-tree.js";

export const ROLLOUT_EXTRAS_VERSION = 1;

export interface ToolCallExtras {
  turn: number;
  tool: string;
  call_id?: string;
  duration_ms: number;
  success: boolean;
  exit_code?: number | null;
}

export interface ToolErrorExtras {
  turn: number;
  tool: string;
  /** The arguments as the model wrote them (cut to 500 characters; the message has them all). */
  arguments: string;
  error: string;
}

/** A tool call the env's own code made (setupWorkspace, the reward): what it ran and what came back, cut. */
export interface RewardCallExtras {
  tool: string;
  /** JSON of the arguments (cut to 500 characters). */
  arguments: string;
  duration_ms: number;
  success: boolean;
  exit_code?: number | null;
  timed_out?: boolean;
  /** Output and error text, head and tail kept (4000 characters each). */
  output?: string;
  error?: string;
}

/** One trajectory's extras, in the order of `scores`. */
export interface RolloutExtras {
  trajectory_id?: string;
  finish_reason?: string;
  turns_used?: number;
  /** Wall time of the trajectory: workspace setup, agent loop, reward. */
  duration_ms?: number;
  /** 1 + restarts after lost slots. */
  attempts?: number;
  slot_losses?: string[];
  reward_error?: string;
  reward_skipped?: boolean;
  /** The model server failed and ended the rollout early. */
  error?: string;
  tool_calls?: ToolCallExtras[];
  tool_errors?: ToolErrorExtras[];
  score_metadata?: Record<string, unknown>;
  /** The env's own metrics of this trajectory (names to numbers). */
  metrics?: Record<string, number>;
  /** The trajectory's own score, when the env's group-level scoring gave it another. */
  own_score?: number;
  /** The reward's own tool calls (through its ToolContext), in order: what it ran and what came back. */
  reward_calls?: RewardCallExtras[];
}

export interface LineExtras {
  version: number;
  trajectories: RolloutExtras[];
  /**
   * Infrastructure failures met while making this group, by cause (model, slot_lost, reward,
   * reward_tool): trajectories of dropped earlier tries of the item, or masked out of it.
   * None of them is among `scores`. Present on every line slotpool writes (zeros included).
   */
  infra_failures?: Record<string, number>;
  /** Trajectories left out of this group (infraFailurePolicy "mask"). */
  masked?: number;
  /** Earlier tries of this item dropped for an infra failure. */
  dropped_attempts?: number;
  /** A branching group's tree (src/report/branch-tree.ts). */
  tree?: BranchTree;
  /** The env's metrics of the whole group (names to numbers). */
  metrics?: Record<string, number>;
}

/** Names to finite numbers; anything else in the object is dropped (a tolerant read). */
export function readMetrics(v: unknown): Record<string, number> | undefined {
  if (!isObject(v)) return undefined;
  const out = Object.fromEntries(Object.entries(v).filter((e): e is [string, number] => num(e[1]) !== undefined));
  return Object.keys(out).length > 0 ? out : undefined;
}

/** The group's metrics of one line (`slotpool.metrics`). */
export function readGroupMetrics(line: Record<string, unknown>): Record<string, number> | undefined {
  const raw = line["slotpool"];
  return isObject(raw) ? readMetrics(raw["metrics"]) : undefined;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
const num = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) ? v : undefined);
const str = (v: unknown): string | undefined => (typeof v === "string" ? v : undefined);

/**
 * The extras of one line, read tolerantly: the JSONL may come from another version or have
 * been edited, so a field of the wrong type is dropped rather than failing the report.
 */
export function readLineExtras(line: Record<string, unknown>): RolloutExtras[] | undefined {
  const raw = line["slotpool"];
  if (!isObject(raw) || !Array.isArray(raw["trajectories"])) return undefined;
  return raw["trajectories"].map((t) => (isObject(t) ? readRollout(t) : {}));
}

function readRollout(t: Record<string, unknown>): RolloutExtras {
  const out: RolloutExtras = {};
  const set = <K extends keyof RolloutExtras>(k: K, v: RolloutExtras[K] | undefined) => {
    if (v !== undefined) out[k] = v;
  };
  set("trajectory_id", str(t["trajectory_id"]));
  set("finish_reason", str(t["finish_reason"]));
  set("turns_used", num(t["turns_used"]));
  set("duration_ms", num(t["duration_ms"]));
  set("attempts", num(t["attempts"]));
  set("reward_error", str(t["reward_error"]));
  set("error", str(t["error"]));
  set("own_score", num(t["own_score"]));
  set("metrics", readMetrics(t["metrics"]));
  if (typeof t["reward_skipped"] === "boolean") out.reward_skipped = t["reward_skipped"];
  if (Array.isArray(t["slot_losses"])) out.slot_losses = t["slot_losses"].map(String);
  if (isObject(t["score_metadata"])) out.score_metadata = t["score_metadata"];
  if (Array.isArray(t["tool_calls"])) {
    out.tool_calls = t["tool_calls"].filter(isObject).map((c) => {
      const call: ToolCallExtras = { turn: num(c["turn"]) ?? 0, tool: str(c["tool"]) ?? "?", duration_ms: num(c["duration_ms"]) ?? 0, success: c["success"] !== false };
      const id = str(c["call_id"]);
      if (id !== undefined) call.call_id = id;
      if (num(c["exit_code"]) !== undefined || c["exit_code"] === null) call.exit_code = c["exit_code"] as number | null;
      return call;
    });
  }
  if (Array.isArray(t["reward_calls"])) {
    out.reward_calls = t["reward_calls"].filter(isObject).map((c) => {
      const call: RewardCallExtras = { tool: str(c["tool"]) ?? "?", arguments: str(c["arguments"]) ?? "", duration_ms: num(c["duration_ms"]) ?? 0, success: c["success"] === true };
      if (num(c["exit_code"]) !== undefined || c["exit_code"] === null) call.exit_code = c["exit_code"] as number | null;
      if (c["timed_out"] === true) call.timed_out = true;
      const output = str(c["output"]);
      if (output !== undefined) call.output = output;
      const error = str(c["error"]);
      if (error !== undefined) call.error = error;
      return call;
    });
  }
  if (Array.isArray(t["tool_errors"])) {
    out.tool_errors = t["tool_errors"].filter(isObject).map((e) => ({
      turn: num(e["turn"]) ?? 0,
      tool: str(e["tool"]) ?? "?",
      arguments: str(e["arguments"]) ?? "",
      error: str(e["error"]) ?? "",
    }));
  }
  return out;
}
