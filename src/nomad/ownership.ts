/**
 * Who owns a sandbox job, and whether that owner is alive. A run marks the job it creates
 * with its run id (Meta `slotpool.run`) and, while it runs, records a heartbeat: a scaling
 * event without a count (`POST /v1/job/:id/scale` with no Count only records the event: no
 * new job version, no evaluation, no allocation touched), carrying the run id in its Meta.
 * A job Meta change would not do: Nomad passes job Meta to the tasks, so changing it
 * replaces every allocation. The owner is alive while its newest event (heartbeat or scale
 * call) or the job's creation is younger than the staleness bound.
 */
import { META_CREATED } from "./job.js";
import type { JobScaleStatus } from "./schemas.js";

/** Meta key: the run that owns the job (on the job and on each of its scaling events). */
export const META_RUN = "slotpool.run";
/** Message of a heartbeat event (status views leave them out of the scale history). */
export const HEARTBEAT_MESSAGE = "slotpool: owner heartbeat";
/** How often an owner records its heartbeat. */
export const HEARTBEAT_INTERVAL_MS = 10_000;
/** An owner not heard from for this long counts as gone (several missed heartbeats). */
export const OWNER_STALE_MS = 45_000;

export interface OwnerLiveness {
  /** The owning run's id, when the job names one (jobs of older slotpools do not). */
  runId: string | undefined;
  /** Milliseconds since the owner was last heard from (event or job creation); undefined: never. */
  lastSeenAgoMs: number | undefined;
  alive: boolean;
}

/** Nomad's event times are Unix nanoseconds (the schema keeps them exact, as digit strings). */
function eventTimeMs(time: unknown): number | undefined {
  if (typeof time === "string" && /^\d+$/.test(time)) return Number(BigInt(time) / 1_000_000n);
  if (typeof time === "number" && Number.isFinite(time)) return time / 1e6;
  return undefined;
}

/** The liveness of the owner of a job with `meta`, from its scaling events. */
export function ownerLiveness(
  meta: Record<string, string> | null | undefined,
  scale: JobScaleStatus | null,
  group: string,
  options: { now?: number; staleMs?: number } = {},
): OwnerLiveness {
  const now = options.now ?? Date.now();
  const staleMs = options.staleMs ?? OWNER_STALE_MS;
  const runId = meta?.[META_RUN] || undefined;
  let last = Date.parse(meta?.[META_CREATED] ?? "");
  if (!Number.isFinite(last)) last = Number.NaN;
  for (const e of scale?.TaskGroups?.[group]?.Events ?? []) {
    // A job without a run id (older slotpool): any event is its owner's.
    if (runId !== undefined && e.Meta?.[META_RUN] !== runId) continue;
    const t = eventTimeMs(e.Time);
    if (t !== undefined && !(t <= last)) last = t;
  }
  const lastSeenAgoMs = Number.isFinite(last) ? Math.max(0, now - last) : undefined;
  return { runId, lastSeenAgoMs, alive: lastSeenAgoMs !== undefined && lastSeenAgoMs < staleMs };
}

/** Whether a scaling event is an owner heartbeat (not a count change). */
export function isHeartbeat(event: { Message?: string | undefined; Count?: number | null | undefined }): boolean {
  return event.Message === HEARTBEAT_MESSAGE && (event.Count === null || event.Count === undefined);
}
