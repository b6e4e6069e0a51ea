/**
 * Path and query of a request target, without URL parsing surprises: `new URL("//x", base)`
 * reads `//x` as a host (or throws), which must never crash a server; such targets just
 * match no route.
 */
export function requestTarget(target: string | undefined): { path: string; query: URLSearchParams } {
  const t = target ?? "/";
  const q = t.indexOf("?");
  const path = q >= 0 ? t.slice(0, q) : t;
  return { path: path || "/", query: new URLSearchParams(q >= 0 ? t.slice(q + 1) : "") };
}

/** The request's path alone (no query object built: the cheap form for routing). */
export function requestPath(target: string | undefined): string {
  const t = target ?? "/";
  const q = t.indexOf("?");
  return (q >= 0 ? t.slice(0, q) : t) || "/";
}
