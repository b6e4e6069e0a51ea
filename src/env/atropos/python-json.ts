/**
 * JSON as Python's `json.dumps(obj, ensure_ascii=False)` writes it: `", "` and `": "`
 * separators, non-ASCII kept. Atropos's process-mode JSONL lines look like this, and tools
 * that diff them against Python output expect it.
 */
export function pythonJsonDumps(value: unknown): string {
  if (value === undefined) return "null";
  if (value === null || typeof value !== "object") {
    if (typeof value === "number" && !Number.isFinite(value)) return Number.isNaN(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity";
    return JSON.stringify(value) ?? "null";
  }
  if (typeof (value as { toJSON?: unknown }).toJSON === "function") return pythonJsonDumps((value as { toJSON(): unknown }).toJSON());
  if (Array.isArray(value)) return `[${value.map(pythonJsonDumps).join(", ")}]`;
  const parts: string[] = [];
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (v === undefined || typeof v === "function") continue;
    parts.push(`${JSON.stringify(k)}: ${pythonJsonDumps(v)}`);
  }
  return `{${parts.join(", ")}}`;
}
