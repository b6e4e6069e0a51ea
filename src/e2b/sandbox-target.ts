import type { IncomingHttpHeaders } from "node:http";
import { E2bApiError } from "./errors.js";

/** The port the SDKs name for envd, the in-sandbox API (`E2b-Sandbox-Port`, `49983-<id>.<domain>`). */
export const ENVD_PORT = 49983;

/** A request for a sandbox (its in-sandbox API on ENVD_PORT, or a port of its own), or for the control plane. */
export type RequestTarget = { kind: "control" } | { kind: "sandbox"; sandboxId: string; port: number; by: "host" | "headers" };

/**
 * Which sandbox and port a request is for, the way E2B's proxies read it
 * (github:e2b-dev/infra, packages/shared/pkg/proxy/host.go):
 * - the host `<port>-<sandboxId>.<domain>` that the SDKs' `getHost(port)` returns (the domain
 *   being the one this server hands out, `--domain`; any suffix is taken when none is set);
 * - else the `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers, which the SDKs send with every
 *   request to `E2B_SANDBOX_URL` (envd) and the code interpreter SDKs with theirs (port 49999);
 *   no port header is envd's;
 * - else the control plane.
 * A malformed port is a 400, as E2B's proxy answers.
 */
export function requestTarget(headers: IncomingHttpHeaders, domain: string | undefined): RequestTarget {
  const host = String(headers.host ?? "");
  const m = /^(\d+)-([A-Za-z0-9]+)\.(.+)$/.exec(host);
  if (m && (domain === undefined || sameHost(m[3]!, domain))) return { kind: "sandbox", sandboxId: m[2]!, port: portNumber(m[1]!), by: "host" };
  const id = headers["e2b-sandbox-id"];
  if (typeof id === "string" && id !== "") {
    const port = headers["e2b-sandbox-port"];
    return { kind: "sandbox", sandboxId: id, port: typeof port === "string" && port !== "" ? portNumber(port) : ENVD_PORT, by: "headers" };
  }
  return { kind: "control" };
}

function portNumber(raw: string): number {
  const n = /^\d{1,5}$/.test(raw) ? Number(raw) : NaN;
  if (!(n >= 1 && n <= 65535)) throw new E2bApiError(400, `invalid sandbox port '${raw}': a port is 1-65535`, "port");
  return n;
}

/** `rest` (what follows `<port>-<id>.` in the Host header) is the domain, with or without the domain's own port. */
function sameHost(rest: string, domain: string): boolean {
  const a = rest.toLowerCase();
  const d = domain.toLowerCase();
  return a === d || a.replace(/:\d+$/, "") === d.replace(/:\d+$/, "");
}
