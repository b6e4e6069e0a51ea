import type { NomadClient } from "../nomad/client.js";
import { META_CREATED, META_OWNER, META_SLOTPOOL, META_SLOTS, SANDBOX_GROUP } from "../nomad/job.js";
import { isHeartbeat } from "../nomad/ownership.js";
import { SlotpoolError } from "../protocol/errors.js";

/**
 * What `slotpool status` shows an operator: the executor service's own view (queue, totals,
 * pool counts) and/or Nomad's (slotpool jobs found by Meta, their allocations by client
 * status, the sandbox group's scale status). Each source is fetched independently so one
 * being down does not hide the other.
 */

export class StatusSourceError extends SlotpoolError {
  override name = "StatusSourceError";
  constructor(
    readonly source: "executor" | "nomad",
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

export interface ExecutorStatus {
  url: string;
  queue_size?: number;
  total_requests?: number;
  total_errors?: number;
  in_flight?: number;
  trajectories?: number;
  pool?: {
    containers?: Record<string, number>;
    slots?: Record<string, number>;
    waiting?: number;
    targetContainers?: number;
    scaleEvents?: number;
    acquireLatencyMs?: { p50?: number; p99?: number; count?: number };
  } | null;
  [key: string]: unknown;
}

export interface NomadJobStatus {
  id: string;
  status: string;
  owner: string;
  created: string;
  slotsPerContainer: string;
  /** Allocations by client status (running, pending, failed, lost, complete). */
  allocations: Record<string, number>;
  /** The sandbox group's scale status, when Nomad answered it. */
  scale: { desired?: number; placed?: number; running?: number; healthy?: number; unhealthy?: number; lastEvent?: string } | null;
}

export interface NomadStatus {
  address: string;
  jobs: NomadJobStatus[];
}

export interface StatusReport {
  executor?: ExecutorStatus;
  nomad?: NomadStatus;
  errors: StatusSourceError[];
}

/** GET <url>/status of an executor service, bounded by `timeoutMs`. */
export async function fetchExecutorStatus(url: string, token: string | undefined, timeoutMs = 5_000): Promise<ExecutorStatus> {
  const base = url.replace(/\/+$/, "");
  let res: Response;
  try {
    res = await fetch(`${base}/status`, {
      headers: token ? { authorization: `Bearer ${token}` } : {},
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    const cause = (err as { cause?: { code?: string; message?: string } }).cause;
    const why = (err as Error).name === "TimeoutError" ? `no answer within ${timeoutMs} ms` : (cause?.code ?? cause?.message ?? (err as Error).message);
    throw new StatusSourceError("executor", `cannot reach the executor service at ${base} (${why}): is it running, and is --executor-url right?`, { cause: err });
  }
  const text = await res.text();
  if (res.status === 401 || res.status === 403) {
    throw new StatusSourceError("executor", `the executor service at ${base} refused the request (HTTP ${res.status}): pass its token with --token or TOOL_EXECUTOR_TOKEN`);
  }
  if (!res.ok) throw new StatusSourceError("executor", `the executor service at ${base} answered HTTP ${res.status} to GET /status: ${text.slice(0, 200)}`);
  try {
    return { url: base, ...(JSON.parse(text) as Record<string, unknown>) };
  } catch {
    throw new StatusSourceError("executor", `the executor service at ${base} answered GET /status with something that is not JSON: ${text.slice(0, 120)}`);
  }
}

/** slotpool's jobs in Nomad (Meta slotpool = "true") with allocations and scale status. */
export async function fetchNomadStatus(client: NomadClient, options: { prefix?: string } = {}): Promise<NomadStatus> {
  let stubs;
  try {
    stubs = await client.listJobs({ meta: true, ...(options.prefix ? { prefix: options.prefix } : {}) });
  } catch (err) {
    throw new StatusSourceError("nomad", `cannot list jobs from Nomad at ${client.address}: ${(err as Error).message}`, { cause: err });
  }
  const jobs: NomadJobStatus[] = [];
  for (const stub of stubs) {
    if (stub.Meta?.[META_SLOTPOOL] !== "true") continue;
    const allocations: Record<string, number> = {};
    try {
      for (const a of (await client.jobAllocations(stub.ID)).allocations) {
        // Told to stop but not stopped yet: "stopping", not running (nor counted as capacity).
        const s = a.DesiredStatus === "stop" && (a.ClientStatus === "running" || a.ClientStatus === "pending") ? "stopping" : (a.ClientStatus ?? "unknown");
        allocations[s] = (allocations[s] ?? 0) + 1;
      }
    } catch {
      // Shown as a count so the row still prints; the job itself was listed fine.
      allocations["unreadable"] = 1;
    }
    let scale: NomadJobStatus["scale"] = null;
    try {
      const st = await client.scaleStatus(stub.ID);
      const g = st?.TaskGroups?.[SANDBOX_GROUP];
      if (g) {
        // Nomad lists a group's events newest first; owner heartbeats are not scale events.
        const last = g.Events?.find((e) => !isHeartbeat(e));
        scale = {
          desired: g.Desired,
          placed: g.Placed,
          running: g.Running,
          healthy: g.Healthy,
          unhealthy: g.Unhealthy,
          ...(last ? { lastEvent: `${last.Error ? "error: " : ""}${last.Message ?? ""}${last.Count != null ? ` (count ${last.PreviousCount ?? "?"} → ${last.Count})` : ""}` } : {}),
        };
      }
    } catch {
      scale = null;
    }
    jobs.push({
      id: stub.ID,
      status: stub.Stop ? `${stub.Status ?? "?"} (stopped)` : (stub.Status ?? "?"),
      owner: stub.Meta?.[META_OWNER] ?? "?",
      created: stub.Meta?.[META_CREATED] ?? "?",
      slotsPerContainer: stub.Meta?.[META_SLOTS] ?? "?",
      allocations,
      scale,
    });
  }
  return { address: client.address, jobs };
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => (r[c] ?? "").length)));
  return rows.map((r) => r.map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]!))).join("  ")).join("\n");
}

function counts(rec: Record<string, number> | undefined, order: string[]): string {
  if (!rec) return "-";
  const keys = [...order.filter((k) => k in rec), ...Object.keys(rec).filter((k) => !order.includes(k) && k !== "total")];
  return keys.map((k) => `${k} ${rec[k]}`).join(", ") || "none";
}

/** Plain-text rendering for a terminal. */
export function renderStatus(report: StatusReport): string {
  const out: string[] = [];
  const e = report.executor;
  if (e) {
    out.push(`executor service ${e.url}`);
    out.push(`  calls: ${e.total_requests ?? "?"} total, ${e.total_errors ?? "?"} errors, ${e.queue_size ?? "?"} queued, ${e.in_flight ?? "?"} in flight; trajectories: ${e.trajectories ?? "?"}`);
    const p = e.pool;
    if (p) {
      out.push(`  slots: ${counts(p.slots, ["held", "free", "lost"])}${p.slots?.["total"] !== undefined ? ` (of ${p.slots["total"]})` : ""}; waiting acquires: ${p.waiting ?? 0}`);
      out.push(`  containers: ${counts(p.containers, ["ready", "starting", "draining", "lost"])}; target ${p.targetContainers ?? "?"}; scale events: ${p.scaleEvents ?? 0}`);
      if (p.acquireLatencyMs) out.push(`  acquire latency: p50 ${fmtMs(p.acquireLatencyMs.p50)}, p99 ${fmtMs(p.acquireLatencyMs.p99)} over ${p.acquireLatencyMs.count ?? 0}`);
    } else out.push("  pool: not reported");
  }
  const n = report.nomad;
  if (n) {
    if (out.length) out.push("");
    out.push(`nomad ${n.address}: ${n.jobs.length} slotpool job(s)`);
    if (n.jobs.length) {
      const rows = [["JOB", "STATUS", "SLOTS/ALLOC", "SCALE (desired/placed/running/healthy)", "ALLOCATIONS", "OWNER", "CREATED"]];
      for (const j of n.jobs) {
        const s = j.scale ? `${j.scale.desired ?? "?"}/${j.scale.placed ?? "?"}/${j.scale.running ?? "?"}/${j.scale.healthy ?? "?"}` : "-";
        rows.push([j.id, j.status, j.slotsPerContainer, s, counts(j.allocations, ["running", "pending", "failed", "lost", "complete"]), j.owner, j.created]);
      }
      out.push(table(rows));
      for (const j of n.jobs) if (j.scale?.lastEvent) out.push(`  ${j.id}: last scale event: ${j.scale.lastEvent}`);
    }
  }
  for (const err of report.errors) {
    if (out.length) out.push("");
    out.push(`error (${err.source}): ${err.message}`);
  }
  return out.join("\n") + "\n";
}

function fmtMs(v: number | undefined): string {
  return v === undefined ? "?" : `${Math.round(v * 10) / 10} ms`;
}
