import { randomBytes } from "node:crypto";
import { createWriteStream, existsSync, mkdirSync } from "node:fs";
import { rename, rm } from "node:fs/promises";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";
import { HttpError } from "../../http/errors.js";

/**
 * The files image builds copy (E2B's COPY), by the hash the client computed over them: each a
 * gzipped tar as E2B's SDKs upload it, kept in the server's state dir until the server's state
 * goes. Written to a temporary name and renamed, so a half-uploaded context is never used.
 */
export class BuildContexts {
  constructor(
    private readonly dir: string,
    private readonly maxBytes: number,
  ) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  /** The context's file (it may not exist: `has`). */
  path(hash: string): string {
    if (!/^[a-f0-9]{64}$/.test(hash)) throw new HttpError(400, "a build context's hash is a lower-case hex sha256", "hash");
    return join(this.dir, `${hash}.tar.gz`);
  }

  has(hash: string): boolean {
    return existsSync(this.path(hash));
  }

  async put(hash: string, body: Readable): Promise<void> {
    const final = this.path(hash);
    const tmp = `${final}.${randomBytes(4).toString("hex")}`;
    let bytes = 0;
    const max = this.maxBytes;
    try {
      await pipeline(
        body,
        async function* (source: AsyncIterable<Buffer>) {
          for await (const chunk of source) {
            bytes += chunk.length;
            if (bytes > max) throw new HttpError(413, `a build context is at most ${Math.round(max / 1024 / 1024)} MB`);
            yield chunk;
          }
        },
        createWriteStream(tmp, { mode: 0o600 }),
      );
      await rename(tmp, final);
    } finally {
      await rm(tmp, { force: true });
    }
  }
}
