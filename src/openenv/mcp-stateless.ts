import type { JSONRPCMessage } from "@modelcontextprotocol/sdk/types.js";

/**
 * MCP's stateless revision, 2026-07-28 (SEP-2575, SEP-2567), beside the 2025-11-25 sessions
 * of the SDK's transport: no `initialize`, no `Mcp-Session-Id`; every request names its
 * protocol version (the `MCP-Protocol-Version` header and `_meta`), `server/discover`
 * advertises the server, and results carry `resultType` (and the cache fields of cacheable
 * results). State that spans requests is a server-minted handle passed back explicitly: an
 * episode here is `_meta["dev.slotpool/episode"]` (see `episodeHandle`).
 */
export const STATELESS_VERSION = "2026-07-28";
export const SUPPORTED_VERSIONS = [STATELESS_VERSION, "2025-11-25"] as const;
export const PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion";
export const SERVER_INFO_META = "io.modelcontextprotocol/serverInfo";
/** The request `_meta` key of an episode handle: "new" begins one, a handle continues it, none is a one-call episode. */
export const EPISODE_META = "dev.slotpool/episode";
/** MCP's "unsupported protocol version" error (its data lists the versions the server speaks). */
const UNSUPPORTED_PROTOCOL_VERSION = -32022;

/** The protocol version a request without a session names, if any (header first, then `_meta`). */
export function statelessVersion(header: string | string[] | undefined, body: unknown): string | undefined {
  const h = Array.isArray(header) ? header[0] : header;
  const meta = metaOf(body);
  const v = meta?.[PROTOCOL_VERSION_META];
  return h ?? (typeof v === "string" ? v : undefined);
}

/** Whether a request is of the stateless era (a version at or past 2026-07-28; older ones are the handshake's). */
export function isStatelessRequest(version: string | undefined): boolean {
  return version !== undefined && version >= STATELESS_VERSION;
}

/** The answer to a stateless request naming a version this server does not speak; undefined when it does. */
export function unsupportedVersion(version: string, id: unknown): Record<string, unknown> | undefined {
  if (version === STATELESS_VERSION) return undefined;
  return { jsonrpc: "2.0", id: id ?? null, error: { code: UNSUPPORTED_PROTOCOL_VERSION, message: `unsupported protocol version ${version}: this server speaks ${SUPPORTED_VERSIONS.join(", ")}`, data: { supported: [...SUPPORTED_VERSIONS], requested: version } } };
}

/** `server/discover`'s result. */
export function discoverResult(name: string, instructions: string): Record<string, unknown> {
  return {
    supportedVersions: [...SUPPORTED_VERSIONS],
    capabilities: { tools: {} },
    instructions,
    resultType: "complete",
    ttlMs: 0,
    cacheScope: "private",
    _meta: { [SERVER_INFO_META]: { name: `slotpool-openenv:${name}`, version: "1" } },
  };
}

/** The episode handle a stateless tools/call names in its `_meta` ("new", a handle, or none). */
export function episodeHandle(body: unknown): string | undefined {
  const v = metaOf(body)?.[EPISODE_META];
  return typeof v === "string" && v.length > 0 ? v : undefined;
}

/** A 2025-era answer made a 2026-07-28 one: `resultType` on every result, the cache fields on a tool list, our `_meta` added. */
export function statelessAnswer(answer: JSONRPCMessage | Record<string, unknown>, method: string, meta: Record<string, unknown> = {}): Record<string, unknown> {
  const a = answer as Record<string, unknown>;
  const result = a["result"] as Record<string, unknown> | undefined;
  if (!result) return a;
  const cache = method === "tools/list" ? { ttlMs: 0, cacheScope: "private" } : {};
  const merged = { ...((result["_meta"] as Record<string, unknown> | undefined) ?? {}), ...meta };
  return { ...a, result: { ...result, resultType: "complete", ...cache, ...(Object.keys(merged).length > 0 ? { _meta: merged } : {}) } };
}

function metaOf(body: unknown): Record<string, unknown> | undefined {
  if (!body || typeof body !== "object" || Array.isArray(body)) return undefined;
  const params = (body as Record<string, unknown>)["params"];
  if (!params || typeof params !== "object" || Array.isArray(params)) return undefined;
  const meta = (params as Record<string, unknown>)["_meta"];
  return meta && typeof meta === "object" && !Array.isArray(meta) ? (meta as Record<string, unknown>) : undefined;
}
