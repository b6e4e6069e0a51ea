import { z } from "zod";
import { PoolSettingsSchema } from "../pool/config.js";
import { ImageSettingsSchema } from "../pool/image-settings.js";
import { SlotpoolError, configProblems } from "../protocol/errors.js";
import { unknownConfigKeys } from "../protocol/config-keys.js";
import { ToolExecutorConfigSchema } from "./config.js";

/**
 * Everything `createToolBackend` needs to build a provisioner, a SlotPool over it and a
 * ToolExecutor over the pool: three sections, each its owner's own schema (defaults there):
 * `pool`, `executor`, and `images` (how the sandbox servers the provisioner starts fetch task
 * images). An env config holds the same sections; the servers' flags fill them in.
 */
export const ToolBackendConfigSchema = z
  .object({
    pool: PoolSettingsSchema.prefault({}),
    executor: ToolExecutorConfigSchema.prefault({}),
    images: ImageSettingsSchema.prefault({}),
  })
  .strict();

export type ToolBackendConfig = z.output<typeof ToolBackendConfigSchema>;
export type ToolBackendConfigInput = z.input<typeof ToolBackendConfigSchema>;

export class ToolBackendConfigError extends SlotpoolError {
  override name = "ToolBackendConfigError";
}

/** Validates backend settings at the edge (a program building a backend by hand); the error names every offending field by its path. */
export function parseToolBackendConfig(input: unknown): ToolBackendConfig {
  // An unknown key, in either section, is an error naming the nearest known one (zod would drop it from `executor`).
  const unknown = input !== null && typeof input === "object" && !Array.isArray(input) ? unknownConfigKeys(ToolBackendConfigSchema, input as Record<string, unknown>) : [];
  const r = ToolBackendConfigSchema.safeParse(input ?? {});
  if (r.success && unknown.length === 0) return r.data;
  const issues = r.success ? [] : r.error.issues.filter((i) => unknown.length === 0 || i.code !== "unrecognized_keys");
  const problems = [...unknown, ...(issues.length ? [configProblems(issues)] : [])].join("; ");
  throw new ToolBackendConfigError(`invalid tool backend config: ${problems}`);
}
