import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { HttpError } from "./errors.js";
import { requestTarget } from "./target.js";

/**
 * Bearer-token check, as the original services do it: no header → 401, a malformed one →
 * 401, a wrong token → 403. Both sides are hashed to equal length and compared in constant
 * time, so neither the token nor its length can be guessed byte by byte.
 */
export class BearerAuth {
  private readonly hash: Buffer | null;

  /** No token: every request passes. */
  constructor(token: string | undefined, private readonly options: { allowQueryTokenOnUpgrade?: boolean } = {}) {
    this.hash = token ? sha256(token) : null;
  }

  get enabled(): boolean {
    return this.hash !== null;
  }

  /**
   * `how`: "upgrade" only from a server's `upgrade` event (a WebSocket handshake Node routed
   * there), where `?token=` is accepted if asked for. A plain request never gets the query
   * token, whatever headers it carries: an `Upgrade` header on a request is the client's word,
   * not a handshake (a plain POST with `Upgrade: x` once passed with `?token=`, which then sits
   * in every proxy's and server's access log).
   */
  check(req: IncomingMessage, how: "request" | "upgrade" = "request"): void {
    if (!this.hash) return;
    const header = req.headers.authorization;
    let given: string | undefined;
    if (header) {
      const m = /^Bearer\s+(.+)$/i.exec(header);
      if (!m) throw new HttpError(401, "invalid Authorization header: expected 'Bearer <token>'");
      given = m[1]!.trim();
    } else if (this.options.allowQueryTokenOnUpgrade && how === "upgrade") {
      // Browsers cannot set headers on a WebSocket: accept ?token= there only.
      given = requestTarget(req.url).query.get("token") ?? undefined;
    }
    if (given === undefined) throw new HttpError(401, "missing Authorization header: send 'Authorization: Bearer <token>'");
    if (!timingSafeEqual(sha256(given), this.hash)) throw new HttpError(403, "invalid token");
  }
}

function sha256(text: string): Buffer {
  return createHash("sha256").update(text).digest();
}
