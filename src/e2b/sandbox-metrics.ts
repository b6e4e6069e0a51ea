import type { SlotUsageSample } from "./slot-processes.js";

/** What the metrics keep per sandbox: its start (the first sample's CPU share counts from it). */
interface Measured {
  readonly startedAt: Date;
}

/** E2B's SandboxMetric. */
export interface SandboxMetric {
  timestamp: string;
  timestampUnix: number;
  cpuCount: number;
  cpuUsedPct: number;
  memUsed: number;
  memTotal: number;
  memCache: number;
  diskUsed: number;
  diskTotal: number;
}

/** Samples kept per sandbox (one an E2B collection interval, 5 s, would be an hour's). */
const MAX_SAMPLES = 720;
/** A sample younger than this is answered again instead of asking the sandbox server. */
const FRESH_MS = 1000;

/**
 * E2B's sandbox metrics (`GET /sandboxes/{id}/metrics?start=&end=`, the SDKs' `getMetrics`):
 * each request samples the sandbox's slot (its processes' memory and CPU time, its disk) unless
 * the last sample is under a second old, keeps the sample, and answers those in the asked
 * interval (seconds, inclusive). CPU use is the share of one CPU between a sample and the one
 * before (the first: since the sandbox started); `cpuCount` is the nominal 1 every sandbox
 * reports. `memCache` is 0 (page cache is not counted per slot).
 */
export class SandboxMetrics {
  private readonly samples = new WeakMap<Measured, SandboxMetric[]>();
  private readonly last = new WeakMap<Measured, SlotUsageSample>();

  async metrics(s: Measured, sample: () => Promise<SlotUsageSample>, startS?: number, endS?: number): Promise<SandboxMetric[]> {
    const kept = this.samples.get(s) ?? [];
    const newest = kept.at(-1);
    if (!newest || Date.now() - newest.timestampUnix * 1000 >= FRESH_MS) {
      const u = await sample();
      const prev = this.last.get(s);
      const since = prev ?? { timestamp: s.startedAt.getTime(), cpu_seconds: 0 };
      const wallS = Math.max(0.001, (u.timestamp - since.timestamp) / 1000);
      const cpuUsedPct = Math.max(0, Math.min(100, ((u.cpu_seconds - since.cpu_seconds) / wallS) * 100));
      kept.push({
        timestamp: new Date(u.timestamp).toISOString(),
        timestampUnix: Math.floor(u.timestamp / 1000),
        cpuCount: 1,
        cpuUsedPct: Math.round(cpuUsedPct * 100) / 100,
        memUsed: u.mem_used,
        memTotal: u.mem_total,
        memCache: 0,
        diskUsed: u.disk_used,
        diskTotal: u.disk_total,
      });
      if (kept.length > MAX_SAMPLES) kept.splice(0, kept.length - MAX_SAMPLES);
      this.samples.set(s, kept);
      this.last.set(s, u);
    }
    return kept.filter((m) => (startS === undefined || m.timestampUnix >= startS) && (endS === undefined || m.timestampUnix <= endS));
  }
}
