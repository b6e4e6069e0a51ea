/** The pool room (`slotpool/pool`): SlotPool, its provisioners and config, the sandbox HTTP client, errors. */
export * from "./errors.js";
export type * from "./types.js";
export { SlotPool, type SlotPoolOptions, type SlotPoolEvents, type ScaleEvent } from "./slot-pool.js";
export {
  SlotPoolConfigSchema,
  SlotPoolConfigError,
  parseSlotPoolConfig,
  PoolSettingsSchema,
  NomadJobSettingsSchema,
  type SlotPoolConfig,
  type SlotPoolConfigInput,
  type PoolSettings,
  type PoolSettingsInput,
} from "./config.js";
export { LocalProvisioner, type LocalProvisionerOptions } from "./local-provisioner.js";
export { NomadProvisioner, type NomadProvisionerOptions } from "./nomad-provisioner.js";
export { ProvisionerError, type Provisioner, type ProvisionerEvents, type ContainerGone } from "./provisioner.js";
export { SandboxClient, type SandboxClientOptions, type SandboxClientLike } from "./sandbox-client.js";
export { startSandboxProcess, SandboxStartError, type SandboxProcess, type SandboxProcessOptions } from "./sandbox-process.js";
