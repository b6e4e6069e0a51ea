import type { Logger } from "../observability/logger.js";
import type { ToolBackend } from "./backend.js";
import type { AgentEnvConfig } from "./config.js";
import { poolBackend } from "./pool-backend.js";

/**
 * The backend an env gets when none is passed: the provisioner named in the config (local
 * child processes, or a Nomad job configured from the NOMAD_* environment), a SlotPool over
 * it and a ToolExecutor over the pool — built by createToolBackend, as the executor-server is.
 */
export async function createDefaultBackend(config: AgentEnvConfig, log: Logger): Promise<ToolBackend> {
  return poolBackend(config, undefined, log);
}
