import type { IncomingMessage } from "node:http";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { z } from "zod";
import { HttpError, fieldName } from "./errors.js";

/** Reading JSON request bodies: a size limit, an optional memory budget, zod validation. */

export const MAX_BODY_BYTES = 16 * 1024 * 1024;

/** Bodies at least this large are followed by a full GC (when V8 allows one): see JsonBodyReader. */
const LARGE_BODY = 8 * 1024 * 1024;

export interface JsonBodyOptions {
  /** Largest body accepted, bytes (413 above it). */
  maxBytes?: number;
  /**
   * Bytes of bodies read at once, at most. A body is held whole while parsed (≈ 3-4 x its
   * size at the peak), so a request whose Content-Length does not fit waits its turn (TCP
   * backpressure on its sender) instead of memory growing with the number of concurrent
   * large requests. Unset: no budget.
   */
  budgetBytes?: number;
}

/** Reads and parses JSON bodies within a size limit (and, optionally, a memory budget). */
export class JsonBodyReader {
  readonly maxBytes: number;
  private readonly budget: ByteBudget | null;

  constructor(options: JsonBodyOptions = {}) {
    this.maxBytes = options.maxBytes ?? MAX_BODY_BYTES;
    this.budget = options.budgetBytes !== undefined ? new ByteBudget(options.budgetBytes) : null;
  }

  async read(req: IncomingMessage): Promise<unknown> {
    const declared = Number(req.headers["content-length"] ?? NaN);
    if (Number.isFinite(declared) && declared > this.maxBytes) {
      req.resume();
      throw tooLarge(this.maxBytes);
    }
    if (!this.budget) return readJsonBody(req, this.maxBytes);
    const reserve = Number.isFinite(declared) ? declared : 0;
    await this.budget.acquire(reserve);
    try {
      return await readJsonBody(req, this.maxBytes);
    } finally {
      // A large body leaves large garbage (bytes, text); collect it before the next one
      // is let in, or peaks add up while V8 waits to collect.
      if (reserve >= LARGE_BODY) collectGarbage();
      this.budget.release(reserve);
    }
  }
}

/** Reads a whole body and parses it as JSON; 413 over `maxBytes`, 400 when empty or not JSON. */
export function readJsonBody(req: IncomingMessage, maxBytes = MAX_BODY_BYTES): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on("data", (c: Buffer) => {
      if (failed) return;
      size += c.length;
      if (size > maxBytes) {
        failed = true;
        reject(tooLarge(maxBytes));
        req.resume();
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => {
      if (failed) return;
      const text = (chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks)).toString("utf8");
      chunks.length = 0;
      let value: unknown;
      try {
        value = JSON.parse(text);
      } catch (err) {
        if (!text.trim()) return reject(new HttpError(400, "invalid request: the body must be JSON, got nothing", "body"));
        return reject(new HttpError(400, `invalid request: the body is not valid JSON (${err instanceof Error ? err.message : String(err)})`, "body"));
      }
      resolve(value);
    });
    req.on("error", reject);
  });
}

function tooLarge(maxBytes: number): HttpError {
  return new HttpError(413, `request body is larger than ${maxBytes} bytes`, "body");
}

/** Parses a body with a zod schema; a mismatch is a 400 naming the field (`prefix` first, inside a batch). */
export function parseBody<S extends z.ZodType>(schema: S, body: unknown, prefix?: string): z.output<S> {
  const r = schema.safeParse(body);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    const field = issue.path.length > 0 || prefix ? fieldName(issue.path, prefix) : undefined;
    throw new HttpError(400, `invalid request: ${field ? `${field}: ` : ""}${issue.message}`, field);
  }
  return r.data;
}

let gcFn: (() => void) | null | undefined;
/** A full GC, when V8 lets us have one (`--expose-gc` enabled at run time). */
function collectGarbage(): void {
  if (gcFn === undefined) {
    try {
      setFlagsFromString("--expose-gc");
      gcFn = runInNewContext("gc") as () => void;
    } catch {
      gcFn = null;
    }
  }
  gcFn?.();
}

/** A FIFO byte budget: `acquire(n)` waits until n bytes fit (a lone request always fits). */
export class ByteBudget {
  private used = 0;
  private readonly waiters: Array<{ n: number; go: () => void }> = [];

  constructor(private readonly capacity: number) {}

  acquire(n: number): Promise<void> {
    if (this.waiters.length === 0 && (this.used === 0 || this.used + n <= this.capacity)) {
      this.used += n;
      return Promise.resolve();
    }
    return new Promise((go) => this.waiters.push({ n, go }));
  }

  release(n: number): void {
    this.used -= n;
    while (this.waiters.length > 0) {
      const next = this.waiters[0]!;
      if (this.used !== 0 && this.used + next.n > this.capacity) break;
      this.waiters.shift();
      this.used += next.n;
      next.go();
    }
  }
}
