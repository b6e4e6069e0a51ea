import type { AgentEnv } from "../env/agent-env.js";
import type { Logger } from "../observability/logger.js";
import { Episode, episodeTools, listedTools, type ListedTool } from "./episode.js";
import { EpisodeIds } from "./episode-ids.js";
import { ItemSource, type ItemSelector } from "./item-source.js";
import { DEFAULT_LIMITS, type ServerLimits } from "./limits.js";

/**
 * What every transport of the OpenEnv server shares: the started env, its items in order,
 * and the count of running episodes. WebSocket sessions, MCP sessions and HTTP steps all
 * begin their episodes here.
 */
export class EpisodeHost<Item = unknown> {
  readonly items: ItemSource<Item>;
  private readonly running = new Set<Episode<Item>>();
  private readonly ended = new WeakSet<Episode<Item>>();
  /** Episodes begun, and how those that ended did: scored (a reward), failed (done without one: an infra failure), abandoned (reset, close, drop, idle). For /status and /metrics. */
  readonly counts = { begun: 0, scored: 0, failed: 0, abandoned: 0, rewardSum: 0 };

  constructor(
    readonly env: AgentEnv<Item>,
    readonly log: Logger,
    limits: Pick<ServerLimits, "maxSeed" | "maxClientEpisodeIds" | "episodeSecret"> = DEFAULT_LIMITS,
  ) {
    const ids = new EpisodeIds({ maxClientIds: limits.maxClientEpisodeIds, ...(limits.episodeSecret ? { secret: limits.episodeSecret } : {}) });
    this.items = new ItemSource(() => env.getNextItem(), ids, limits.maxSeed);
  }

  /** Starts an episode in a slot of its own (see Episode.begin for what can fail and how). */
  async begin(selector: ItemSelector = {}): Promise<Episode<Item>> {
    const selected = await this.items.select(selector);
    const episode = await Episode.begin(this.env, selected, selected.episodeId, { log: this.log });
    this.running.add(episode);
    this.counts.begun++;
    return episode;
  }

  /** Ends an episode that has no reward coming (reset, close, drop, idle): its slot is reset and released. */
  async abandon(episode: Episode<Item> | undefined): Promise<void> {
    if (!episode) return;
    this.running.delete(episode);
    this.count(episode);
    await episode.abandon();
  }

  /** Forget a finished episode (its slot is already released). */
  forget(episode: Episode<Item>): void {
    this.running.delete(episode);
    this.count(episode);
  }

  /** Counts an episode's end once, by how it ended. */
  private count(episode: Episode<Item>): void {
    if (this.ended.has(episode)) return;
    this.ended.add(episode);
    if (episode.reward !== null) {
      this.counts.scored++;
      this.counts.rewardSum += episode.reward;
    } else if (episode.done) this.counts.failed++;
    else this.counts.abandoned++;
  }

  get activeEpisodes(): number {
    return this.running.size;
  }

  /** The tools an episode offers, for a listing before any reset (OpenEnv allows list_tools first). */
  listTools(): ListedTool[] {
    return listedTools(episodeTools(this.env as AgentEnv<unknown>).openai);
  }

  /** Ends every running episode (server shutdown). */
  async closeAll(): Promise<void> {
    await Promise.all([...this.running].map((e) => this.abandon(e)));
  }
}
