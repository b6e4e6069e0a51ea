/**
 * An upload body written to a file whole or not at all: streamed to a temporary name beside
 * it (mode 0600) and renamed into place at the end, cut with `tooBig()` once it passes
 * `maxBytes`, so a reader never sees half a file and an oversized body never fills the disk.
 */
import { randomBytes } from "node:crypto";
import { createWriteStream } from "node:fs";
import { rename, rm } from "node:fs/promises";
import type { Readable } from "node:stream";
import { pipeline } from "node:stream/promises";

export async function writeBoundedFile(final: string, body: Readable, maxBytes: number, tooBig: () => Error): Promise<void> {
  const tmp = `${final}.${randomBytes(4).toString("hex")}`;
  let bytes = 0;
  try {
    await pipeline(
      body,
      async function* (source: AsyncIterable<Buffer>) {
        for await (const chunk of source) {
          bytes += chunk.length;
          if (bytes > maxBytes) throw tooBig();
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
