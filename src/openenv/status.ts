import type { MetricsRegistry } from "../observability/metrics.js";
import type { PoolStats } from "../pool/types.js";
import type { EpisodeHost } from "./episode-host.js";

/** What `GET /status` and `--metrics-port` read of a running OpenEnv server. */
export interface OpenEnvStatusSource {
  readonly host: EpisodeHost<unknown>;
  readonly sessions: number;
  readonly startedAt: number;
}

/**
 * `GET /status` of the OpenEnv server: the env, sessions and episodes now, how the episodes
 * that ended did (scored, failed without a reward, abandoned) and their mean reward, and the
 * slot pool's slots — what an operator asks of a server a trainer is using.
 */
export function openEnvStatus(s: OpenEnvStatusSource): Record<string, unknown> {
  const c = s.host.counts;
  const pool = poolStatsOf(s.host);
  return {
    env: s.host.env.name,
    uptime_s: Math.round((Date.now() - s.startedAt) / 1000),
    sessions: s.sessions,
    active_episodes: s.host.activeEpisodes,
    episodes: { begun: c.begun, scored: c.scored, failed: c.failed, abandoned: c.abandoned },
    mean_reward: c.scored ? c.rewardSum / c.scored : null,
    ...(pool ? { pool: { containers: pool.containers, slots: pool.slots, waiting: pool.waiting } } : {}),
  };
}

/** The same figures as Prometheus series (`slotpool openenv-server --metrics-port N`). */
export function registerOpenEnvMetrics(registry: MetricsRegistry, s: OpenEnvStatusSource): void {
  registry.gauge("slotpool_openenv_sessions", "Sessions open now: WebSocket connections and MCP sessions", () => [{ value: s.sessions }]);
  registry.gauge("slotpool_openenv_active_episodes", "Episodes running now, each holding a slot", () => [{ value: s.host.activeEpisodes }]);
  registry.gauge("slotpool_openenv_episodes", "Episodes begun, and those that ended by how: scored (a reward), failed (no reward: an infra failure), abandoned (reset, close, idle)", () => {
    const c = s.host.counts;
    return [
      { labels: { outcome: "begun" }, value: c.begun },
      { labels: { outcome: "scored" }, value: c.scored },
      { labels: { outcome: "failed" }, value: c.failed },
      { labels: { outcome: "abandoned" }, value: c.abandoned },
    ];
  });
  registry.gauge("slotpool_openenv_mean_reward", "Mean reward of the scored episodes", () => [{ value: s.host.counts.scored ? s.host.counts.rewardSum / s.host.counts.scored : 0 }]);
  registry.gauge("slotpool_openenv_pool_slots", "The slot pool's slots by state", () => {
    const pool = poolStatsOf(s.host);
    return pool ? (["free", "held", "lost"] as const).map((state) => ({ labels: { state }, value: pool.slots[state] })) : [];
  });
}

function poolStatsOf(host: EpisodeHost<unknown>): PoolStats | undefined {
  try {
    return host.env.tools.poolStats?.();
  } catch {
    return undefined; // the env is closing
  }
}
