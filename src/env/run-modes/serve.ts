import type { Logger } from "../../observability/logger.js";
import type { AgentEnv } from "../agent-env.js";
import { AtroposClient } from "../atropos/client.js";
import { runEnvManager, type EnvManagerReport } from "../atropos/env-manager.js";
import { RunStats } from "../run-stats.js";
import type { GroupOutcome } from "../scored-group.js";
import { imagesOf } from "../isolation.js";

export interface ServeModeOptions {
  atroposUrl: string;
  /** Stop after sending this many groups (default: until the trainer's num_steps). */
  groups?: number;
  pollMs?: number;
  signal?: AbortSignal;
  logger: Logger;
  onGroup?: (outcome: GroupOutcome, stats: RunStats) => void;
  /** The run's statistics (default: new, with the env's successThreshold). */
  stats?: RunStats;
}

/** Atropos's `serve` mode: feed a trainer through its trajectory API until it has enough. */
export async function runServeMode(env: AgentEnv<unknown>, options: ServeModeOptions): Promise<{ stats: RunStats; report: EnvManagerReport }> {
  const stats = options.stats ?? new RunStats({ successThreshold: env.config.successThreshold });
  stats.modelSource ??= () => env.modelCallStats();
  stats.imagesSource ??= () => imagesOf(env);
  stats.delivered = "sent";
  const client = new AtroposClient({ url: options.atroposUrl, logger: options.logger });
  try {
    const report = await runEnvManager(env, client, {
      logger: options.logger,
      stats,
      ...(options.groups !== undefined ? { maxGroups: options.groups } : {}),
      ...(options.pollMs !== undefined ? { pollMs: options.pollMs } : {}),
      ...(options.signal ? { signal: options.signal } : {}),
      onGroup: (o) => options.onGroup?.(o, stats),
    });
    return { stats, report };
  } finally {
    await client.close();
  }
}
