import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import type { AgentEnv, EvalResult } from "../agent-env.js";
import type { TrajectoryOutcome } from "../scored-group.js";
import { pythonJsonDumps } from "../atropos/python-json.js";
import { writeReport } from "../../report/index.js";
import type { RunStats } from "../run-stats.js";
import { failedInfo, notWritten, runRows } from "./summary.js";
import { FailedSidecar } from "./failed-sidecar.js";
import { failedFromOutcome } from "../failed-trajectories.js";
import { makeDirectories } from "./output-path.js";
import type { FailedTrajectory, InfraFailure } from "../infra-failure.js";
import { imagesOf } from "../isolation.js";

export interface EvaluateModeOptions {
  /** Directory for metrics.json and samples.jsonl (Atropos `data_dir_to_save_evals`). */
  outDir: string;
  onTrajectory?: (outcome: TrajectoryOutcome) => void;
  onFailure?: (reason: string, infra?: InfraFailure, failed?: FailedTrajectory) => void;
  /** Stops the evaluation: items not started are skipped; what finished is written. */
  signal?: AbortSignal;
  /** Write samples.html beside samples.jsonl (default true); `stats` fills its run panel. */
  report?: boolean;
  stats?: RunStats;
}

export interface EvaluateModeReport {
  result: EvalResult;
  metricsPath: string;
  samplesPath: string;
  seconds: number;
  report?: { path: string; bytes: number };
  /** Why the evaluation stopped before every item ran (the model breaker tripped), if it did. */
  stoppedEarly?: string;
}

/**
 * Atropos's `evaluate` mode: `setup()` (done by start) then `evaluate()`, writing
 * `metrics.json` shaped like `evaluate_log()` (`config_general` + `results`) and one
 * `samples.jsonl` line per evaluated item.
 */
export async function runEvaluateMode(env: AgentEnv<unknown>, options: EvaluateModeOptions): Promise<EvaluateModeReport> {
  const started = Date.now();
  if (options.stats) {
    options.stats.modelSource ??= () => env.modelCallStats();
    options.stats.imagesSource ??= () => imagesOf(env);
    options.stats.delivered = "evaluated";
  }
  await makeDirectories(options.outDir);
  // Unscored trajectories (transcripts, reward calls, stacks) beside the samples, never among them.
  const sidecar = new FailedSidecar(join(options.outDir, "samples.failed.jsonl"));
  const record = (failed: FailedTrajectory | undefined, item: unknown) => {
    if (!failed) return;
    options.stats?.addFailedTrajectories([failed]);
    if (options.stats) options.stats.failedSidecar = sidecar.path;
    void sidecar.add([failed], item).catch(() => undefined);
  };
  // A dead model server stops the evaluation (the model breaker): items not started are skipped.
  const breaker = env.modelBreaker();
  const signal = breaker ? (options.signal ? AbortSignal.any([options.signal, breaker.signal]) : breaker.signal) : options.signal;
  let result: EvalResult;
  try {
    result = await env.evaluate({
      onTrajectory: (t) => {
        breaker?.observe(t);
        record(failedFromOutcome(t, 1), undefined);
        options.onTrajectory?.(t);
      },
      onFailure: (reason, infra, failed) => {
        record(failed, undefined);
        options.onFailure?.(reason, infra, failed);
      },
      ...(signal ? { signal } : {}),
    });
  } finally {
    await sidecar.close();
  }
  if (breaker?.reason && options.stats) options.stats.stoppedEarly ??= breaker.reason;
  const seconds = (Date.now() - started) / 1000;
  const metrics = {
    config_general: {
      model_name: env.config.model.name ?? "oracle",
      total_evaluation_time_seconds: seconds.toFixed(1),
      generation_parameters: { max_new_tokens: env.config.model.maxTokens, temperature: env.config.model.temperature, max_turns: env.config.maxTurns },
    },
    results: {
      [`atropos|${env.name}_eval|0`]: result.metrics,
      all: result.metrics,
    },
  };
  const metricsPath = join(options.outDir, "metrics.json");
  const samplesPath = join(options.outDir, "samples.jsonl");
  await writeFile(metricsPath, JSON.stringify(metrics, null, 2) + "\n");
  await writeFile(samplesPath, result.samples.map((s) => pythonJsonDumps(s) + "\n").join(""));
  const out: EvaluateModeReport = { result, metricsPath, samplesPath, seconds, ...(breaker?.reason ? { stoppedEarly: breaker.reason } : {}) };
  if (options.report !== false) {
    const metricRows = Object.entries(result.metrics).map(([k, v]) => [k, String(Number.isInteger(v) ? v : v.toFixed(3))] as [string, string]);
    const r = await writeReport(samplesPath, {
      title: `slotpool evaluate · ${env.name}`,
      run: { rows: options.stats ? runRows(options.stats, metricRows) : metricRows, failures: options.stats?.failures ?? [], successThreshold: options.stats?.successThreshold ?? env.config.successThreshold, ...(options.stats ? { notWritten: notWritten(options.stats), ...failedInfo(options.stats) } : {}) },
    });
    out.report = { path: r.path, bytes: r.bytes };
  }
  return out;
}
