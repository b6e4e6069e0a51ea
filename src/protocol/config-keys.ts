// Unknown keys of a config object, named with where they moved or the nearest known key:
// shared by the env config (env/config.ts) and the tool backend config (executor/backend-config.ts).
import type { z } from "zod";

/**
 * The keys of `config` that `schema` does not know, at any depth (sections included), each
 * with where it moved or the nearest known one, e.g. "unknown key 'groupSzie' (did you mean
 * 'groupSize'?)", "modelUrl moved to model.url". A mistyped key would otherwise be dropped
 * by zod and the run would use the default without a word.
 */
export function unknownConfigKeys(schema: z.ZodType, config: Record<string, unknown>, moved: Readonly<Record<string, string>> = {}, prefix = ""): string[] {
  const shape = objectShape(schema);
  if (!shape) return [];
  const known = Object.keys(shape);
  const problems: string[] = [];
  for (const [k, v] of Object.entries(config)) {
    const path = `${prefix}${k}`;
    if (known.includes(k)) {
      // A section: its own keys are checked the same way.
      if (v !== null && typeof v === "object" && !Array.isArray(v)) problems.push(...unknownConfigKeys(shape[k] as z.ZodType, v as Record<string, unknown>, {}, `${path}.`));
      continue;
    }
    const to = moved[k];
    if (to !== undefined) {
      problems.push(`${path} moved to ${to}`);
      continue;
    }
    const near = nearestName(k, known);
    problems.push(`unknown key '${path}'${near ? ` (did you mean '${prefix}${near}'?)` : ""}`);
  }
  return problems;
}

function objectShape(schema: z.ZodType): Record<string, unknown> | undefined {
  const def = (schema as unknown as { _zod?: { def?: { shape?: Record<string, unknown>; in?: z.ZodType; innerType?: z.ZodType; catchall?: { _zod?: { def?: { type?: string } } } } } })._zod?.def;
  if (!def) return undefined;
  if (def.shape) {
    // A record-like object (catchall other than never) takes any key.
    const catchall = def.catchall?._zod?.def?.type;
    return catchall && catchall !== "never" ? undefined : def.shape;
  }
  // Pipes and wrappers (transform, default, prefault, optional): the object is inside.
  const inner = def.in ?? def.innerType;
  return inner ? objectShape(inner) : undefined;
}

/** The candidate closest to `name` by edit distance (case-insensitive), if it is reasonably close. */
export function nearestName(name: string, candidates: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const c of candidates) {
    const d = editDistance(name.toLowerCase(), c.toLowerCase());
    if (d < bestDistance) {
      bestDistance = d;
      best = c;
    }
  }
  return best !== undefined && bestDistance <= Math.max(2, Math.floor(name.length / 3)) ? best : undefined;
}

function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j]! + 1, cur[j - 1]! + 1, prev[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length]!;
}
