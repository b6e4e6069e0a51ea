/** slotpool's public API. */
export * from "./protocol/index.js";
export * from "./pool/errors.js";
export type * from "./pool/types.js";
export { SlotPool, type SlotPoolOptions, type SlotPoolEvents, type ScaleEvent } from "./pool/slot-pool.js";
export { SlotPoolConfigSchema, SlotPoolConfigError, parseSlotPoolConfig, type SlotPoolConfig, type SlotPoolConfigInput } from "./pool/config.js";
export { LocalProvisioner, type LocalProvisionerOptions } from "./pool/local-provisioner.js";
export { NomadProvisioner, type NomadProvisionerOptions } from "./pool/nomad-provisioner.js";
export { ProvisionerError, type Provisioner, type ProvisionerEvents, type ContainerGone } from "./pool/provisioner.js";
export { SandboxClient, type SandboxClientOptions, type SandboxClientLike } from "./pool/sandbox-client.js";
export type { TemplateSpec } from "./pool/template-affinity.js";
export * from "./nomad/index.js";
export * from "./tools/index.js";
export * from "./executor/index.js";
export * from "./agent/index.js";
export * from "./env/index.js";
