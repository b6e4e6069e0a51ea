import { Code, ConnectError, type HandlerContext } from "@connectrpc/connect";
import type { IncomingHttpHeaders } from "node:http";
import { E2bApiError } from "./errors.js";
import { SandboxRegistry, type E2bSandbox } from "./sandboxes.js";

import { ENVD_PORT } from "./sandbox-target.js";

/**
 * The sandbox an in-sandbox request is for (`E2b-Sandbox-Id`), checked against its access
 * token (`X-Access-Token`): a token opens its own sandbox only. Unknown sandboxes answer as
 * E2B's proxy does for a sandbox that is gone (502, Connect `unavailable`), so the SDK
 * reports them the way it reports a timed-out sandbox.
 */
export function sandboxForHeaders(registry: SandboxRegistry, headers: { get(name: string): string | null }): E2bSandbox {
  const id = headers.get("e2b-sandbox-id");
  if (!id) throw new E2bApiError(400, "missing E2b-Sandbox-Id header");
  const port = headers.get("e2b-sandbox-port");
  // Other ports are routed to the sandbox's own servers before this (port-proxy.ts).
  if (port && port !== String(ENVD_PORT)) throw new E2bApiError(400, `port ${port} is not the sandbox API's (${ENVD_PORT})`);
  const s = registry.get(id);
  if (!s) throw new E2bApiError(502, `sandbox '${id}' was not found: it was killed, timed out, or never existed`);
  if (!SandboxRegistry.tokenMatches(s, headers.get("x-access-token"))) throw new E2bApiError(401, `missing or wrong X-Access-Token for sandbox '${id}'`);
  // As E2B's proxy answers for a paused sandbox: the SDK's isRunning() is false, commands fail as on a gone sandbox.
  if (s.state === "paused") throw new E2bApiError(502, `sandbox '${id}' is paused: Sandbox.connect() resumes it`);
  return s;
}

export function nodeHeaders(h: IncomingHttpHeaders): { get(name: string): string | null } {
  return { get: (name) => (typeof h[name] === "string" ? (h[name] as string) : null) };
}

/** For Connect handlers: the same checks, refusals as Connect errors. */
export function sandboxForRpc(registry: SandboxRegistry, ctx: HandlerContext): E2bSandbox {
  try {
    return sandboxForHeaders(registry, ctx.requestHeader);
  } catch (err) {
    throw toConnectError(err);
  }
}

/**
 * HTTP status of a refusal → the Connect code the SDK maps to its own error class. 502 is a
 * sandbox that is gone (as E2B's proxy answers); a sandbox server's 503 is one that cannot
 * run sessions (no bubblewrap), 409 a slot being reset or forked.
 */
const CODES: Record<number, Code> = {
  400: Code.InvalidArgument,
  413: Code.InvalidArgument,
  401: Code.Unauthenticated,
  403: Code.Unauthenticated,
  404: Code.NotFound,
  409: Code.Aborted,
  429: Code.ResourceExhausted,
  501: Code.Unimplemented,
  502: Code.Unavailable,
  503: Code.FailedPrecondition,
};

/** A refusal (E2bApiError or a sandbox server's) as the Connect code the SDK maps to its own error class. */
export function toConnectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof E2bApiError) return new ConnectError(err.message, CODES[err.status] ?? Code.Internal);
  return new ConnectError(err instanceof Error ? err.message : String(err), Code.Internal);
}
