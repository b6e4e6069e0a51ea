/** Dotted paths into a nested config object ("pool.nomad.image"): how flags land in their section. */

/** Sets `path` in `config`, creating the sections on the way (a section already there is kept). */
export function setConfigPath(config: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split(".");
  let at = config;
  for (const k of keys.slice(0, -1)) {
    const next = at[k];
    if (next === null || typeof next !== "object" || Array.isArray(next)) at[k] = {};
    at = at[k] as Record<string, unknown>;
  }
  at[keys[keys.length - 1]!] = value;
}

/** The value at `path`, or undefined. */
export function getConfigPath(config: Record<string, unknown>, path: string): unknown {
  let at: unknown = config;
  for (const k of path.split(".")) {
    if (at === null || typeof at !== "object") return undefined;
    at = (at as Record<string, unknown>)[k];
  }
  return at;
}
