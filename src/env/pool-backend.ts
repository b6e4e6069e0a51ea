import { createToolBackend } from "../executor/tool-backend.js";
import type { Logger } from "../observability/logger.js";
import type { Provisioner } from "../pool/provisioner.js";
import { ToolRegistry } from "../tools/registry.js";
import type { ToolBackend } from "./backend.js";
import type { AgentEnvConfig } from "./config.js";

/**
 * A SlotPool over `provisioner` (default: the one the config names) and a ToolExecutor over
 * the pool, set up by createToolBackend from the env config's `pool` and `executor` sections
 * (parsed already, in the env's constructor).
 */
export async function poolBackend(config: AgentEnvConfig, provisioner: Provisioner | undefined, log: Logger, registry: ToolRegistry = ToolRegistry.withBuiltins()): Promise<ToolBackend> {
  const parts = await createToolBackend({ pool: config.pool, executor: config.executor, images: config.images }, { logger: log, tools: registry, ...(provisioner ? { provisioner } : {}) });
  return {
    executor: parts.executor,
    registry: parts.executor.tools,
    poolStats: () => parts.pool.stats(),
    containerHealth: () => parts.pool.containerHealth(),
    imagesUsed: () => ({ images: parts.pool.images.used(), fetches: [...parts.pool.images.fetches] }),
    close: () => parts.close(),
  };
}
