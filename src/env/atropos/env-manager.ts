import type { Logger } from "../../observability/logger.js";
import type { AgentEnv } from "../agent-env.js";
import { TokensInexactError, TokensUnavailableError } from "../errors.js";
import type { RunStats } from "../run-stats.js";
import { buildScoredGroup, type GroupOutcome } from "../scored-group.js";
import { AtroposError, type AtroposClient, type EnvStatus, type Registration } from "./client.js";
import { FilteredStreak, filterGroupForSend } from "./group-filter.js";

export interface EnvManagerOptions {
  /** Pause between /status-env polls (BaseEnv: about 0.1 s). */
  pollMs?: number;
  /** Stop after this many groups were sent (default: until the trainer's num_steps is reached). */
  maxGroups?: number;
  signal?: AbortSignal;
  logger: Logger;
  stats: RunStats;
  /** Called after each group (sent, skipped or failed), for progress display. */
  onGroup?: (outcome: GroupOutcome, delivery: "sent" | "filtered" | "failed" | "rejected") => void;
}

export interface EnvManagerReport {
  registration: Registration;
  sent: number;
  backoffs: number;
  /** evaluate() runs triggered by the trainer's step (stepsPerEval). */
  evaluations: number;
  lastStatus: EnvStatus | undefined;
  stopReason: string;
}

interface Worker {
  item: unknown;
  controller: AbortController;
  done: Promise<void>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Failed groups in a row (none sent between) after which serve stops rather than spin. */
export const FAILED_GROUPS_STOP = 10;

/**
 * BaseEnv's `env_manager` against the trajectory API: register (waiting for the trainer),
 * read /info, then poll /status-env and keep the right number of groups in flight:
 * - stop when `current_step + queue_size*group_size // batch_size > num_steps`;
 * - back off (cancel in-flight rollouts, items back on a last-in-first-out backlog) when
 *   `queue_size*group_size ≥ max_batches_offpolicy*batch_size` (with min_batch_allocation:
 *   only once this env's own queue covers its share), or while the batch size is unknown;
 * - otherwise top workers up to `min(groupConcurrency, max_batches_offpolicy*derived_batch_size//group_size − queue_size)`.
 * Each finished group goes through the send filters and to /scored_data.
 */
export async function runEnvManager(env: AgentEnv<unknown>, client: AtroposClient, options: EnvManagerOptions): Promise<EnvManagerReport> {
  const cfg = env.config;
  const trainer = cfg.trainer;
  const log = options.logger;
  const pollMs = options.pollMs ?? 100;
  const registration = await client.registerEnv(
    { max_token_length: cfg.model.maxTokens, desired_name: env.name, weight: trainer.inferenceWeight, group_size: cfg.groupSize, min_batch_allocation: trainer.minBatchAllocation },
    options.signal,
  );
  let batchSize = -1;
  let maxTokenLen = -1;
  // As Atropos's ATROPOS_ALLOW_DUMMY_MANAGED_SERVER: Phase 1 data only when the user says so.
  const allowInexact = trainer.allowInexactTokens || ["1", "true", "yes"].includes((process.env["SLOTPOOL_ALLOW_INEXACT_TOKENS"] ?? "").toLowerCase());
  const refreshInfo = async () => {
    const info = await client.info(options.signal);
    if (info.batch_size !== -1) {
      batchSize = info.batch_size;
      if (cfg.groupSize > batchSize) {
        throw new AtroposError(`groupSize ${cfg.groupSize} is larger than the trainer's batch_size ${batchSize}: lower --group-size`);
      }
    }
    if (info.max_token_len !== -1) maxTokenLen = info.max_token_len;
  };
  await refreshInfo();

  const totalSteps = registration.num_steps;
  const backlog: unknown[] = [];
  const workers = new Set<Worker>();
  let sent = 0;
  let backoffs = 0;
  let evaluations = 0;
  let exhausted = false;
  let fatal: unknown;
  let infraStop: string | undefined;
  let failedInARow = 0;
  let lastStatus: EnvStatus | undefined;
  let stopReason = "";

  const streak = new FilteredStreak();
  const warnIfAllFiltered = (warning: string | undefined) => {
    if (warning) log.warn({ sent, filtered: options.stats.filteredGroups }, warning);
  };
  const deliver = async (outcome: GroupOutcome): Promise<void> => {
    options.stats.addGroup(outcome);
    if (!outcome.ok) {
      // infraFailurePolicy "fail": no more groups; the summary says why. A long run of failed
      // groups (a model server gone mid-run) stops too: a trainer would wait on it forever.
      failedInARow++;
      if (outcome.fatal) infraStop ??= outcome.reason;
      else if (failedInARow >= FAILED_GROUPS_STOP) infraStop ??= `the last ${failedInARow} groups all failed; last: ${outcome.reason}`;
      options.onGroup?.(outcome, "failed");
      return;
    }
    // The trajectory API takes exactly group_size sequences per group (a larger group waits in
    // its buffer forever): segments broken off before a prefix break stay out, each
    // trajectory's last segment goes (its earlier turns masked). Process mode keeps them all.
    let group = outcome.group;
    const broken = outcome.trajectories.reduce((n, t) => n + (t.brokenSegments?.length ?? 0), 0);
    if (broken > 0) {
      options.stats.unsentSegments += broken;
      log.warn({ segments: broken }, "segments broken off by a prefix break are not sent: Atropos takes exactly group_size sequences per group");
      group = buildScoredGroup(
        outcome.trajectories.map(({ brokenSegments: _drop, ...t }) => t),
        { groupSize: cfg.groupSize, includeMessages: trainer.includeMessages, ...(outcome.group.generation_params ? { generationParams: outcome.group.generation_params } : {}) },
      );
    }
    const filtered = filterGroupForSend(group, {
      groupSize: cfg.groupSize,
      ensureScoresAreNotSame: trainer.ensureScoresAreNotSame,
      maxTokenLen,
      dropOverLength: trainer.dropGroupsOverTokenLength,
      includeMessages: trainer.includeMessages,
    });
    if (!filtered.send) {
      options.stats.addFiltered(outcome);
      log.info({ reason: filtered.reason }, "group not sent");
      warnIfAllFiltered(streak.observe(filtered));
      options.onGroup?.(outcome, "filtered");
      return;
    }
    if (filtered.group.tokens.some((t) => t.length === 0)) {
      throw new TokensUnavailableError(
        "a trainer needs token ids, and this run has none: the model server returned no token ids (vLLM: add extra body {\"return_token_ids\": true}, or logprobs with return_tokens_as_token_ids) " +
          "and no tokenizer was given (--tokenizer path/to/tokenizer.json). An oracle policy has no tokens at all: use 'slotpool process' for it.",
      );
    }
    if (!allowInexact && outcome.trajectories.some((t) => [...(t.brokenSegments ?? []), t.tokens].some((s) => s && !s.tokenExact))) {
      throw new TokensInexactError(
        "these trajectories are not token-exact: their ids come from re-rendered chat completions or a local tokenizer, so some trained ids may not be what the model sampled. " +
          "Run the model on vLLM or SGLang with --server-type vllm|sglang --tokenizer path/to/tokenizer.json for token-exact data, " +
          "or accept Phase 1 data with --allow-inexact-tokens (or SLOTPOOL_ALLOW_INEXACT_TOKENS=1).",
      );
    }
    const r = await client.sendScoredData(filtered.group, options.signal);
    if (r.sent) {
      sent++;
      options.stats.addDelivered(outcome);
      failedInARow = 0;
      streak.observe(filtered);
      options.onGroup?.(outcome, "sent");
    } else {
      options.stats.addFiltered(outcome);
      warnIfAllFiltered(streak.observe({ send: false, reason: "the trainer refused the group", fix: "see the trainer's log for why it refuses groups" }));
      options.onGroup?.(outcome, "rejected");
    }
  };

  let currStep = registration.starting_step;
  const crossed = (from: number, to: number, every: number) => every > 0 && Math.floor(to / every) > Math.floor(from / every);
  // BaseEnv's env_step_checks: evaluation with rollouts stopped (STOP_TRAIN), then checkpoints.
  const onStepChange = async (from: number, to: number) => {
    if (crossed(from, to, trainer.stepsPerEval)) {
      await cancelAll();
      const result = await env.evaluate();
      evaluations++;
      log.info({ step: to, metrics: result.metrics }, "evaluation finished");
    }
    if (crossed(from, to, registration.checkpoint_interval)) await env.saveCheckpoint(to, registration.checkpoint_dir);
  };

  const startWorker = () => {
    const controller = new AbortController();
    const worker: Worker = { item: undefined, controller, done: Promise.resolve() };
    worker.done = (async () => {
      const item = backlog.length > 0 ? backlog.pop() : await env.getNextItem();
      if (item === null || item === undefined) {
        exhausted = true;
        return;
      }
      worker.item = item;
      try {
        const outcome = await env.collectTrajectories(item, { signal: controller.signal });
        await deliver(outcome);
      } catch (err) {
        if (controller.signal.aborted) {
          backlog.push(item);
          return;
        }
        fatal ??= err;
      }
    })().finally(() => workers.delete(worker));
    workers.add(worker);
  };

  const cancelAll = async () => {
    const all = [...workers];
    for (const w of all) w.controller.abort(new Error("back-off: the trainer's queue is full"));
    await Promise.all(all.map((w) => w.done));
  };

  try {
    for (;;) {
      if (fatal) throw fatal;
      if (options.signal?.aborted) {
        stopReason = "stopped";
        break;
      }
      if (infraStop !== undefined) {
        stopReason = `groups failed: ${infraStop}`;
        break;
      }
      if (options.maxGroups !== undefined && sent >= options.maxGroups) {
        stopReason = `sent ${sent} groups (--groups)`;
        break;
      }
      if (exhausted && workers.size === 0 && backlog.length === 0) {
        stopReason = "the env has no more items";
        break;
      }
      const status = await client.statusEnv(registration.env_id, options.signal);
      lastStatus = status;
      if (status.current_step !== currStep) {
        await onStepChange(currStep, status.current_step);
        currStep = status.current_step;
      }
      if (batchSize === -1) await refreshInfo();
      const qs = status.queue_size;
      if (totalSteps > 0 && batchSize > 0 && status.current_step + Math.floor((qs * cfg.groupSize) / batchSize) > totalSteps) {
        stopReason = `the trainer reached its ${totalSteps} steps`;
        break;
      }
      const mba = trainer.minBatchAllocation;
      const derived = batchSize === -1 ? -1 : mba !== null ? Math.floor(batchSize * ((status.unallocated_fraction ?? 1) + mba)) : batchSize;
      const queueFull = batchSize > 0 && qs * cfg.groupSize >= trainer.maxBatchesOffpolicy * batchSize;
      const ownShareCovered = mba === null || (status.self_queue_size ?? 0) * cfg.groupSize >= mba * batchSize;
      if (derived === -1 || (queueFull && ownShareCovered)) {
        if (workers.size > 0) {
          backoffs++;
          log.info({ queue_size: qs, in_flight: workers.size }, "trainer queue full: cancelling in-flight rollouts, items back on the backlog");
          await cancelAll();
        }
      } else if (!exhausted) {
        const target = Math.min(cfg.groupConcurrency, Math.floor((trainer.maxBatchesOffpolicy * derived) / cfg.groupSize) - qs);
        const cap = options.maxGroups !== undefined ? options.maxGroups - sent : Number.POSITIVE_INFINITY;
        while (workers.size < target && workers.size < cap) startWorker();
      }
      await sleep(pollMs);
    }
  } finally {
    await cancelAll();
  }
  if (fatal) throw fatal;
  return { registration, sent, backoffs, evaluations, lastStatus, stopReason };
}
