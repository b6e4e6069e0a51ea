import { z } from "zod";
import { PoolSettingsSchema } from "../pool/config.js";
import { SlotpoolError, configProblems } from "../protocol/errors.js";
import { ToolExecutorConfigSchema } from "./config.js";

/**
 * Everything `createToolBackend` needs to build a provisioner, a SlotPool over it and a
 * ToolExecutor over the pool: two sections, each its owner's own schema (defaults there).
 * An env config holds the same two sections; the executor-server flags fill them in.
 */
export const ToolBackendConfigSchema = z
  .object({
    pool: PoolSettingsSchema.prefault({}),
    executor: ToolExecutorConfigSchema.prefault({}),
  })
  .strict();

export type ToolBackendConfig = z.output<typeof ToolBackendConfigSchema>;
export type ToolBackendConfigInput = z.input<typeof ToolBackendConfigSchema>;

export class ToolBackendConfigError extends SlotpoolError {
  override name = "ToolBackendConfigError";
}

/** Validates backend settings at the edge (a program building a backend by hand); the error names every offending field by its path. */
export function parseToolBackendConfig(input: unknown): ToolBackendConfig {
  const r = ToolBackendConfigSchema.safeParse(input ?? {});
  if (r.success) return r.data;
  const problems = configProblems(r.error.issues);
  throw new ToolBackendConfigError(`invalid tool backend config: ${problems}`);
}
