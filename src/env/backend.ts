import type { ToolExecutorLike } from "../executor/types.js";
import type { Logger } from "../observability/logger.js";
import type { PoolStats } from "../pool/types.js";
import type { ToolRegistry } from "../tools/registry.js";
import type { AgentEnvConfig } from "./config.js";
import type { ContainerHealth, ImagesUsed } from "./isolation.js";

/**
 * What the env layer runs tools on: an executor (queue, batching, slot affinity) over a slot
 * pool, and the registry of tools it knows. Built from the env config by default; tests
 * and embedders may pass their own.
 */
export interface ToolBackend {
  executor: ToolExecutorLike;
  registry: ToolRegistry;
  poolStats?(): PoolStats;
  /** Each live container's /health (sandbox, limits, network): the isolation the run's slots have. */
  containerHealth?(): Promise<ContainerHealth[]>;
  /** The task images the run's slots were reset into (how many times, their digests) and what fetching each cost where it was first used. */
  imagesUsed?(): ImagesUsed;
  close(): Promise<void>;
}

export type ToolBackendFactory = (config: AgentEnvConfig, log: Logger) => Promise<ToolBackend>;
