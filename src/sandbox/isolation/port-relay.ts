import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import type { Socket } from "node:net";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "../native/native-build.js";
import type { NetnsHolder } from "./slot-netns.js";

/**
 * A connection to a port inside a slot's network namespace (the one its process sessions
 * share, slot-netns.ts), through the port relay (`native/port-relay.c`): a small process that
 * enters the holder's user and network namespaces and becomes the slot's uid there, connects to 127.0.0.1:<port> (else [::1]) there and
 * copies bytes to and from fd 3, a socket whose other end is returned here. One process per
 * connection, ≈ 1 ms to start; it ends when both sides have ended, on an error, when killed,
 * and with the server.
 */

let relayPath: string | null | undefined;
let relayError: string | undefined;

/** The compiled relay (once, cached by source hash; the image prebuilds it); null with `portRelayError()` when it cannot be built. */
export function portRelayBinary(cacheDir: string): string | null {
  if (relayPath !== undefined && (relayPath === null || existsSync(relayPath))) return relayPath;
  const src = nativeSource("port-relay.c");
  const prebuilt = prebuiltNative("slotpool-port-relay");
  if (!src) {
    relayPath = existsSync(prebuilt) ? prebuilt : null;
    if (!relayPath) relayError = "port-relay.c not found";
    return relayPath;
  }
  // Executed as the server's own uid (it drops to the slot's itself): no slot uid need reach it.
  const built = compileNative("slotpool-port-relay", src, [NATIVE_DIR, cacheDir], 0o700);
  if ("path" in built) return (relayPath = built.path);
  relayError = built.error;
  return (relayPath = null);
}

export function portRelayError(): string | undefined {
  return relayError;
}

export class PortRefusedError extends Error {
  override name = "PortRefusedError";
  readonly code = "port_refused";
  constructor(
    readonly port: number,
    readonly reason: string,
  ) {
    super(`nothing listens on port ${port} in this slot (${reason})`);
  }
}

export interface RelayedConnection {
  /** The connection's bytes, both ways (end = FIN passed on). */
  socket: Socket;
  /** The relay process: killed when the connection must end at once (reset, idle, shutdown). */
  child: ChildProcess;
}

/** How long the relay may take to answer "ok" or "refused" (it only connects on loopback). */
const DIAL_TIMEOUT_MS = 10_000;

/**
 * Opens a connection to `port` in the namespace `holder` owns (the relay becomes the slot's
 * uid there). `place` puts the relay into the slot's cgroups. Rejects with PortRefusedError
 * when nothing listens there.
 */
export function relayToPort(binary: string, holder: NetnsHolder, port: number, place: (pid: number) => void): Promise<RelayedConnection> {
  const pid = holder.pid;
  if (pid === undefined || !holder.alive) return Promise.reject(new PortRefusedError(port, "no process of the slot runs"));
  const child = spawn(binary, [String(pid), String(port)], { stdio: ["ignore", "pipe", "pipe", "pipe"], env: {}, cwd: "/" });
  if (child.pid !== undefined) place(child.pid);
  const socket = child.stdio[3] as Socket;
  // Each side's end is passed on by the relay: this end must not close itself at the peer's FIN.
  socket.allowHalfOpen = true;
  child.on("error", () => undefined);
  socket.on("error", () => undefined);
  return new Promise<RelayedConnection>((resolve, reject) => {
    let out = "";
    let err = "";
    let settled = false;
    const timer = setTimeout(() => fail(new Error(`the port relay did not connect within ${DIAL_TIMEOUT_MS / 1000} s`)), DIAL_TIMEOUT_MS);
    const fail = (e: Error): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      child.kill("SIGKILL");
      socket.destroy();
      reject(e);
    };
    child.stdout!.setEncoding("utf8");
    child.stdout!.on("data", (d: string) => {
      out += d;
      const nl = out.indexOf("\n");
      if (nl < 0 || settled) return;
      const line = out.slice(0, nl);
      if (line === "ok") {
        settled = true;
        clearTimeout(timer);
        resolve({ socket, child });
      } else fail(line.startsWith("refused ") ? new PortRefusedError(port, line.slice("refused ".length)) : new Error(`the port relay said: ${line}`));
    });
    child.stderr!.setEncoding("utf8");
    child.stderr!.on("data", (d: string) => (err = (err + d).slice(-1000)));
    // 'exit' may come before the relay's last stdout line ("refused …") is read: decide once
    // stdout has ended, so a closed port is never mistaken for a relay failure (a 500, not the 502).
    child.once("exit", (code, signal) => {
      const ended = (): void => fail(new Error(`the port relay ended before connecting (code ${code}, signal ${signal})${err.trim() ? `: ${err.trim()}` : ""}`));
      if (child.stdout!.readableEnded || child.stdout!.destroyed) ended();
      else child.stdout!.once("close", ended);
    });
  });
}
