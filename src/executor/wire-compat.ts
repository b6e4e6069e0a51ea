/**
 * The original's Python clients serialise optional fields as `null` (pydantic
 * `model_dump()`), where our schemas expect them absent. Dropping nulls at the door keeps
 * those clients working unchanged without loosening the shared schemas.
 */
export function dropNulls(body: unknown): unknown {
  if (body === null || typeof body !== "object" || Array.isArray(body)) return body;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(body as Record<string, unknown>)) {
    if (v === null) continue;
    // One level down as well: the nested tool call ({"uniq_id": null}).
    out[k] = k === "tool" ? dropNulls(v) : v;
  }
  return out;
}
