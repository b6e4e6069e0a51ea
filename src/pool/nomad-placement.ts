/**
 * What keeps the sandbox job's allocations from their count: placement failures (an
 * evaluation's FailedTGAllocs) and deployments, during which Nomad refuses scale calls; and
 * where they may go: nodes kept out of placements.
 */
import type { Logger } from "pino";
import type { NomadClient } from "../nomad/client.js";
import { sleep } from "../nomad/retry.js";
import { SANDBOX_GROUP } from "../nomad/job.js";
import type { Evaluation } from "../nomad/schemas.js";

/** The node attribute a constraint names to keep one node out. */
export const NODE_ID_ATTRIBUTE = "${node.unique.id}";

/**
 * The job with one `${node.unique.id} != N` constraint per node added to the sandbox group's
 * own constraints (the job-level ones, the operator's, stay as they are). Everything else,
 * Meta included, is unchanged: a Meta change would replace every allocation.
 */
export function withAvoidedNodes<J extends Record<string, unknown>>(job: J, nodes: readonly string[]): J {
  const groups = (job["TaskGroups"] as Array<Record<string, unknown>> | undefined) ?? [];
  return {
    ...job,
    TaskGroups: groups.map((g) => {
      if (g["Name"] !== SANDBOX_GROUP) return g;
      const own = (g["Constraints"] as Array<Record<string, unknown>> | undefined) ?? [];
      const avoid = nodes.map((n) => ({ LTarget: NODE_ID_ATTRIBUTE, Operand: "!=", RTarget: n }));
      const { Constraints: _dropped, ...rest } = g;
      return own.length + avoid.length ? { ...rest, Constraints: [...own, ...avoid] } : rest;
    }),
  };
}

/** Deployment states in which Nomad refuses scale calls (structs.Deployment.Active()). */
const ACTIVE_DEPLOYMENT = new Set(["running", "paused", "blocked", "unblocking", "pending", "initializing"]);

/**
 * Waits (blocking queries on GET /v1/job/:id/deployment) until the job's latest deployment
 * is no longer active, or the deadline (performance.now() ms) passes.
 */
export async function waitForDeploymentEnd(
  client: NomadClient,
  jobId: string,
  options: { deadline: number; signal: AbortSignal; stopping: () => boolean; logger: Logger },
): Promise<void> {
  let index = 0;
  let logged = false;
  while (!options.stopping() && performance.now() < options.deadline) {
    const { deployment, index: next } = await client.latestDeployment(jobId, {
      index,
      waitMs: Math.max(1_000, Math.min(10_000, options.deadline - performance.now())),
      signal: options.signal,
    });
    if (!deployment || !ACTIVE_DEPLOYMENT.has(deployment.Status ?? "")) return;
    if (!logged) {
      logged = true;
      options.logger.warn(
        { job: jobId, deployment: deployment.ID, status: deployment.Status, jobVersion: deployment.JobVersion },
        "nomad provisioner: scaling is blocked by the job's active deployment (a job version with an update block); scaling once it ends",
      );
    }
    // A server that does not block would make this a busy loop.
    if (next === index) await sleep(500, options.signal);
    index = next < index ? 0 : next;
  }
}

/** Summarises an evaluation's FailedTGAllocs (AllocMetric) in a line, or undefined when placement did not fail. */
export function describePlacementFailure(evaluation: Evaluation | undefined): string | undefined {
  const failed = evaluation?.FailedTGAllocs;
  if (!failed || Object.keys(failed).length === 0) return undefined;
  const parts: string[] = [];
  for (const [group, metric] of Object.entries(failed)) {
    const m = metric as Record<string, unknown>;
    const bits: string[] = [];
    if (typeof m["NodesEvaluated"] === "number") bits.push(`${m["NodesEvaluated"]} nodes evaluated`);
    const available = m["NodesAvailable"] as Record<string, number> | null | undefined;
    if (available && Object.values(available).every((n) => n === 0)) bits.push(`no nodes available in the datacenters ${Object.keys(available).map((d) => `"${d}"`).join(", ")}`);
    for (const key of ["DimensionExhausted", "ConstraintFiltered", "ClassExhausted", "QuotaExhausted"]) {
      const v = m[key];
      if (v && typeof v === "object" && Object.keys(v).length) bits.push(`${key}: ${Object.entries(v).map(([k, n]) => `${k} (${String(n)})`).join(", ")}`);
      else if (Array.isArray(v) && v.length) bits.push(`${key}: ${v.join(", ")}`);
    }
    if (typeof m["CoalescedFailures"] === "number" && (m["CoalescedFailures"] as number) > 0) bits.push(`${(m["CoalescedFailures"] as number) + 1} allocations unplaced`);
    parts.push(`group ${group}: ${bits.join("; ") || "no feasible node"}`);
  }
  return parts.join(" | ");
}

/** What to do about a placement failure: datacenters no node is in, a task driver no node has, constraints, or too little capacity. */
export function placementAdvice(failure: string, driver?: string): string {
  if (/missing drivers/.test(failure)) {
    return `No node has the job's task driver${driver ? ` '${driver}'` : ""} enabled: set pool.nomad.driver (docker, exec or raw_exec; --driver for the executor service, --set pool.nomad.driver=… for a run) to one the clients run, or enable it in the clients' plugin config; \`nomad node status -verbose\` lists each node's drivers.`;
  }
  if (/no nodes available in the datacenters/.test(failure)) {
    return 'Check the job\'s datacenters (pool.nomad.datacenters in the env config, --datacenters for the executor service; default ["dc1"], every agent\'s default; "*" needs Nomad 1.6 or newer): `nomad node status` lists the nodes\' datacenters.';
  }
  if (/ConstraintFiltered/.test(failure) && !/DimensionExhausted/.test(failure)) {
    return "No node meets the job's constraints: check pool.nomad.constraints (and datacenters, nodePool) in the env config or --set pool.nomad.constraints=…; `nomad node status -verbose` lists the nodes' attributes.";
  }
  return (
    "Add client capacity, or lower what each container asks for: pool.nomad.cpu (MHz, default 1000) and pool.nomad.memoryMb " +
    "(--cpu / --memory-mb for the executor service, --set pool.nomad.cpu=… for a run), or fewer containers (pool.maxContainers / pool.minContainers)."
  );
}
