import { createGzip, type Gzip } from "node:zlib";
import { SlotpoolError } from "../../protocol/errors.js";

/**
 * A minimal streaming tar.gz writer (POSIX ustar with pax extended headers for long names,
 * long link targets and big sizes). Written here rather than taken from a library because
 * the archive's entries must come from file handles that path-guard opened without
 * following symlinks; a library that walks paths itself would reopen them by name.
 *
 * The compressed output is collected in memory up to `maxBytes`; beyond that the writer
 * fails with ArchiveTooLargeError, so memory stays bounded whatever the tree holds.
 */

export class ArchiveTooLargeError extends SlotpoolError {
  override name = "ArchiveTooLargeError";
  constructor(readonly maxBytes: number) {
    super(`the archive exceeds max_bytes (${maxBytes} bytes)`);
  }
}

export interface TarEntryHeader {
  /** Path inside the archive (no leading slash; directories without a trailing slash). */
  path: string;
  type: "file" | "dir" | "symlink";
  size: number;
  mode: number;
  mtimeMs: number;
  uid: number;
  gid: number;
  linkTarget?: string;
}

const BLOCK = 512;
const TYPEFLAG = { file: "0", dir: "5", symlink: "2" } as const;

export class TarGzWriter {
  private readonly gzip: Gzip;
  private readonly chunks: Buffer[] = [];
  private compressed = 0;
  private failure: Error | undefined;
  private readonly finished: Promise<void>;

  constructor(private readonly maxBytes: number) {
    this.gzip = createGzip();
    this.gzip.on("data", (chunk: Buffer) => {
      this.compressed += chunk.length;
      if (this.compressed > this.maxBytes) {
        this.failure ??= new ArchiveTooLargeError(this.maxBytes);
        this.chunks.length = 0;
        return;
      }
      this.chunks.push(chunk);
    });
    this.finished = new Promise((resolve, reject) => {
      this.gzip.on("end", resolve);
      this.gzip.on("error", reject);
    });
  }

  /** Bytes of compressed output so far. */
  get compressedBytes(): number {
    return this.compressed;
  }

  private async push(data: Buffer): Promise<void> {
    if (this.failure) throw this.failure;
    if (!this.gzip.write(data)) {
      await new Promise<void>((resolve) => this.gzip.once("drain", resolve));
    }
    if (this.failure) throw this.failure;
  }

  /** Writes one entry's header; for files, follow with exactly `size` bytes via `writeData`. */
  async writeHeader(entry: TarEntryHeader): Promise<void> {
    const name = entry.type === "dir" ? `${entry.path}/` : entry.path;
    const pax: Array<[string, string]> = [];
    if (Buffer.byteLength(name) > 100 || !isAscii(name)) pax.push(["path", name]);
    if (entry.linkTarget !== undefined && (Buffer.byteLength(entry.linkTarget) > 100 || !isAscii(entry.linkTarget))) {
      pax.push(["linkpath", entry.linkTarget]);
    }
    if (entry.size > 0o77777777777) pax.push(["size", String(entry.size)]);
    if (entry.uid > 0o7777777) pax.push(["uid", String(entry.uid)]);
    if (entry.gid > 0o7777777) pax.push(["gid", String(entry.gid)]);
    if (pax.length > 0) {
      const body = Buffer.from(pax.map(([k, v]) => paxRecord(k, v)).join(""), "utf8");
      await this.push(header({
        name: asciiName(`PaxHeader/${name}`),
        typeflag: "x",
        size: body.length,
        mode: 0o644,
        mtime: Math.floor(entry.mtimeMs / 1000),
        uid: 0,
        gid: 0,
        linkname: "",
      }));
      await this.push(padded(body));
    }
    await this.push(header({
      name: asciiName(name),
      typeflag: TYPEFLAG[entry.type],
      size: entry.type === "file" ? entry.size : 0,
      mode: entry.mode & 0o7777,
      mtime: Math.floor(entry.mtimeMs / 1000),
      uid: Math.min(entry.uid, 0o7777777),
      gid: Math.min(entry.gid, 0o7777777),
      linkname: entry.linkTarget === undefined ? "" : asciiName(entry.linkTarget),
    }));
  }

  async writeData(data: Buffer): Promise<void> {
    if (data.length > 0) await this.push(data);
  }

  /** Pads a file's data, which had `size` bytes, to the block size. */
  async endFile(size: number): Promise<void> {
    const rest = size % BLOCK;
    if (rest !== 0) await this.push(Buffer.alloc(BLOCK - rest));
  }

  /** Writes the end-of-archive marker and returns the whole tar.gz. */
  async finish(): Promise<Buffer> {
    await this.push(Buffer.alloc(BLOCK * 2));
    this.gzip.end();
    await this.finished;
    if (this.failure) throw this.failure;
    return Buffer.concat(this.chunks, this.compressed);
  }

  /** Abandons the archive (on error), releasing zlib's memory. */
  destroy(): void {
    this.gzip.destroy();
  }
}

interface RawHeader {
  name: string;
  typeflag: string;
  size: number;
  mode: number;
  mtime: number;
  uid: number;
  gid: number;
  linkname: string;
}

function header(h: RawHeader): Buffer {
  const buf = Buffer.alloc(BLOCK);
  buf.write(h.name, 0, 100, "utf8");
  octal(buf, h.mode, 100, 8);
  octal(buf, h.uid, 108, 8);
  octal(buf, h.gid, 116, 8);
  octal(buf, Math.min(h.size, 0o77777777777), 124, 12);
  octal(buf, Math.min(h.mtime, 0o77777777777), 136, 12);
  buf.write("        ", 148, 8, "ascii");
  buf.write(h.typeflag, 156, 1, "ascii");
  buf.write(h.linkname, 157, 100, "utf8");
  buf.write("ustar\0", 257, 6, "ascii");
  buf.write("00", 263, 2, "ascii");
  let sum = 0;
  for (const byte of buf) sum += byte;
  buf.write(sum.toString(8).padStart(6, "0") + "\0 ", 148, 8, "ascii");
  return buf;
}

function octal(buf: Buffer, value: number, offset: number, width: number): void {
  buf.write(Math.max(0, Math.floor(value)).toString(8).padStart(width - 1, "0") + "\0", offset, width, "ascii");
}

function padded(body: Buffer): Buffer {
  const rest = body.length % BLOCK;
  return rest === 0 ? body : Buffer.concat([body, Buffer.alloc(BLOCK - rest)]);
}

/** One pax record: "<len> <key>=<value>\n", where len counts the whole record. */
function paxRecord(key: string, value: string): string {
  const tail = ` ${key}=${value}\n`;
  const tailBytes = Buffer.byteLength(tail);
  let len = tailBytes + 1;
  while (String(len).length + tailBytes !== len) len = String(len).length + tailBytes;
  return `${len}${tail}`;
}

function isAscii(s: string): boolean {
  return /^[\x20-\x7e]*$/.test(s);
}

/** The ustar field's fallback when a pax record carries the real value. */
function asciiName(s: string): string {
  const ascii = s.replace(/[^\x20-\x7e]/g, "_");
  return ascii.length > 100 ? ascii.slice(0, 100) : ascii;
}
