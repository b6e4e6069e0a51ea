/**
 * The last `size` latencies, for p50/p99 on status pages (Prometheus histograms keep the
 * full distribution). One percentile formula for the whole project: nearest rank.
 */
export class LatencyWindow {
  private readonly values: Float64Array;
  private filled = 0;
  private cursor = 0;
  /** Every value ever recorded, including those the window has dropped. */
  count = 0;

  constructor(readonly size = 4096) {
    if (!Number.isInteger(size) || size < 1) throw new RangeError(`a latency window needs a whole size >= 1, got ${size}`);
    this.values = new Float64Array(size);
  }

  record(ms: number): void {
    this.values[this.cursor] = ms;
    this.cursor = (this.cursor + 1) % this.size;
    if (this.filled < this.size) this.filled++;
    this.count++;
  }

  /** p50 and p99 of the window (0 when empty) and the count of all values recorded. */
  summary(): { p50: number; p99: number; count: number } {
    const sorted = Array.from(this.values.subarray(0, this.filled)).sort((a, b) => a - b);
    return { p50: percentile(sorted, 0.5), p99: percentile(sorted, 0.99), count: this.count };
  }
}

/** Nearest-rank percentile `q` (0..1] of ascending `sorted` values; 0 for none. */
export function percentile(sorted: ArrayLike<number>, q: number): number {
  const n = sorted.length;
  if (n === 0) return 0;
  return sorted[Math.min(n - 1, Math.max(0, Math.ceil(q * n) - 1))]!;
}
