import { open } from "node:fs/promises";
import pLimit from "p-limit";
import type { AgentEnv } from "../agent-env.js";
import type { Logger } from "../../observability/logger.js";
import { FilteredStreak, filterGroupForSend } from "../atropos/group-filter.js";
import { pythonJsonDumps } from "../atropos/python-json.js";
import { writeReport } from "../../report/index.js";
import { lineExtras } from "../rollout-extras.js";
import { RunStats } from "../run-stats.js";
import { GroupInterruptedError } from "../interruption.js";
import type { GroupOutcome } from "../scored-group.js";
import { failedInfo, notWritten, runRows } from "./summary.js";
import { prepareOutputFile } from "./output-path.js";
import { FailedSidecar } from "./failed-sidecar.js";
import { failedSidecarPath } from "../failed-trajectories.js";
import { imagesOf } from "../isolation.js";

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
  /** Stops the run: no new group starts, in-flight ones are abandoned; what was written stays, and the report is still written. */
  signal?: AbortSignal;
  /** The run's statistics (default: new, with the env's successThreshold). */
  stats?: RunStats;
  /** `out` was made by prepareOutputFile (empty, name already free): write it as is. */
  prepared?: boolean;
}

export interface ProcessModeReport {
  stats: RunStats;
  /** The file actually written. */
  out: string;
  written: number;
  /** The HTML report beside it, unless turned off. */
  report?: { path: string; bytes: number };
}

/**
 * Atropos's `process` mode: make `groups` groups of `groupSize` trajectories and write each
 * scored group as one JSONL line (Python json.dumps spacing, UTF-8, `\n`), with
 * ensure-scores-differ off and messages on, no trainer and no length filter. Groups that
 * failed are not written; they are counted and their reasons printed in the summary.
 */
export async function runProcessMode(env: AgentEnv<unknown>, options: ProcessModeOptions): Promise<ProcessModeReport> {
  const total = options.groups ?? env.config.totalGroups;
  const stats = options.stats ?? new RunStats({ successThreshold: env.config.successThreshold });
  stats.modelSource ??= () => env.modelCallStats();
  stats.imagesSource ??= () => imagesOf(env);
  // A dead model server stops the run (the model breaker) as an interrupt would, with its own reason.
  const breaker = env.modelBreaker();
  const signal = breaker ? (options.signal ? AbortSignal.any([options.signal, breaker.signal]) : breaker.signal) : options.signal;
  const outPath = options.prepared ? options.out : await prepareOutputFile(options.out);
  const file = await open(outPath, "w");
  // Unscored trajectories (transcripts, reward calls, stacks) go beside the training data, never into it.
  const sidecar = new FailedSidecar(failedSidecarPath(outPath));
  let written = 0;
  let exhausted = false;
  const limit = pLimit(env.config.groupConcurrency);
  // Writes are chained so lines never interleave and come out in completion order.
  let writes: Promise<unknown> = Promise.resolve();
  const streak = new FilteredStreak();
  const stopped = () => stats.stoppedEarly !== undefined;
  try {
    const tasks = Array.from({ length: total }, () =>
      limit(async () => {
        if (exhausted || stopped() || signal?.aborted) return;
        const item = await env.getNextItem();
        if (item === null || item === undefined) {
          exhausted = true;
          return;
        }
        let outcome: GroupOutcome;
        try {
          outcome = await env.collectTrajectories(item, { ...(signal ? { signal } : {}), ...(breaker ? { onTrajectoryEnd: (t) => breaker.observe(t) } : {}) });
        } catch (err) {
          // Interrupted: the group is abandoned, but what it did is counted; anything else is a real error.
          if (signal?.aborted) {
            if (err instanceof GroupInterruptedError) stats.addInterrupted(err.interruption);
            return;
          }
          throw err;
        }
        stats.addGroup(outcome);
        if (outcome.failed?.length) {
          stats.addFailedTrajectories(outcome.failed);
          stats.failedSidecar = sidecar.path;
          await sidecar.add(outcome.failed, outcome.item);
        }
        if (!outcome.ok && outcome.fatal) stats.stoppedEarly ??= `infraFailurePolicy "fail": ${outcome.reason}`;
        const filtered = outcome.ok
          ? filterGroupForSend(outcome.group, { groupSize: env.config.groupSize, ensureScoresAreNotSame: false, dropOverLength: false, includeMessages: true })
          : undefined;
        if (filtered && !filtered.send) stats.addFiltered(outcome);
        if (filtered?.send) stats.addDelivered(outcome);
        const warning = filtered ? streak.observe(filtered) : undefined;
        if (warning) options.logger?.warn({ written: stats.sentGroups, filtered: stats.filteredGroups }, warning);
        options.onGroup?.(outcome, stats);
        if (filtered?.send) {
          // Atropos's fields, plus one optional key with what the report needs (timings, exit codes, tool errors).
          const line = pythonJsonDumps({ ...filtered.group, slotpool: lineExtras(outcome.trajectories, outcome.ok ? outcome : undefined) }) + "\n";
          writes = writes.then(() => file.write(line));
          await writes;
          written++;
        }
      }),
    );
    // Interrupted: groups in flight get a moment to stop and tell what they did (their calls end
    // with the signal), but no more: a hook may not heed it. What is written stays.
    const all = Promise.all(tasks);
    await (signal ? Promise.race([all, abortedSignal(signal).then(() => Promise.race([all.catch(() => undefined), delay(INTERRUPT_SETTLE_MS)]))]) : all);
    await writes;
    if (breaker?.reason) stats.stoppedEarly ??= breaker.reason;
    if (signal?.aborted) stats.stoppedEarly ??= "interrupted";
  } finally {
    await file.close();
    await sidecar.close();
  }
  const result: ProcessModeReport = { stats, out: outPath, written };
  if (options.report !== false) {
    const r = await writeReport(outPath, {
      title: `slotpool process · ${env.name}`,
      run: { rows: runRows(stats, [["model", env.config.model.name ?? "oracle policy"], ["written", `${written} groups`]]), failures: stats.failures, successThreshold: stats.successThreshold, notWritten: notWritten(stats), ...failedInfo(stats) },
    });
    result.report = { path: r.path, bytes: r.bytes };
  }
  return result;
}

/** How long groups cut by the run's signal may take to stop and be counted in the partial summary. */
const INTERRUPT_SETTLE_MS = 5_000;

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves when `signal` aborts (a race's way out, not an error). */
function abortedSignal(signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) resolve();
    signal.addEventListener("abort", () => resolve(), { once: true });
  });
}
