import { createToolBackend } from "../executor/tool-backend.js";
import type { Logger } from "../observability/logger.js";
import type { Provisioner } from "../pool/provisioner.js";
import { ToolRegistry } from "../tools/registry.js";
import { Toolsets } from "../tools/toolsets.js";
import { toolsetsInReach } from "../tools/distributions.js";
import { isBrowserTool } from "../protocol/browser-tools.js";
import type { PoolSettings } from "../pool/config.js";
import type { ToolBackend } from "./backend.js";
import type { AgentEnvConfig } from "./config.js";

/**
 * A SlotPool over `provisioner` (default: the one the config names) and a ToolExecutor over
 * the pool, set up by createToolBackend from the env config's `pool` and `executor` sections
 * (parsed already, in the env's constructor).
 */
export async function poolBackend(config: AgentEnvConfig, provisioner: Provisioner | undefined, log: Logger, registry: ToolRegistry = ToolRegistry.withBuiltins()): Promise<ToolBackend> {
  const parts = await createToolBackend({ pool: withBrowserMemory(config, registry), executor: config.executor, images: config.images }, { logger: log, tools: registry, ...(provisioner ? { provisioner } : {}) });
  return {
    executor: parts.executor,
    registry: parts.executor.tools,
    poolStats: () => parts.pool.stats(),
    containerHealth: () => parts.pool.containerHealth(),
    imagesUsed: () => ({ images: parts.pool.images.used(), fetches: [...parts.pool.images.fetches] }),
    close: () => parts.close(),
  };
}

/**
 * The env's pool settings, with `nomad.browser` on (each slot's default memory holds a browser,
 * nomad/job.ts) when its toolsets may offer a browser tool and the config does not say.
 */
export function withBrowserMemory(config: AgentEnvConfig, registry: ToolRegistry): PoolSettings {
  if (config.pool.nomad.browser !== undefined) return config.pool;
  let offers = false;
  try {
    offers = new Toolsets().resolve({ enabled: toolsetsInReach(config.tools), disabled: config.tools.disabled }, registry).some(isBrowserTool);
  } catch {
    // An unknown toolset is reported where the toolsets are resolved for a group, with the names.
  }
  return offers ? { ...config.pool, nomad: { ...config.pool.nomad, browser: true } } : config.pool;
}
