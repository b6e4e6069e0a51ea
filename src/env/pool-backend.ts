import { ToolExecutor } from "../executor/tool-executor.js";
import type { Logger } from "../observability/logger.js";
import type { Provisioner } from "../pool/provisioner.js";
import { SlotPool } from "../pool/slot-pool.js";
import { ToolRegistry } from "../tools/registry.js";
import type { ToolBackend } from "./backend.js";
import type { AgentEnvConfig } from "./config.js";

/** A SlotPool over `provisioner` and a ToolExecutor over the pool, set up from the env config. */
export async function poolBackend(config: AgentEnvConfig, provisioner: Provisioner, log: Logger, registry: ToolRegistry = ToolRegistry.withBuiltins()): Promise<ToolBackend> {
  const pool = new SlotPool({
    provisioner,
    logger: log.child({ component: "pool" }),
    slotsPerContainer: config.slotsPerContainer,
    minContainers: config.minContainers,
    maxContainers: config.maxContainers,
    acquireTimeoutMs: config.acquireTimeoutMs,
  });
  await pool.start();
  const executor = new ToolExecutor({
    pool,
    tools: registry,
    logger: log.child({ component: "executor" }),
    config: {
      batchWindowMs: config.batchWindowMs,
      maxBatchSize: config.maxBatchSize,
      defaultTimeoutS: config.toolTimeoutS,
      acquireTimeoutMs: config.acquireTimeoutMs,
      allowNetwork: config.allowNetwork,
      requireSandbox: config.requireSandbox,
      requireStatefulSandbox: config.requireStatefulSandbox,
    },
  });
  try {
    await executor.start();
  } catch (err) {
    await pool.stop({ purge: true });
    throw err;
  }
  return {
    executor,
    registry: executor.tools,
    poolStats: () => pool.stats(),
    async close() {
      await executor.close();
      await pool.stop({ purge: true });
    },
  };
}
