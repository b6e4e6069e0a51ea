import { closeSync, constants as fsc, fchownSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";

/**
 * Collects a command's stdout and stderr with a cap, so server memory does not grow with
 * output size. Up to `cap` characters are kept in memory as they arrive; once the total
 * goes past the cap, the head stays, only the last `cap/2` characters are kept as a tail
 * ring, and everything (head included) is appended to a file in the slot's workspace so
 * nothing is lost. The file is opened with O_EXCL|O_NOFOLLOW in the workspace root (a
 * directory the slot cannot replace), so a symlink planted by the slot is never followed.
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

type Stream = "stdout" | "stderr";

export class CappedOutput {
  private readonly headLimit: number;
  private readonly tailLimit: number;
  private readonly head: Record<Stream, string> = { stdout: "", stderr: "" };
  private readonly tail: Record<Stream, string[]> = { stdout: [], stderr: [] };
  private readonly tailLen: Record<Stream, number> = { stdout: 0, stderr: 0 };
  private readonly dropped: Record<Stream, boolean> = { stdout: false, stderr: false };
  private total = 0;
  private fd: number | null = null;
  private fileFailed = false;
  truncated = false;

  constructor(private readonly options: OutputCapOptions) {
    this.headLimit = Math.max(1, Math.floor(options.cap / 2));
    this.tailLimit = Math.max(1, options.cap - this.headLimit);
  }

  /** Characters received so far (both streams). */
  get size(): number {
    return this.total;
  }

  push(stream: Stream, chunk: string): void {
    this.total += chunk.length;
    if (!this.truncated) {
      this.head[stream] += chunk;
      if (this.total <= this.options.cap) return;
      // Crossing the cap: spill what we have to the file and keep only head + tail.
      this.truncated = true;
      this.openFile();
      this.writeFile(this.head.stdout + this.head.stderr);
      for (const s of ["stdout", "stderr"] as const) {
        const all = this.head[s];
        if (all.length > this.headLimit) {
          this.head[s] = all.slice(0, this.headLimit);
          this.addTail(s, all.slice(this.headLimit));
        }
      }
      return;
    }
    this.writeFile(chunk);
    if (this.head[stream].length < this.headLimit) {
      const room = this.headLimit - this.head[stream].length;
      this.head[stream] += chunk.slice(0, room);
      chunk = chunk.slice(room);
      if (!chunk) return;
    }
    this.addTail(stream, chunk);
  }

  private addTail(stream: Stream, chunk: string): void {
    if (chunk.length > this.tailLimit) {
      chunk = chunk.slice(chunk.length - this.tailLimit);
      this.dropped[stream] = true;
      this.tail[stream] = [];
      this.tailLen[stream] = 0;
    }
    this.tail[stream].push(chunk);
    this.tailLen[stream] += chunk.length;
    while (this.tailLen[stream] > this.tailLimit) {
      const first = this.tail[stream][0]!;
      const excess = this.tailLen[stream] - this.tailLimit;
      this.dropped[stream] = true;
      if (first.length <= excess) {
        this.tail[stream].shift();
        this.tailLen[stream] -= first.length;
      } else {
        this.tail[stream][0] = first.slice(excess);
        this.tailLen[stream] -= excess;
      }
    }
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

  private writeFile(text: string): void {
    if (this.fd === null) return;
    try {
      writeSync(this.fd, text);
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

  /** Name of the full-output file, when one was written. */
  get outputFile(): string | undefined {
    return this.truncated && !this.fileFailed ? this.options.fileName : undefined;
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

  private streamText(s: Stream): string {
    if (!this.truncated) return this.head[s];
    const tail = this.tail[s].join("");
    if (!tail) return this.head[s];
    const gap = this.dropped[s] ? `\n\n... [output truncated: ${this.total} characters in total, full output in ${this.options.fileName}] ...\n\n` : "";
    return this.head[s] + gap + tail;
  }

  /** The seed's format: stdout, then `\n[stderr]\n` + stderr when there is stderr, trimmed. */
  text(): string {
    const stdout = this.streamText("stdout");
    const stderr = this.streamText("stderr");
    let out = stdout;
    if (stderr) out += `\n[stderr]\n${stderr}`;
    out = out.trim();
    const cap = this.options.cap;
    if (out.length > cap) {
      // Both streams were capped separately; keep the whole answer within the cap too.
      const marker = `\n\n... [output truncated: ${this.total} characters in total, full output in ${this.options.fileName}] ...\n\n`;
      const room = Math.max(0, cap - marker.length);
      const head = Math.ceil(room / 2);
      out = out.slice(0, head) + marker + out.slice(out.length - (room - head));
    }
    return out;
  }
}
