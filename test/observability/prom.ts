/** Minimal Prometheus text-format reader for assertions: series name → [{labels, value}]. */
export interface Series {
  labels: Record<string, string>;
  value: number;
}

export function parseProm(text: string): Map<string, Series[]> {
  const out = new Map<string, Series[]>();
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)$/.exec(line);
    if (!m) throw new Error(`not a Prometheus sample line: ${line}`);
    const labels: Record<string, string> = {};
    if (m[3]) for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]!] = l[2]!;
    const list = out.get(m[1]!) ?? [];
    list.push({ labels, value: Number(m[4]) });
    out.set(m[1]!, list);
  }
  return out;
}

/** Sum of a series' values whose labels include `match`. */
export function sum(series: Map<string, Series[]>, name: string, match: Record<string, string> = {}): number {
  return (series.get(name) ?? []).filter((s) => Object.entries(match).every(([k, v]) => s.labels[k] === v)).reduce((a, s) => a + s.value, 0);
}

/** True when `name` is exposed as a histogram (buckets with +Inf, _sum and _count). */
export function isHistogram(series: Map<string, Series[]>, name: string): boolean {
  return (series.get(`${name}_bucket`) ?? []).some((s) => s.labels["le"] === "+Inf") && series.has(`${name}_sum`) && series.has(`${name}_count`);
}
