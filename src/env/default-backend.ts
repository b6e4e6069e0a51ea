import type { Logger } from "../observability/logger.js";
import type { Provisioner } from "../pool/provisioner.js";
import type { ToolBackend } from "./backend.js";
import type { AgentEnvConfig } from "./config.js";
import { poolBackend } from "./pool-backend.js";

/**
 * The backend an env gets when none is passed: the provisioner named in the config (local
 * child processes, or a Nomad job configured from the NOMAD_* environment), a SlotPool over
 * it and a ToolExecutor over the pool.
 */
export async function createDefaultBackend(config: AgentEnvConfig, log: Logger): Promise<ToolBackend> {
  let provisioner: Provisioner;
  if (config.provisioner === "nomad") {
    const { NomadProvisioner } = await import("../pool/nomad-provisioner.js");
    provisioner = new NomadProvisioner({
      slotsPerContainer: config.slotsPerContainer,
      logger: log.child({ component: "nomad" }),
      job: {
        ...(config.sandboxImage ? { image: config.sandboxImage } : {}),
        ...(config.nomadDriver ? { driver: config.nomadDriver } : {}),
        ...(config.nomadJobId ? { jobId: config.nomadJobId } : {}),
      },
    });
  } else {
    const { LocalProvisioner } = await import("../pool/local-provisioner.js");
    provisioner = new LocalProvisioner({
      slotsPerContainer: config.slotsPerContainer,
      logger: log.child({ component: "local" }),
      // The launcher waits for the server's info-level "listening" line: a quieter
      // SLOTPOOL_LOG_LEVEL inherited from the user's shell would hide it.
      env: { SLOTPOOL_LOG_LEVEL: "info" },
      ...(config.dataDir ? { baseDir: config.dataDir } : {}),
    });
  }
  return poolBackend(config, provisioner, log);
}
