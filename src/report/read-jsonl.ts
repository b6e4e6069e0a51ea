import { createReadStream } from "node:fs";
import { basename } from "node:path";
import { createInterface } from "node:readline";
import { buildConversation } from "./conversation.js";
import type { GroupView, ReportModel, RunInfo, TrajectoryView } from "./model.js";
import { readGroupMetrics, readLineExtras, type RolloutExtras } from "./rollout-extras.js";
import { drawBranchTree, readBranchTree } from "./branch-tree.js";

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** A JSONL file the report cannot read at all (missing, a directory, unreadable). */
export class ReportInputError extends Error {
  override name = "ReportInputError";
  readonly code = "REPORT_INPUT";
}

/**
 * Collects the groups of a JSONL file line by line. Understood lines: Atropos scored groups
 * (`scores`, with `messages` and/or `tokens`; slotpool's `process` and Atropos's process
 * mode write these) and evaluation samples (`score` and `messages`; `slotpool evaluate`'s
 * samples.jsonl). Other lines are listed as skipped, with the reason, and do not stop the
 * report. Token lists are counted, not kept.
 */
export class ReportBuilder {
  private readonly groups: GroupView[] = [];
  private readonly skipped: Array<{ line: number; reason: string }> = [];

  addLine(text: string, line: number): void {
    if (text.trim() === "") return;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      this.skipped.push({ line, reason: `not JSON (${(err as Error).message})` });
      return;
    }
    if (!isObject(value)) {
      this.skipped.push({ line, reason: "not a JSON object" });
      return;
    }
    const extras = readLineExtras(value);
    if (Array.isArray(value["scores"])) {
      this.addGroup(value, line, extras);
      return;
    }
    if (Array.isArray(value["messages"]) && ("score" in value || "item" in value)) {
      this.addSample(value, line, extras);
      return;
    }
    this.skipped.push({ line, reason: "neither a scored group (no 'scores' list) nor an evaluation sample ('score' and 'messages')" });
  }

  build(title: string, source: string, run?: RunInfo): ReportModel {
    return { title, source, groups: this.groups, skipped: this.skipped, ...(run ? { run } : {}) };
  }

  private addGroup(value: Record<string, unknown>, line: number, extras: RolloutExtras[] | undefined): void {
    const scores = value["scores"] as unknown[];
    const messages = Array.isArray(value["messages"]) ? value["messages"] : undefined;
    const tokens = Array.isArray(value["tokens"]) ? value["tokens"] : undefined;
    const index = this.groups.length;
    const group: GroupView = { index, line, kind: "group", trajectories: [] };
    for (let i = 0; i < scores.length; i++) {
      const t = tokens?.[i];
      group.trajectories.push(
        trajectoryView({
          group: index,
          index: i,
          line,
          score: scores[i],
          messages: messages ? (messages[i] ?? null) : null,
          // slotpool writes empty token lists when it has no token ids (oracle policy): not "0 tokens".
          tokenCount: Array.isArray(t) && t.length > 0 ? t.length : undefined,
          extras: extras?.[i],
        }),
      );
    }
    const tree = readBranchTree(value);
    if (tree) group.tree = drawBranchTree(tree);
    const metrics = readGroupMetrics(value);
    if (metrics) group.metrics = metrics;
    if (messages && messages.length !== scores.length) {
      this.skipped.push({ line, reason: `group has ${scores.length} scores but ${messages.length} message lists; shown by score` });
    }
    this.groups.push(group);
  }

  private addSample(value: Record<string, unknown>, line: number, extras: RolloutExtras[] | undefined): void {
    const index = this.groups.length;
    const item = value["item"];
    const group: GroupView = { index, line, kind: "sample", trajectories: [] };
    if (item !== undefined) group.item = JSON.stringify(item).slice(0, 300);
    const view = trajectoryView({ group: index, index: 0, line, score: value["score"], messages: value["messages"], tokenCount: undefined, extras: extras?.[0] });
    if (view.finishReason === undefined && typeof value["finishReason"] === "string") view.finishReason = value["finishReason"];
    group.trajectories.push(view);
    this.groups.push(group);
  }
}

function trajectoryView(input: {
  group: number;
  index: number;
  line: number;
  score: unknown;
  messages: unknown;
  tokenCount: number | undefined;
  extras: RolloutExtras | undefined;
}): TrajectoryView {
  const x = input.extras;
  const score = typeof input.score === "number" && Number.isFinite(input.score) ? input.score : null;
  const hasMessages = input.messages !== null && input.messages !== undefined;
  const conv = hasMessages ? buildConversation(input.messages, x) : undefined;
  const view: TrajectoryView = {
    id: `g${input.group}t${input.index}`,
    group: input.group,
    index: input.index,
    line: input.line,
    score,
    entries: conv ? conv.entries : null,
    slotLosses: x?.slot_losses ?? [],
    toolCalls: conv?.toolCalls ?? [],
    toolErrors: conv?.toolErrors ?? x?.tool_errors ?? [],
  };
  if (input.tokenCount !== undefined) view.tokenCount = input.tokenCount;
  const turns = x?.turns_used ?? conv?.turns;
  if (turns !== undefined) view.turnsUsed = turns;
  if (x?.finish_reason !== undefined) view.finishReason = x.finish_reason;
  if (x?.duration_ms !== undefined) view.durationMs = x.duration_ms;
  if (x?.attempts !== undefined) view.attempts = x.attempts;
  if (x?.reward_error !== undefined) view.rewardError = x.reward_error;
  if (x?.error !== undefined) view.error = x.error;
  if (x?.score_metadata !== undefined) view.scoreMetadata = x.score_metadata;
  if (x?.metrics !== undefined) view.metrics = x.metrics;
  if (x?.own_score !== undefined) view.ownScore = x.own_score;
  if (x?.reward_calls !== undefined) view.rewardCalls = x.reward_calls;
  return view;
}

/** Reads a JSONL file into a report model, streaming (a process-mode file with token lists can be large). */
export async function readReportModel(path: string, options: { title?: string; run?: RunInfo } = {}): Promise<ReportModel> {
  const builder = new ReportBuilder();
  const stream = createReadStream(path, { encoding: "utf8" });
  const opened = new Promise<void>((resolve, reject) => {
    stream.once("open", () => resolve());
    stream.once("error", reject);
  });
  try {
    await opened;
  } catch (err) {
    throw new ReportInputError(`cannot read ${path}: ${(err as Error).message}`);
  }
  const lines = createInterface({ input: stream, crlfDelay: Infinity });
  let n = 0;
  try {
    for await (const text of lines) builder.addLine(text, ++n);
  } catch (err) {
    throw new ReportInputError(`cannot read ${path}: ${(err as Error).message}`);
  }
  return builder.build(options.title ?? `slotpool report: ${basename(path)}`, basename(path), options.run);
}
