import type { RewardCallExtras } from "./rollout-extras.js";

/** The report's data: what was read from a JSONL file, before any HTML. */

/** One piece of a conversation, in order. `turn` is the model turn it belongs to (0: before the first). */
export type Entry =
  | { kind: "text"; role: string; turn: number; text: string }
  | { kind: "thinking"; turn: number; text: string }
  | { kind: "call"; turn: number; tool: string; arguments: string; callId?: string }
  | { kind: "result"; turn: number; tool: string; callId?: string; output: string; exitCode?: number | null; error?: string; durationMs?: number };

export interface ToolCallView {
  turn: number;
  tool: string;
  arguments: string;
  success: boolean;
  durationMs?: number;
  exitCode?: number | null;
}

export interface ToolErrorView {
  turn: number;
  tool: string;
  arguments: string;
  error: string;
}

export interface TrajectoryView {
  /** Anchor id, e.g. `g3t1`. */
  id: string;
  group: number;
  index: number;
  /** 1-based line of the JSONL file that holds it. */
  line: number;
  score: number | null;
  /** null when the line has no messages (tokens only). */
  entries: Entry[] | null;
  tokenCount?: number;
  finishReason?: string;
  turnsUsed?: number;
  durationMs?: number;
  attempts?: number;
  slotLosses: string[];
  rewardError?: string;
  error?: string;
  scoreMetadata?: Record<string, unknown>;
  /** The env's own metrics of this trajectory. */
  metrics?: Record<string, number>;
  /** Its own score, when the env's group-level scoring replaced it. */
  ownScore?: number;
  toolCalls: ToolCallView[];
  toolErrors: ToolErrorView[];
  /** The reward's own tool calls, with their (cut) output and exit codes. */
  rewardCalls?: RewardCallExtras[];
}

export interface GroupView {
  index: number;
  line: number;
  /** What the line was: an Atropos scored group, or one evaluation sample. */
  kind: "group" | "sample";
  /** A short description of the item (evaluation samples). */
  item?: string;
  trajectories: TrajectoryView[];
  /** A branching group's tree, drawn as text lines (src/report/branch-tree.ts). */
  tree?: string[];
  /** The env's metrics of the whole group. */
  metrics?: Record<string, number>;
}

export interface SkippedLine {
  line: number;
  reason: string;
}

/** Facts only the writer knows (failed groups are not in the JSONL): rows and failure reasons. */
export interface RunInfo {
  rows: Array<[string, string]>;
  failures: string[];
  /** A trajectory counts as solved at this score or above (the run's successThreshold; default 1). */
  successThreshold?: number;
  /** What the run made but did not write, for the tiles beside the file's own figures. */
  notWritten?: { failedGroups: number; infraFailures: number; filteredGroups: number };
  /** Where the env's code threw (a reward or hook), each distinct stack once with how often, the env's frames first. */
  failedStacks?: Array<{ stack: string; count: number }>;
  /** The sidecar with the unscored trajectories' transcripts and reward calls (`run.failed.jsonl`), relative to the report. */
  failedSidecar?: { href: string; trajectories: number };
}

export interface ReportModel {
  title: string;
  /** The JSONL file's name as shown. */
  source: string;
  groups: GroupView[];
  skipped: SkippedLine[];
  run?: RunInfo;
}
