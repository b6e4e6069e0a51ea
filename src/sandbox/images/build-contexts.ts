import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { HttpError } from "../../http/errors.js";
import { writeBoundedFile } from "../../http/bounded-file.js";

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
    const max = this.maxBytes;
    await writeBoundedFile(this.path(hash), body, max, () => new HttpError(413, `a build context is at most ${Math.round(max / 1024 / 1024)} MB`));
  }

}
