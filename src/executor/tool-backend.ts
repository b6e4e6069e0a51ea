import { silentLogger, type Logger } from "../observability/logger.js";
import type { MetricsRegistry } from "../observability/metrics.js";
import type { Provisioner } from "../pool/provisioner.js";
import { SlotPool } from "../pool/slot-pool.js";
import type { ToolRegistry } from "../tools/registry.js";
import type { ToolBackendConfig } from "./backend-config.js";
import type { PoolSettings } from "../pool/config.js";
import { imageServerArgs, REGISTRY_AUTH_ENV, type ImageSettings } from "../pool/image-settings.js";
import { ToolExecutor } from "./tool-executor.js";

export interface ToolBackendOptions {
  logger?: Logger;
  metrics?: MetricsRegistry;
  /** Tools the executor offers (default: the built-ins). */
  tools?: ToolRegistry;
  /** Use this provisioner instead of the one `config.pool.provisioner` names (tests, custom set-ups). */
  provisioner?: Provisioner;
}

/** A started provisioner + pool + executor; `close()` releases every slot and stops the pool (purging). */
export interface ToolBackendParts {
  config: ToolBackendConfig;
  provisioner: Provisioner;
  pool: SlotPool;
  executor: ToolExecutor;
  close(): Promise<void>;
}

/**
 * The one place that wires the pool: builds the provisioner named in the config, a SlotPool
 * over it and a ToolExecutor over the pool, and starts both. Used by the executor-server CLI
 * and by an env's default backend. `config` is parsed at the edge (the CLI, the env's
 * constructor, or parseToolBackendConfig): each part gets its own section as it is.
 */
export async function createToolBackend(config: ToolBackendConfig, options: ToolBackendOptions = {}): Promise<ToolBackendParts> {
  const logger = options.logger ?? silentLogger();
  // The pool's own fields; where its containers run is the provisioner's business.
  const { provisioner: _where, dataDir: _dataDir, nomad: _nomad, ...poolConfig } = config.pool;
  const provisioner = options.provisioner ?? (await createProvisioner(config.pool, config.executor.allowNetwork, config.images, logger));
  const pool = new SlotPool({
    parsedConfig: poolConfig,
    provisioner,
    logger: logger.child({ component: "pool" }),
    ...(options.metrics ? { metrics: options.metrics } : {}),
  });
  const executor = new ToolExecutor({
    pool,
    logger: logger.child({ component: "executor" }),
    ...(options.tools ? { tools: options.tools } : {}),
    ...(options.metrics ? { metrics: options.metrics } : {}),
    parsedConfig: config.executor,
  });
  try {
    await pool.start();
    await executor.start();
  } catch (err) {
    await pool.stop({ purge: true }).catch(() => undefined);
    throw err;
  }
  return {
    config,
    provisioner,
    pool,
    executor,
    async close() {
      await executor.close();
      await pool.stop({ purge: true });
    },
  };
}

/** Loaded on demand so the local path never loads the Nomad client, and vice versa. */
async function createProvisioner(config: PoolSettings, allowNetwork: boolean, images: ImageSettings, logger: Logger): Promise<Provisioner> {
  if (config.provisioner === "nomad") {
    const { NomadProvisioner } = await import("../pool/nomad-provisioner.js");
    const { shareJob, ...job } = config.nomad;
    // The image store's budget is the job's to size (80 % of its disk unless the config says).
    const { budgetMb, ...fetching } = images;
    const registryAuth = process.env[REGISTRY_AUTH_ENV];
    return new NomadProvisioner({
      slotsPerContainer: config.slotsPerContainer,
      logger: logger.child({ component: "nomad" }),
      job: {
        ...job,
        serverArgs: imageServerArgs(fetching),
        ...(budgetMb !== undefined ? { imageBudgetMb: budgetMb } : {}),
        // Credentials from this process's environment reach the servers in theirs, never argv.
        ...(registryAuth ? { registryAuth } : {}),
      },
      ...(shareJob ? { shareJob } : {}),
    });
  }
  const { LocalProvisioner } = await import("../pool/local-provisioner.js");
  return new LocalProvisioner({
    slotsPerContainer: config.slotsPerContainer,
    logger: logger.child({ component: "local" }),
    // The launcher waits for the server's info-level "listening" line: a quieter
    // SLOTPOOL_LOG_LEVEL inherited from the user's shell would hide it.
    env: { SLOTPOOL_LOG_LEVEL: "info" },
    // The executor's network setting: the servers pre-warm each slot's namespace for it
    // (issue 22: else every fresh slot's first call built one from scratch) and the pool's
    // calls default to it. Not for Nomad jobs: an image built before --prewarm-network would refuse it.
    allowNetwork,
    // The servers inherit this process's environment: registry credentials (SLOTPOOL_REGISTRY_AUTH,
    // REGISTRY_AUTH_FILE) reach them there; the flags name no secret.
    extraArgs: imageServerArgs(images),
    ...(config.dataDir ? { baseDir: config.dataDir } : {}),
  });
}
