/** The pool room (`slotpool/pool`): SlotPool, its provisioners and config, the sandbox HTTP client, errors. */
// Listed by name (guarded by test/architecture/public-api.test.ts).
export {
  PoolError,
  SlotLostError,
  isSlotLostError,
  SlotAcquireTimeoutError,
  PoolNotRunningError,
  SandboxRequestError,
  SlotReleasedError,
  PoolTemplateError,
  SlotForkError,
  ImageUnavailableError,
  ImageReferenceError,
} from "./errors.js";
export type { LeasedSlot, ForkableSlot, SlotCall, CallOptions, ContainerInfo, ForkOptions, AcquireOptions, ReleaseOptions, PoolStats, SlotPoolLike } from "./types.js";
export type { TemplateSpec } from "./template-affinity.js";
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
