/**
 * `slotpool jobs prune`: finds slotpool's sandbox jobs (Meta slotpool = "true") that are
 * still running, e.g. left behind by a run that crashed before it could stop its job, and
 * stops them. Nomad settings come from NOMAD_* like the nomad CLI.
 */
import { NomadClient } from "../nomad/client.js";
import { NomadError } from "../nomad/errors.js";
import { META_CREATED, META_OWNER, META_SLOTPOOL, SANDBOX_GROUP } from "../nomad/job.js";
import { ownerLiveness } from "../nomad/ownership.js";
import type { JobListStub } from "../nomad/schemas.js";
import { CliUsageError, boolFlag, intFlag, parseFlags, stringFlag } from "./usage.js";

const HELP = `usage: slotpool jobs prune [options]

Lists the slotpool sandbox jobs in Nomad (jobs whose Meta has slotpool = "true") that are
still running and whose run is gone (no owner heartbeat for 45 s: orphans), and stops them.
A live run's job is left alone unless --include-live; narrow the selection with --prefix,
--owner or --older-than-min.

options:
  --dry-run                list what would be stopped, stop nothing
  --prefix P               only jobs whose ID starts with P
  --owner O                only jobs started by O (Meta slotpool.owner, user@host)
  --older-than-min N       only jobs created more than N minutes ago (Meta slotpool.created)
  --purge                  also purge the jobs (remove them from Nomad at once)
  --include-live           also jobs whose run is alive (stops running pools' containers)
  --owner-stale-s N        a run not heard from for N s is gone (default 45)

environment: NOMAD_ADDR, NOMAD_TOKEN, NOMAD_NAMESPACE, NOMAD_REGION, NOMAD_CACERT,
NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY
`;

export interface PruneOptions {
  dryRun?: boolean;
  prefix?: string;
  owner?: string;
  olderThanMs?: number;
  purge?: boolean;
  /** Also jobs whose owner run is alive (default: orphans only). */
  includeLive?: boolean;
  /** A run not heard from for this long is gone (default OWNER_STALE_MS, 45 s). */
  ownerStaleMs?: number;
  now?: number;
}

export interface PrunedJob {
  id: string;
  status: string;
  owner: string;
  created: string;
  running: number;
  stopped: boolean;
  error?: string;
  /** Why the job was not stopped although it matched: its run is alive (without --include-live). */
  leftAlone?: string;
}

/** Finds slotpool jobs matching the filters and (unless dryRun) stops them; a live run's job is listed as left alone, with why. */
export async function pruneJobs(client: NomadClient, options: PruneOptions = {}): Promise<PrunedJob[]> {
  const stubs = await client.listJobs({ meta: true, ...(options.prefix ? { prefix: options.prefix } : {}) });
  const now = options.now ?? Date.now();
  const selected = stubs.filter((j) => isCandidate(j, options, now));
  const out: PrunedJob[] = [];
  for (const job of selected) {
    // A live run's job is its own: stopping it would kill that run's containers mid-trajectory.
    const alive = !options.includeLive && !job.Stop ? await ownerAlive(client, job, now, options.ownerStaleMs) : undefined;
    const entry: PrunedJob = {
      id: job.ID,
      status: job.Status ?? "?",
      owner: job.Meta?.[META_OWNER] ?? "?",
      created: job.Meta?.[META_CREATED] ?? "?",
      running: runningAllocations(job),
      stopped: false,
    };
    if (alive?.alive) {
      // Said, not silently skipped: an operator looking for their leak sees why this one stays.
      const ago = alive.lastSeenAgoMs !== undefined ? `heard from ${Math.round(alive.lastSeenAgoMs / 1000)} s ago` : "alive";
      out.push({ ...entry, leftAlone: `left alone: its run is alive (${ago}); --include-live stops it too` });
      continue;
    }
    if (!options.dryRun) {
      try {
        await client.deregisterJob(job.ID, { purge: options.purge ?? false });
        entry.stopped = true;
      } catch (err) {
        entry.error = err instanceof Error ? err.message : String(err);
      }
    }
    out.push(entry);
  }
  return out;
}

async function ownerAlive(client: NomadClient, job: JobListStub, now: number, staleMs: number | undefined): Promise<{ alive: boolean; lastSeenAgoMs: number | undefined }> {
  const scale = await client.scaleStatus(job.ID);
  return ownerLiveness(job.Meta, scale, SANDBOX_GROUP, { now, ...(staleMs !== undefined ? { staleMs } : {}) });
}

function isCandidate(job: JobListStub, options: PruneOptions, now: number): boolean {
  if (job.Meta?.[META_SLOTPOOL] !== "true") return false;
  // Stopped jobs hold no allocations; with --purge they are removed too.
  if ((job.Stop || job.Status === "dead") && !options.purge) return false;
  if (options.prefix && !job.ID.startsWith(options.prefix)) return false;
  if (options.owner && job.Meta?.[META_OWNER] !== options.owner) return false;
  if (options.olderThanMs !== undefined) {
    const created = Date.parse(job.Meta?.[META_CREATED] ?? "");
    if (!Number.isFinite(created) || now - created < options.olderThanMs) return false;
  }
  return true;
}

function runningAllocations(job: JobListStub): number {
  let n = 0;
  for (const g of Object.values(job.JobSummary?.Summary ?? {})) n += (g.Running ?? 0) + (g.Starting ?? 0) + (g.Queued ?? 0);
  return n;
}

export function formatPruneReport(jobs: PrunedJob[], dryRun: boolean): string {
  if (jobs.length === 0) return "no slotpool jobs to prune\n";
  const rows = [["JOB", "STATUS", "ALLOCS", "OWNER", "CREATED", dryRun ? "ACTION" : "RESULT"]];
  for (const j of jobs) {
    const result = j.leftAlone ?? (dryRun ? "would stop" : j.error ? `failed: ${j.error}` : "stopped");
    rows.push([j.id, j.status, String(j.running), j.owner, j.created, result]);
  }
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const lines = rows.map((r) => r.map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]!))).join("  "));
  const failed = jobs.filter((j) => j.error).length;
  const live = jobs.filter((j) => j.leftAlone).length;
  const acted = jobs.length - live;
  const leftAlone = live ? `; ${live} left alone (a live run's job)` : "";
  const summary = dryRun
    ? `${acted} slotpool job(s) would be stopped (dry run: nothing changed)${leftAlone}`
    : `${acted - failed} slotpool job(s) stopped${failed ? `, ${failed} failed` : ""}${leftAlone}`;
  return `${lines.join("\n")}\n${summary}\n`;
}

export async function run(argv: string[]): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === "--help" || sub === "-h") {
    process.stdout.write(HELP);
    return sub === undefined ? 2 : 0;
  }
  if (sub !== "prune") throw new CliUsageError(`unknown jobs subcommand '${sub}'; expected 'prune'\n\n${HELP}`);
  const flags = parseFlags(
    rest,
    {
      "dry-run": { type: "boolean" },
      prefix: { type: "string" },
      owner: { type: "string" },
      "older-than-min": { type: "string" },
      purge: { type: "boolean" },
      "include-live": { type: "boolean" },
      "owner-stale-s": { type: "string" },
    },
    HELP,
  );
  if (!flags) return 0;
  const dryRun = boolFlag(flags, "dry-run");
  const olderThan = stringFlag(flags, "older-than-min");
  const options: PruneOptions = {
    dryRun,
    purge: boolFlag(flags, "purge"),
    includeLive: boolFlag(flags, "include-live"),
    ...(stringFlag(flags, "owner-stale-s") !== undefined ? { ownerStaleMs: intFlag("owner-stale-s", stringFlag(flags, "owner-stale-s")!, 1) * 1000 } : {}),
    ...(stringFlag(flags, "prefix") ? { prefix: stringFlag(flags, "prefix")! } : {}),
    ...(stringFlag(flags, "owner") ? { owner: stringFlag(flags, "owner")! } : {}),
    ...(olderThan !== undefined ? { olderThanMs: intFlag("older-than-min", olderThan, 0) * 60_000 } : {}),
  };
  const client = NomadClient.fromEnv();
  try {
    const jobs = await pruneJobs(client, options);
    process.stdout.write(formatPruneReport(jobs, dryRun));
    return jobs.some((j) => j.error) ? 1 : 0;
  } catch (err) {
    if (err instanceof NomadError) {
      process.stderr.write(`slotpool jobs prune: ${err.message}\n`);
      return 1;
    }
    throw err;
  } finally {
    await client.close();
  }
}
