import { z } from "zod";
import { SlotPoolConfigSchema } from "../pool/config.js";
import { SlotpoolError, configProblems } from "../protocol/errors.js";
import { ToolExecutorConfigSchema } from "./config.js";

const pool = SlotPoolConfigSchema.shape;
const executor = ToolExecutorConfigSchema.shape;

/**
 * Everything `createToolBackend` needs to build a provisioner, a SlotPool over it and a
 * ToolExecutor over the pool. The one place these defaults live: pool and executor fields are
 * taken from their own schemas (defaults and descriptions there), the provisioner's are here.
 * The env config and the executor-server CLI flags are derived from this object with pick().
 */
export const ToolBackendSettingsSchema = z.object({
  /** Where sandbox containers run: local child processes, or a Nomad job configured from the NOMAD_* environment. */
  provisioner: z.enum(["local", "nomad"]).default("local"),
  slotsPerContainer: pool.slotsPerContainer,
  minContainers: pool.minContainers,
  maxContainers: pool.maxContainers,
  idleTimeoutMs: pool.idleTimeoutMs,
  acquireTimeoutMs: pool.acquireTimeoutMs,
  /** Local provisioner: where workspaces live (default: a temp dir). */
  dataDir: z.string().min(1).optional(),
  /** Nomad provisioner: the sandbox job's image (docker) or .sif path (raw_exec); default: the job builder's. */
  sandboxImage: z.string().min(1).optional(),
  /** Nomad provisioner: the task driver. */
  nomadDriver: z.enum(["docker", "raw_exec", "exec"], { error: "nomadDriver must be docker, raw_exec or exec" }).optional(),
  /** Nomad provisioner: the sandbox job's id. */
  nomadJobId: z.string().min(1).optional(),
  /** Nomad provisioner: datacenters the job may run in (default ["dc1"], every agent's default; Nomad ≥ 1.6 also takes "*"). */
  nomadDatacenters: z.array(z.string().min(1)).min(1).optional(),
  /** Nomad provisioner: the job's namespace (default NOMAD_NAMESPACE, else Nomad's "default"). */
  nomadNamespace: z.string().min(1).optional(),
  /** Nomad provisioner: the job's node pool (Nomad ≥ 1.6; older agents ignore it). */
  nomadNodePool: z.string().min(1).optional(),
  batchWindowMs: executor.batchWindowMs,
  maxBatchSize: executor.maxBatchSize,
  /** Timeout of a tool call whose arguments name none (seconds, clamped to 1..600): the executor's defaultTimeoutS. */
  toolTimeoutS: executor.defaultTimeoutS,
  allowNetwork: executor.allowNetwork,
  requireSandbox: executor.requireSandbox,
  requireStatefulSandbox: executor.requireStatefulSandbox,
  toolServerUrl: executor.toolServerUrl,
  toolServerToken: executor.toolServerToken,
});

const minNotAboveMax: [(c: { minContainers: number; maxContainers: number }) => boolean, { message: string; path: string[] }] = [
  (c) => c.minContainers <= c.maxContainers,
  { message: "minContainers must not exceed maxContainers", path: ["minContainers"] },
];

/** The settings object with its cross-field check (minContainers ≤ maxContainers). */
export const ToolBackendConfigSchema = ToolBackendSettingsSchema.refine(...minNotAboveMax);

/** The same check for schemas derived with pick()/extend() (the env config). */
export const containersInOrder = minNotAboveMax;

export type ToolBackendConfig = z.output<typeof ToolBackendConfigSchema>;
export type ToolBackendConfigInput = z.input<typeof ToolBackendConfigSchema>;

export class ToolBackendConfigError extends SlotpoolError {
  override name = "ToolBackendConfigError";
}

/** Validates backend settings; the error names every offending field. Unknown keys are ignored, so an env config can be passed whole. */
export function parseToolBackendConfig(input: unknown): ToolBackendConfig {
  const r = ToolBackendConfigSchema.safeParse(input ?? {});
  if (r.success) return r.data;
  const problems = configProblems(r.error.issues);
  throw new ToolBackendConfigError(`invalid tool backend config: ${problems}`);
}
