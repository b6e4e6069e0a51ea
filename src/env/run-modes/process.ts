import { existsSync } from "node:fs";
import { mkdir, open } from "node:fs/promises";
import { basename, dirname, extname, join } from "node:path";
import pLimit from "p-limit";
import type { AgentEnv } from "../agent-env.js";
import type { Logger } from "../../observability/logger.js";
import { FilteredStreak, filterGroupForSend } from "../atropos/group-filter.js";
import { pythonJsonDumps } from "../atropos/python-json.js";
import { writeReport } from "../../report/index.js";
import { lineExtras } from "../rollout-extras.js";
import { RunStats } from "../run-stats.js";
import type { GroupOutcome } from "../scored-group.js";
import { runRows } from "./summary.js";

export interface ProcessModeOptions {
  /** Output JSONL; an existing file is kept and `_1`, `_2`, … is added to the new name (as Atropos does). */
  out: string;
  /** Groups to make (default: config.totalGroups). */
  groups?: number;
  onGroup?: (outcome: GroupOutcome, stats: RunStats) => void;
  /** Receives the warning when every group is being filtered. */
  logger?: Logger;
  /** Write the HTML report beside the JSONL (default true). */
  report?: boolean;
}

export interface ProcessModeReport {
  stats: RunStats;
  /** The file actually written. */
  out: string;
  written: number;
  /** The HTML report beside it, unless turned off. */
  report?: { path: string; bytes: number };
}

/** `data/x.jsonl` → `data/x_1.jsonl` → `data/x_2.jsonl` … until the name is free. */
export function freeOutputPath(path: string): string {
  if (!existsSync(path)) return path;
  const ext = extname(path);
  const stem = basename(path, ext);
  for (let i = 1; ; i++) {
    const candidate = join(dirname(path), `${stem}_${i}${ext}`);
    if (!existsSync(candidate)) return candidate;
  }
}

/**
 * Atropos's `process` mode: make `groups` groups of `groupSize` trajectories and write each
 * scored group as one JSONL line (Python json.dumps spacing, UTF-8, `\n`), with
 * ensure-scores-differ off and messages on, no trainer and no length filter. Groups that
 * failed are not written; they are counted and their reasons printed in the summary.
 */
export async function runProcessMode(env: AgentEnv<unknown>, options: ProcessModeOptions): Promise<ProcessModeReport> {
  const total = options.groups ?? env.config.totalGroups;
  const stats = new RunStats();
  const outPath = freeOutputPath(options.out);
  await mkdir(dirname(outPath), { recursive: true });
  const file = await open(outPath, "w");
  let written = 0;
  let exhausted = false;
  const limit = pLimit(env.config.groupConcurrency);
  // Writes are chained so lines never interleave and come out in completion order.
  let writes: Promise<unknown> = Promise.resolve();
  const streak = new FilteredStreak();
  try {
    const tasks = Array.from({ length: total }, () =>
      limit(async () => {
        if (exhausted) return;
        const item = await env.getNextItem();
        if (item === null || item === undefined) {
          exhausted = true;
          return;
        }
        const outcome = await env.collectTrajectories(item);
        stats.addGroup(outcome);
        const filtered = outcome.ok
          ? filterGroupForSend(outcome.group, { groupSize: env.config.groupSize, ensureScoresAreNotSame: false, dropOverLength: false, includeMessages: true })
          : undefined;
        if (filtered && !filtered.send) stats.filteredGroups++;
        if (filtered?.send) stats.sentGroups++;
        const warning = filtered ? streak.observe(filtered) : undefined;
        if (warning) options.logger?.warn({ written: stats.sentGroups, filtered: stats.filteredGroups }, warning);
        options.onGroup?.(outcome, stats);
        if (filtered?.send) {
          // Atropos's fields, plus one optional key with what the report needs (timings, exit codes, tool errors).
          const line = pythonJsonDumps({ ...filtered.group, slotpool: lineExtras(outcome.trajectories) }) + "\n";
          writes = writes.then(() => file.write(line));
          await writes;
          written++;
        }
      }),
    );
    await Promise.all(tasks);
    await writes;
  } finally {
    await file.close();
  }
  const result: ProcessModeReport = { stats, out: outPath, written };
  if (options.report !== false) {
    const r = await writeReport(outPath, {
      title: `slotpool process · ${env.name}`,
      run: { rows: runRows(stats, [["model", env.config.modelName ?? "oracle policy"], ["written", `${written} groups`]]), failures: stats.failures },
    });
    result.report = { path: r.path, bytes: r.bytes };
  }
  return result;
}
