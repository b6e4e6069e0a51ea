import { isIP } from "node:net";

/**
 * Whether a listen address keeps a server on this machine: the loopback range, ::1 or
 * "localhost". Anything else (0.0.0.0, ::, a LAN address, a host name) may be reached from the
 * network.
 */
export function isLoopbackHost(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, "$1");
  if (h === "localhost") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  if (isIP(h) === 6) return h === "::1" || /^::ffff:127\./.test(h);
  return false;
}

/**
 * Why a server may not listen on `host` without a token (a server that runs any command for
 * anyone on the network), or undefined when it may. `tokenHow` names how to give one.
 */
export function exposureProblem(host: string, token: string | undefined, tokenHow: string): string | undefined {
  if (token !== undefined && token.length > 0) return undefined;
  if (isLoopbackHost(host)) return undefined;
  return `--host ${host} listens beyond loopback, so it needs a token: give ${tokenHow} (every route but /health then asks for 'Authorization: Bearer <token>'), or listen on 127.0.0.1`;
}
