/**
 * Log lines that say the same thing again — a dead model server makes every trajectory log
 * the same warning — are written once; the repeats are counted, and `flush()` says how many
 * there were ("× 48"). Two lines are the same when their level, message and facts are, apart
 * from what names one occurrence (a trajectory id, an attempt number, the time).
 */

/** Fields that tell one occurrence from another, not what happened. */
const OCCURRENCE_KEYS = new Set(["time", "pid", "hostname", "v", "trajectoryId", "trajectory_id", "attempt", "turns", "written", "sent", "filtered", "durationMs"]);
const UUID = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;

interface Seen {
  /** The first line, parsed (the flush line is made from it). */
  entry: Record<string, unknown>;
  count: number;
}

export class RepeatedLines {
  private readonly seen = new Map<string, Seen>();

  constructor(private readonly out: { write(line: string): unknown }) {}

  write(line: string): boolean {
    let entry: Record<string, unknown>;
    try {
      entry = JSON.parse(line) as Record<string, unknown>;
    } catch {
      this.out.write(line);
      return true;
    }
    const key = occurrenceKey(entry);
    const seen = this.seen.get(key);
    if (seen) {
      seen.count++;
      return true;
    }
    this.seen.set(key, { entry, count: 1 });
    this.out.write(line);
    return true;
  }

  /** One line for each message that came more than once since the last flush: its count in all. */
  flush(): void {
    for (const [key, s] of this.seen) {
      if (s.count > 1) {
        const { msg, level, name } = s.entry;
        this.out.write(JSON.stringify({ level, time: Date.now(), name, msg: `${String(msg ?? "")} — × ${s.count} in all (the first is logged above; the repeats were not)`, repeated: s.count }) + "\n");
      }
      this.seen.delete(key);
    }
  }
}

function occurrenceKey(entry: Record<string, unknown>): string {
  const facts = Object.entries(entry)
    .filter(([k]) => !OCCURRENCE_KEYS.has(k))
    // A stack's frames below the env's own (env/env-stack.ts: "… then N frames of slotpool") vary from one occurrence to the next.
    .map(([k, v]): [string, unknown] => (k === "stack" && typeof v === "string" ? [k, v.split("\n    … then ")[0]] : [k, v]))
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify(facts).replace(UUID, "<id>");
}
