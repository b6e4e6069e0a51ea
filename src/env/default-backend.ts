import type { Logger } from "../observability/logger.js";
import type { ToolBackend } from "./backend.js";
import type { AgentEnvConfig } from "./config.js";
import { EnvError } from "./errors.js";

/** The backend an env gets when none is passed: provisioner from the config, then pool and executor. */
export async function createDefaultBackend(config: AgentEnvConfig, log: Logger): Promise<ToolBackend> {
  throw new EnvError(`provisioner ${config.provisioner} is not available in this build; pass a backend to the env (log: ${typeof log})`);
}
