import type { Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

/** Starting and stopping an HTTP server: listen on a port, its URL, graceful close. */

/** Starts `server` listening; resolves with its base URL (port 0 picks a free port). */
export async function listenOn(server: Server, port: number, host: string): Promise<string> {
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      resolve();
    });
  });
  return serverUrl(server);
}

/** Base URL of a listening server, IPv6 hosts bracketed. */
export function serverUrl(server: Server): string {
  const a = server.address() as AddressInfo;
  const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
  return `http://${host}:${a.port}`;
}

/**
 * Stops accepting requests and resolves once those in progress are answered. Idle
 * keep-alive connections are closed at once, all of them after `graceMs`.
 */
export async function closeGracefully(server: Server, graceMs: number): Promise<void> {
  const closed = new Promise<void>((resolve) => server.close(() => resolve()));
  server.closeIdleConnections();
  const timer = setTimeout(() => server.closeAllConnections(), graceMs);
  await closed;
  clearTimeout(timer);
}

/**
 * During shutdown, answer with `connection: close` and drop the connection once the answer
 * is sent: a keep-alive connection that just answered its last request would otherwise keep
 * the process alive. `isClosing` is read when the answer finishes, so requests already in
 * progress when shutdown starts are covered too.
 */
export function closeConnectionsOnShutdown(server: Server, res: ServerResponse, isClosing: () => boolean): void {
  res.once("finish", () => {
    if (isClosing()) setImmediate(() => server.closeIdleConnections());
  });
  if (isClosing()) res.setHeader("connection", "close");
}
