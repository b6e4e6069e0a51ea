import { z } from "zod";
import { PoolError } from "./errors.js";
import { configProblems } from "../protocol/errors.js";
import { MIN_SLOT_MEMORY_MB, serverReserveMb } from "../nomad/job.js";
import type { Provisioner } from "./provisioner.js";

/**
 * The pool's settings. Names follow the seed's AgentEnvConfig (slots_per_container,
 * min/max_containers, acquire_timeout_s, purge_job_on_shutdown) in camelCase and ms.
 */
export const SlotPoolConfigSchema = z
  .object({
    /** Slots each sandbox container serves (the provisioner starts its containers with this many). */
    slotsPerContainer: z.number().int().min(1).max(4096).default(10),
    /** Containers kept running even when idle. */
    minContainers: z.number().int().min(0).default(1),
    /** Most containers the autoscaler starts. */
    maxContainers: z.number().int().min(1).default(10),
    /**
     * How long acquire() waits for a slot before SlotAcquireTimeoutError (seed: acquire_timeout_s).
     * Long enough to outlast a container's cold start (containerHealthTimeoutMs is 60 s).
     */
    acquireTimeoutMs: z.number().int().positive().default(120_000),
    /** Extra free slots to keep ready beyond held + waiting. */
    headroomSlots: z.number().int().min(0).default(0),
    /** How long a surplus of containers must last before the highest ones are drained. */
    idleTimeoutMs: z.number().int().min(0).default(60_000),
    /** A held slot neither used nor released for this long is reclaimed; 0 turns leases off. */
    leaseTimeoutMs: z.number().int().min(0).default(30 * 60_000),
    /**
     * Interval of the /health check of every container (the second loss signal; each check's
     * timeout is min(5 s, this)). It is what notices a node that vanished without closing its
     * sockets (power loss, a cut link, a frozen machine): with the defaults after two failed
     * checks, about 6-8 s from the loss (docs/pool.md), long before Nomad declares the node down (about 25 s after it stopped
     * heartbeating).
     */
    healthIntervalMs: z.number().int().positive().default(2_000),
    /** Consecutive failed health checks before a container counts as lost. */
    healthFailuresBeforeLost: z.number().int().min(1).default(2),
    /** How long a container that came up may take to answer /health before it counts as failed. */
    containerHealthTimeoutMs: z.number().int().positive().default(60_000),
    /** Containers still starting at once (admission control for start-up storms). */
    maxStartingContainers: z.number().int().min(1).default(16),
    /** How long start() waits for minContainers healthy containers. */
    startTimeoutMs: z.number().int().positive().default(180_000),
    /** Reset a slot's workspace when it is released, unless release() says otherwise. */
    resetOnRelease: z.boolean().default(true),
    /** stop() purges (Nomad: deregister with purge; local: delete data) unless told otherwise (seed: purge_job_on_shutdown). */
    purgeOnStop: z.boolean().default(true),
    /** HTTP calls in flight per container (default: 4 per slot). */
    maxConcurrencyPerContainer: z.number().int().min(1).optional(),
    /** Period of the scale-down and lease checks. */
    tickMs: z.number().int().positive().default(500),
  })
  .strict()
  .refine((c) => c.minContainers <= c.maxContainers, {
    message: "minContainers must not exceed maxContainers",
    path: ["minContainers"],
  });

export type SlotPoolConfig = z.output<typeof SlotPoolConfigSchema>;

/** Nomad provisioner: the sandbox job's settings, in the job builder's names (nomad/job.ts), passed to it as they are. */
export const NomadJobSettingsSchema = z
  .object({
    /** The job's image (docker) or .sif path (raw_exec); default: the job builder's. */
    image: z.string().min(1).optional(),
    /** The task driver. */
    driver: z.enum(["docker", "raw_exec", "exec"], { error: "must be docker, raw_exec or exec" }).optional(),
    /** The sandbox job's id. Default: `slotpool-sandbox-<run id>`, a job of this run's own. */
    jobId: z.string().min(1).optional(),
    /**
     * The jobId is shared by successive runs: a run may take over the job a previous run left
     * behind once that run is gone (no heartbeat). A live run's job is never touched.
     */
    shareJob: z.boolean().optional(),
    /** Datacenters the job may run in (default ["dc1"], every agent's default; Nomad ≥ 1.6 also takes "*"). */
    datacenters: z.array(z.string().min(1)).min(1).optional(),
    /** The job's namespace (default NOMAD_NAMESPACE, else Nomad's "default"). */
    namespace: z.string().min(1).optional(),
    /** The job's node pool (Nomad ≥ 1.6; older agents ignore it). */
    nodePool: z.string().min(1).optional(),
    /** MHz of CPU per container (allocation); default 1000. A node holds as many containers as its CPU allows. */
    cpu: z.number().int().min(1).optional(),
    /** Memory per container (allocation), MB; default 128 + 224 × slotsPerContainer. Each slot gets an equal share of it after 128 MB. */
    memoryMb: z.number().int().min(16).optional(),
    /** Task images' sticky ephemeral disk per container, MB (default 5120); the image store's budget is 80 % of it unless images.budgetMb says (docs/nomad.md). */
    imageDiskMb: z.number().int().min(64).optional(),
    /**
     * docker: the container's added capabilities (default ["sys_admin"]). Task images under
     * docker also need "sys_ptrace" (docs/nomad.md, "Task images"); the client's docker plugin
     * must allow each (allow_caps).
     */
    capAdd: z.array(z.string().regex(/^[a-z_]+$/, "capabilities in Nomad's lower-case spelling, e.g. sys_admin")).optional(),
    /** Instead of the ephemeral disk: a Nomad host volume (the client's host_volume) for the task images, one store per allocation index (docker and exec drivers). */
    imageHostVolume: z.string().min(1).optional(),
    /**
     * Each slot runs a browser: the default memory is 128 + (224 + 384) × slotsPerContainer.
     * An env whose toolsets offer the browser tools sets it unless it is given (env/pool-backend.ts).
     */
    browser: z.boolean().optional(),
    /** Placement constraints, e.g. [{"attribute": "${meta.sandbox}", "value": "yes"}] (operator default "="). */
    constraints: z.array(z.object({ attribute: z.string().min(1), operator: z.string().min(1).optional(), value: z.string().optional() }).strict()).optional(),
    /** Spread blocks, e.g. [{"attribute": "${node.unique.id}"}]: the containers on as many nodes as possible. */
    spreads: z
      .array(
        z
          .object({
            attribute: z.string().min(1),
            weight: z.number().int().min(0).max(100).optional(),
            targets: z.array(z.object({ value: z.string().min(1), percent: z.number().int().min(0).max(100) }).strict()).optional(),
          })
          .strict(),
      )
      .optional(),
  })
  .strict();

/**
 * The `pool` section of an env config and of the executor-server: the pool's own settings
 * (above) plus where its containers run. The one place these defaults live.
 */
export const PoolSettingsSchema = z
  .object({
    ...SlotPoolConfigSchema.shape,
    /** Where sandbox containers run: local child processes, or a Nomad job configured from the NOMAD_* environment. */
    provisioner: z.enum(["local", "nomad"]).default("local"),
    /** Local provisioner: where workspaces live (default: a temp dir). */
    dataDir: z.string().min(1).optional(),
    /** Nomad provisioner: the sandbox job. */
    nomad: NomadJobSettingsSchema.prefault({}),
  })
  .strict()
  .refine((c) => c.minContainers <= c.maxContainers, {
    message: "minContainers must not exceed maxContainers",
    path: ["minContainers"],
  })
  .superRefine((c, ctx) => {
    // The allocation must hold every slot's share: refused here, naming both settings, not
    // when the job is built (or, worse, when a slot runs out of memory).
    const memoryMb = c.nomad.memoryMb;
    if (memoryMb === undefined) return;
    const reserve = serverReserveMb(c.nomad.browser === true);
    const share = Math.floor((memoryMb - reserve) / c.slotsPerContainer);
    if (share >= MIN_SLOT_MEMORY_MB) return;
    const need = reserve + c.slotsPerContainer * MIN_SLOT_MEMORY_MB;
    const fit = Math.max(0, Math.floor((memoryMb - reserve) / MIN_SLOT_MEMORY_MB));
    ctx.addIssue({
      code: "custom",
      path: ["nomad", "memoryMb"],
      message:
        `${c.slotsPerContainer} slots (pool.slotsPerContainer) do not fit in ${memoryMb} MB: the server keeps ${reserve} MB and each slot needs at least ${MIN_SLOT_MEMORY_MB} MB; ` +
        `raise pool.nomad.memoryMb to ${need} or more${fit > 0 ? `, or lower pool.slotsPerContainer to ${fit} or fewer` : ""}`,
    });
  });

export type PoolSettings = z.output<typeof PoolSettingsSchema>;
export type PoolSettingsInput = z.input<typeof PoolSettingsSchema>;
export type SlotPoolConfigInput = z.input<typeof SlotPoolConfigSchema>;

export class SlotPoolConfigError extends PoolError {
  override name = "SlotPoolConfigError";
}

/** Validates pool settings; the error names every offending field. */
export function parseSlotPoolConfig(input: unknown): SlotPoolConfig {
  const parsed = SlotPoolConfigSchema.safeParse(input ?? {});
  if (parsed.success) return parsed.data;
  const problems = configProblems(parsed.error.issues);
  throw new SlotPoolConfigError(`invalid SlotPool config: ${problems}`);
}

/**
 * A pool's settings over `provisioner`: parsed (unless `parsed` already), and the slot count
 * the provisioner's (it starts the servers): taken from it when not given, refused when the
 * two disagree.
 */
export function poolConfigWith(provisioner: Provisioner, input: SlotPoolConfig | SlotPoolConfigInput, parsed = false): SlotPoolConfig {
  const provisionerSlots = provisioner.slotsPerContainer;
  const config = parsed ? (input as SlotPoolConfig) : parseSlotPoolConfig(input.slotsPerContainer === undefined && provisionerSlots !== undefined ? { ...input, slotsPerContainer: provisionerSlots } : input);
  if (provisionerSlots !== undefined && config.slotsPerContainer !== provisionerSlots) {
    throw new SlotPoolConfigError(
      `slotsPerContainer disagrees: the ${provisioner.kind} provisioner starts containers of ${provisionerSlots} slots, the pool was told ${config.slotsPerContainer}; give it once, to the provisioner (the pool takes it from there)`,
    );
  }
  return config;
}

/** The pool's default network: given once, to the provisioner or the pool; loopback only unless asked. */
export function poolNetwork(provisioner: Provisioner, allowNetwork: unknown): boolean {
  if (allowNetwork !== undefined && typeof allowNetwork !== "boolean") throw new SlotPoolConfigError(`allowNetwork must be true or false, got ${JSON.stringify(allowNetwork)}`);
  const fromProvisioner = provisioner.allowNetwork;
  if (allowNetwork !== undefined && fromProvisioner !== undefined && allowNetwork !== fromProvisioner) {
    throw new SlotPoolConfigError(
      `allowNetwork disagrees: the ${provisioner.kind} provisioner prepares its slots for network ${fromProvisioner ? "on" : "off"}, the pool was told ${allowNetwork ? "on" : "off"}; give it once, to the provisioner (the pool takes it from there)`,
    );
  }
  return allowNetwork ?? fromProvisioner ?? false;
}
