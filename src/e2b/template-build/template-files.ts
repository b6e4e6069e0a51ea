import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import type { Readable } from "node:stream";
import { E2bApiError } from "../errors.js";
import { writeBoundedFile } from "../../http/bounded-file.js";

/**
 * The files E2B templates copy (the SDK's `copy`), uploaded once by their hash: the SDK asks
 * `GET /templates/{id}/files/{hash}` and, unless `present`, PUTs a gzipped tar to the URL it
 * gets. That URL carries its own signature (the SDK sends no API key with the upload): it
 * opens exactly that hash's upload. Kept in a directory of this server until it stops.
 */
export class TemplateFiles {
  private readonly secret = randomBytes(32);

  constructor(
    private readonly dir: string,
    private readonly maxBytes: number,
  ) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  }

  private file(hash: string): string {
    if (!/^[a-f0-9]{64}$/.test(hash)) throw new E2bApiError(400, "hash must be a lower-case hex sha256", "hash");
    return join(this.dir, `${hash}.tar.gz`);
  }

  /** The uploaded file of `hash`, if there is one. */
  path(hash: string): string | undefined {
    const p = this.file(hash);
    return existsSync(p) ? p : undefined;
  }

  signature(hash: string): string {
    return createHmac("sha256", this.secret).update(`upload:${hash}`).digest("base64url");
  }

  check(hash: string, signature: string | null): void {
    const want = Buffer.from(this.signature(hash));
    const got = Buffer.from(signature ?? "");
    if (got.length !== want.length || !timingSafeEqual(got, want)) throw new E2bApiError(403, "invalid or missing upload signature: ask GET /templates/{templateID}/files/{hash} for the upload URL");
  }

  async put(hash: string, body: Readable): Promise<void> {
    const max = this.maxBytes;
    await writeBoundedFile(this.file(hash), body, max, () => new E2bApiError(413, `a template's files are at most ${Math.round(max / 1024 / 1024)} MB per copy (--max-template-files-mb)`));
  }

}
