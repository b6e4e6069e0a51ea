import { z } from "zod";

/**
 * The bounds of a public OpenEnv server: every request a client can send is bounded in what
 * it selects, how big it is, how many of it there are at once and how long it takes. The
 * defaults hold on a 2-core box with a few GB for the server; docs/trainers.md lists the flags.
 */
export interface ServerLimits {
  /** Largest `seed` (item number) a reset, step or /run may select. Default 100 000. */
  maxSeed: number;
  /** Client-chosen episode ids remembered for replay (an LRU). Default 65 536. */
  maxClientEpisodeIds: number;
  /** Sessions open at once: WebSocket connections plus MCP sessions. Default 1024. */
  maxSessions: number;
  /** Largest WebSocket message and HTTP body, bytes. Default 16 MiB. */
  maxMessageBytes: number;
  /** Bytes of WebSocket messages received but not yet handled, over all connections. Default 256 MiB. */
  frameBudgetBytes: number;
  /** Model endpoints POST /run may call: URL prefixes (scheme, host, port, path). None: /run is refused. */
  modelUrlAllow: string[];
  /** Largest model answer /run reads, bytes (streamed, counted, cut). Default 16 MiB. */
  modelAnswerMaxBytes: number;
  /** Longest a /run may take, ms (the request's `timeout_ms` is bounded by it). Default 600 000. */
  runTimeoutMs: number;
  /** Secret the server's episode ids are signed with (else random per process: ids replay only on this server). */
  episodeSecret?: string;
}

export const DEFAULT_LIMITS: ServerLimits = {
  maxSeed: 100_000,
  maxClientEpisodeIds: 65_536,
  maxSessions: 1024,
  maxMessageBytes: 16 * 1024 * 1024,
  frameBudgetBytes: 256 * 1024 * 1024,
  modelUrlAllow: [],
  modelAnswerMaxBytes: 16 * 1024 * 1024,
  runTimeoutMs: 600_000,
};

/** The `openenv` section of `openenv-server --config FILE`: any of the limits, by the names above (flags win over it). */
export const ServerLimitsSchema = z
  .object({
    maxSeed: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
    maxClientEpisodeIds: z.number().int().min(0),
    maxSessions: z.number().int().min(1),
    maxMessageBytes: z.number().int().min(1024),
    frameBudgetBytes: z.number().int().min(1024),
    modelUrlAllow: z.array(z.string().min(1)),
    modelAnswerMaxBytes: z.number().int().min(1024),
    runTimeoutMs: z.number().int().min(1000),
    episodeSecret: z.string().min(16),
  })
  .partial()
  .strict();
