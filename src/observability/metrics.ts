/**
 * A small Prometheus text-format registry: counters, gauges and histograms with labels.
 * Hand-written because the exposition format is tiny and the hot path (every tool call)
 * must not pay for a general-purpose client.
 */

type Labels = Record<string, string | number>;

function labelKey(labels: Labels | undefined): string {
  if (!labels) return "";
  const keys = Object.keys(labels).sort();
  if (keys.length === 0) return "";
  return keys.map((k) => `${k}="${escapeLabel(String(labels[k]))}"`).join(",");
}

function escapeLabel(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"');
}

interface Metric {
  readonly name: string;
  readonly help: string;
  render(): string;
}

export class Counter implements Metric {
  private readonly values = new Map<string, number>();
  constructor(
    readonly name: string,
    readonly help: string,
  ) {}
  inc(labels?: Labels, by = 1): void {
    const key = labelKey(labels);
    this.values.set(key, (this.values.get(key) ?? 0) + by);
  }
  get(labels?: Labels): number {
    return this.values.get(labelKey(labels)) ?? 0;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    if (this.values.size === 0) lines.push(`${this.name} 0`);
    for (const [key, value] of this.values) lines.push(`${this.name}${key ? `{${key}}` : ""} ${value}`);
    return lines.join("\n");
  }
}

export class Gauge implements Metric {
  private readonly values = new Map<string, number>();
  constructor(
    readonly name: string,
    readonly help: string,
    /** Evaluated at scrape time, for values that live elsewhere (slot states, queue sizes). */
    private readonly collect?: () => Array<{ labels?: Labels; value: number }>,
  ) {}
  set(value: number, labels?: Labels): void {
    this.values.set(labelKey(labels), value);
  }
  inc(labels?: Labels, by = 1): void {
    const key = labelKey(labels);
    this.values.set(key, (this.values.get(key) ?? 0) + by);
  }
  dec(labels?: Labels, by = 1): void {
    this.inc(labels, -by);
  }
  get(labels?: Labels): number {
    return this.values.get(labelKey(labels)) ?? 0;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} gauge`];
    const values = new Map(this.values);
    if (this.collect) for (const s of this.collect()) values.set(labelKey(s.labels), s.value);
    if (values.size === 0) lines.push(`${this.name} 0`);
    for (const [key, value] of values) lines.push(`${this.name}${key ? `{${key}}` : ""} ${value}`);
    return lines.join("\n");
  }
}

/** Default buckets in seconds: 0.5 ms … 60 s, for tool calls and acquires alike. */
export const DEFAULT_BUCKETS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
];

interface HistogramSeries {
  counts: number[];
  sum: number;
  count: number;
}

export class Histogram implements Metric {
  private readonly series = new Map<string, HistogramSeries>();
  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: readonly number[] = DEFAULT_BUCKETS,
  ) {}
  /** Records one observation, in seconds. */
  observe(seconds: number, labels?: Labels): void {
    const key = labelKey(labels);
    let s = this.series.get(key);
    if (!s) {
      s = { counts: new Array<number>(this.buckets.length).fill(0), sum: 0, count: 0 };
      this.series.set(key, s);
    }
    for (let i = 0; i < this.buckets.length; i++) if (seconds <= this.buckets[i]!) s.counts[i]!++;
    s.sum += seconds;
    s.count++;
  }
  /** Approximate quantile (upper bucket bound) over all label sets; NaN when empty. */
  quantile(q: number): number {
    const total = new Array<number>(this.buckets.length).fill(0);
    let count = 0;
    for (const s of this.series.values()) {
      s.counts.forEach((c, i) => (total[i]! += c));
      count += s.count;
    }
    if (count === 0) return Number.NaN;
    const rank = q * count;
    for (let i = 0; i < this.buckets.length; i++) if (total[i]! >= rank) return this.buckets[i]!;
    return Number.POSITIVE_INFINITY;
  }
  snapshot(): { count: number; sum: number } {
    let count = 0;
    let sum = 0;
    for (const s of this.series.values()) {
      count += s.count;
      sum += s.sum;
    }
    return { count, sum };
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    for (const [key, s] of this.series) {
      const sep = key ? "," : "";
      this.buckets.forEach((b, i) => lines.push(`${this.name}_bucket{${key}${sep}le="${b}"} ${s.counts[i]}`));
      lines.push(`${this.name}_bucket{${key}${sep}le="+Inf"} ${s.count}`);
      lines.push(`${this.name}_sum${key ? `{${key}}` : ""} ${s.sum}`);
      lines.push(`${this.name}_count${key ? `{${key}}` : ""} ${s.count}`);
    }
    return lines.join("\n");
  }
}

export class MetricsRegistry {
  private readonly metrics: Metric[] = [];
  counter(name: string, help: string): Counter {
    return this.add(new Counter(name, help));
  }
  gauge(name: string, help: string, collect?: () => Array<{ labels?: Labels; value: number }>): Gauge {
    return this.add(new Gauge(name, help, collect));
  }
  histogram(name: string, help: string, buckets?: readonly number[]): Histogram {
    return this.add(new Histogram(name, help, buckets));
  }
  /** Prometheus text exposition format 0.0.4. */
  render(): string {
    return this.metrics.map((m) => m.render()).join("\n") + "\n";
  }
  private add<M extends Metric>(metric: M): M {
    if (this.metrics.some((m) => m.name === metric.name)) {
      throw new Error(`metric ${metric.name} is registered twice`);
    }
    this.metrics.push(metric);
    return metric;
  }
}

export const PROMETHEUS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";
