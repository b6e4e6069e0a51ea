import { closeSync, constants as fsc, fchownSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";

/**
 * Collects a command's stdout and stderr with a cap, so server memory does not grow with
 * output size. Bytes are kept as they arrive until the total passes the cap; from then on
 * only a fixed head and a fixed tail ring buffer per stream are kept (allocated once), and
 * everything (what was kept before included) is appended to a file in the slot's
 * workspace, so nothing is lost. No strings are built until the answer is assembled.
 *
 * The file is opened with O_EXCL|O_NOFOLLOW in the workspace root (a directory the slot
 * cannot replace), so a symlink planted by the slot is never followed.
 */
export interface OutputCapOptions {
  /** Maximum characters returned in `output` (head + tail). */
  cap: number;
  /** Host path of the slot's workspace (where the full output file is written). */
  workspaceDir: string;
  /** File name (workspace-relative) for the full output, used when the cap is exceeded. */
  fileName: string;
  owner?: { uid: number; gid: number } | undefined;
}

export type OutputStream = "stdout" | "stderr";

class StreamBuf {
  /** Before truncation: copies of every chunk. */
  pre: Buffer[] = [];
  preLen = 0;
  head: Buffer | null = null;
  headLen = 0;
  ring: Buffer | null = null;
  ringStart = 0;
  ringLen = 0;
  dropped = false;

  constructor(
    private readonly headLimit: number,
    private readonly tailLimit: number,
  ) {}

  /** Switches from "keep everything" to head + ring. */
  spill(): void {
    this.head = Buffer.allocUnsafe(this.headLimit);
    this.ring = Buffer.allocUnsafe(this.tailLimit);
    const pre = this.pre;
    this.pre = [];
    this.preLen = 0;
    for (const b of pre) this.add(b);
  }

  add(b: Buffer): void {
    if (!this.head || !this.ring) {
      this.pre.push(Buffer.from(b));
      this.preLen += b.length;
      return;
    }
    let off = 0;
    if (this.headLen < this.headLimit) {
      const n = Math.min(this.headLimit - this.headLen, b.length);
      b.copy(this.head, this.headLen, 0, n);
      this.headLen += n;
      off = n;
    }
    if (off >= b.length) return;
    let rest = b.subarray(off);
    if (rest.length >= this.tailLimit) {
      if (rest.length > this.tailLimit || this.ringLen > 0) this.dropped = true;
      rest.copy(this.ring, 0, rest.length - this.tailLimit);
      this.ringStart = 0;
      this.ringLen = this.tailLimit;
      return;
    }
    // Append to the ring, overwriting the oldest bytes when full.
    let write = (this.ringStart + this.ringLen) % this.tailLimit;
    const overflow = this.ringLen + rest.length - this.tailLimit;
    if (overflow > 0) {
      this.dropped = true;
      this.ringStart = (this.ringStart + overflow) % this.tailLimit;
      this.ringLen -= overflow;
    }
    while (rest.length > 0) {
      const n = Math.min(rest.length, this.tailLimit - write);
      rest.copy(this.ring, write, 0, n);
      rest = rest.subarray(n);
      this.ringLen += n;
      write = (write + n) % this.tailLimit;
    }
  }

  /** Tail bytes kept elsewhere (the spawner), placed after the head. */
  appendTail(tail: Buffer, dropped: boolean): void {
    if (tail.length === 0) {
      this.dropped = this.dropped || dropped;
      return;
    }
    // The head holds the start of the stream and the tail its end; bytes that spilled
    // into our own ring sit between them and give way (the marker shows the gap).
    dropped = dropped || this.ringLen > 0;
    this.ring = Buffer.from(tail);
    this.ringStart = 0;
    this.ringLen = tail.length;
    this.tailLimitOverride = tail.length;
    this.dropped = this.dropped || dropped;
  }

  private tailLimitOverride = 0;

  headText(): string {
    if (!this.head) return Buffer.concat(this.pre).toString("utf8");
    return this.head.subarray(0, this.headLen).toString("utf8");
  }

  tailText(): string {
    if (!this.ring || this.ringLen === 0) return "";
    const size = this.tailLimitOverride || this.tailLimit;
    const end = this.ringStart + this.ringLen;
    let buf =
      end <= size
        ? this.ring.subarray(this.ringStart, end)
        : Buffer.concat([this.ring.subarray(this.ringStart), this.ring.subarray(0, end - size)]);
    // Do not start in the middle of a UTF-8 sequence.
    let i = 0;
    while (i < buf.length && i < 4 && (buf[i]! & 0xc0) === 0x80) i++;
    buf = buf.subarray(i);
    return buf.toString("utf8");
  }
}

export class CappedOutput {
  private readonly streams: Record<OutputStream, StreamBuf>;
  private total = 0;
  private fd: number | null = null;
  private fileFailed = false;
  /** Set when the spawner capped the output itself (see `applyRemote`). */
  private remote: { fileState: number } | null = null;
  truncated = false;

  constructor(private readonly options: OutputCapOptions) {
    const headLimit = Math.max(1, Math.floor(options.cap / 2));
    const tailLimit = Math.max(1, options.cap - headLimit);
    this.streams = { stdout: new StreamBuf(headLimit, tailLimit), stderr: new StreamBuf(headLimit, tailLimit) };
  }

  /** Bytes received so far (both streams). */
  get size(): number {
    return this.total;
  }

  push(stream: OutputStream, chunk: Buffer | string): void {
    const b = typeof chunk === "string" ? Buffer.from(chunk, "utf8") : chunk;
    if (b.length === 0) return;
    this.total += b.length;
    if (!this.truncated) {
      this.streams[stream].add(b);
      if (this.total <= this.options.cap) return;
      // Crossing the cap: write what we kept to the file, then keep head + tail only.
      this.truncated = true;
      this.openFile();
      for (const s of [this.streams.stdout, this.streams.stderr]) {
        for (const p of s.pre) this.writeFile(p);
        s.spill();
      }
      return;
    }
    this.writeFile(b);
    this.streams[stream].add(b);
  }

  private openFile(): void {
    try {
      const path = join(this.options.workspaceDir, this.options.fileName);
      this.fd = openSync(path, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o644);
      if (this.options.owner) fchownSync(this.fd, this.options.owner.uid, this.options.owner.gid);
    } catch {
      this.fileFailed = true;
      this.fd = null;
    }
  }

  private writeFile(b: Buffer): void {
    if (this.fd === null) return;
    try {
      let off = 0;
      while (off < b.length) off += writeSync(this.fd, b, off, b.length - off);
    } catch {
      // Disk full (the slot filled it) or similar: stop writing, keep the in-memory view.
      this.fileFailed = true;
      try {
        closeSync(this.fd);
      } catch {
        /* ignore */
      }
      this.fd = null;
    }
  }

  /**
   * The spawner capped the output in the sandbox: we received the first `cap` bytes as
   * usual; these are its kept tails, the real total, and whether it wrote the file.
   */
  applyRemote(r: { total: number; stdoutTail: Buffer; stderrTail: Buffer; stdoutDropped: boolean; stderrDropped: boolean; fileState: number }): void {
    this.truncated = true;
    this.total = r.total;
    this.remote = { fileState: r.fileState };
    for (const [name, tail, dropped] of [["stdout", r.stdoutTail, r.stdoutDropped], ["stderr", r.stderrTail, r.stderrDropped]] as const) {
      const s = this.streams[name];
      if (!s.head) s.spill();
      s.appendTail(tail, dropped);
    }
  }

  /** Name of the full-output file, when one was written completely. */
  get outputFile(): string | undefined {
    if (this.remote) return this.remote.fileState === 1 ? this.options.fileName : undefined;
    return this.truncated && !this.fileFailed ? this.options.fileName : undefined;
  }

  get fileName(): string {
    return this.options.fileName;
  }

  /** When the output file was cut at the file size limit. */
  get outputFileCut(): boolean {
    return this.remote?.fileState === 2;
  }

  close(): void {
    if (this.fd !== null) {
      try {
        closeSync(this.fd);
      } catch {
        /* ignore */
      }
      this.fd = null;
    }
  }

  private marker(): string {
    const where = this.outputFile
      ? `full output in ${this.options.fileName}`
      : this.outputFileCut
        ? `output in ${this.options.fileName}, cut at the file size limit`
        : "full output not saved";
    return `\n\n... [output truncated: ${this.total} bytes in total, ${where}] ...\n\n`;
  }

  private streamText(s: StreamBuf): string {
    const head = s.headText();
    const tail = s.tailText();
    if (!tail) return head;
    return s.dropped ? head + this.marker() + tail : head + tail;
  }

  /** The original's format: stdout, then `\n[stderr]\n` + stderr when there is stderr, trimmed. */
  text(): string {
    const stdout = this.streamText(this.streams.stdout);
    const stderr = this.streamText(this.streams.stderr);
    let out = stdout;
    if (stderr) out += `\n[stderr]\n${stderr}`;
    out = out.trim();
    const cap = this.options.cap;
    if (out.length > cap) {
      // Each stream was capped on its own; keep the whole answer within the cap too.
      const marker = this.marker();
      const room = Math.max(0, cap - marker.length);
      const head = Math.ceil(room / 2);
      out = out.slice(0, head) + marker + out.slice(out.length - (room - head));
    }
    return out;
  }
}
