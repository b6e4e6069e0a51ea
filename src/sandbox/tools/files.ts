import { isUtf8 } from "node:buffer";
import { closeSync, constants as fsc, ftruncateSync, readSync, writeSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import type { ReadFileArgs, WriteFileArgs } from "../../protocol/tool-table.js";
import { fdPath, resolveInWorkspaceSync, WorkspacePathError, type FileOwner, type PathScope } from "./path-guard.js";
import type { ToolOutcome } from "../core/tool-outcome.js";

/**
 * The `read_file` and `write_file` tools. They run in the server process (not in
 * bubblewrap) on the slot's host workspace directory, so every path goes through
 * path-guard, which refuses anything that leads out of the workspace.
 */

export type { ToolOutcome };

export interface FileToolOptions {
  /** read_file returns at most this many bytes (a smaller `max_bytes` in the call wins). */
  maxReadBytes: number;
  /** write_file refuses content larger than this. */
  maxWriteBytes: number;
  /** Owner of files and directories write_file creates, so slot commands can modify them. */
  owner?: FileOwner;
}

const CHUNK_BYTES = 64 * 1024;

/**
 * Reads and writes up to this size are done synchronously on the event loop: on the slot's
 * local disk (tmpfs or a local fs) that is well under a millisecond, where the thread pool
 * cost a round trip per read, write, truncate and close (most of a small call's time under
 * load). Larger ones go through the thread pool so the server keeps answering meanwhile.
 */
const SYNC_IO_BYTES = 1024 * 1024;

/**
 * readHead for a regular file of `size` bytes whose read fits SYNC_IO_BYTES, on a plain fd.
 * Undefined when the file grew since its fstat (a process session writing it): the caller
 * reads it with readHeadAsync to EOF or the limit, as before.
 */
function readHeadSync(fd: number, limit: number, size: number): { data: Buffer; truncated: boolean } | undefined {
  const want = Math.min(limit, size) + 1; // one byte more tells whether the file grew past `limit`
  const buf = Buffer.allocUnsafe(want);
  let total = 0;
  while (total < want) {
    const n = readSync(fd, buf, total, want - total, total);
    if (n === 0) break;
    total += n;
  }
  if (total > limit) return { data: buf.subarray(0, limit), truncated: true };
  return total === want ? undefined : { data: buf.subarray(0, total), truncated: false };
}

/**
 * Reads at most `limit` bytes from the start of an open file, plus one byte to learn
 * whether there was more. Memory stays bounded by `limit` whatever the file's size.
 * `regularSize`: the file is a regular file of about this size; the first read is sized
 * for it and a short read ends the loop (EOF on a regular file), saving a read per call.
 */
export async function readHead(handle: FileHandle, limit: number, regularSize?: number): Promise<{ data: Buffer; truncated: boolean }> {
  const chunks: Buffer[] = [];
  let total = 0;
  const want = limit + 1;
  let next = regularSize !== undefined ? Math.min(regularSize + 1, CHUNK_BYTES) : CHUNK_BYTES;
  while (total < want) {
    const buf = Buffer.allocUnsafe(Math.min(next, want - total));
    next = CHUNK_BYTES;
    const { bytesRead } = await handle.read(buf, 0, buf.length, total);
    if (bytesRead === 0) break;
    chunks.push(bytesRead === buf.length ? buf : buf.subarray(0, bytesRead));
    total += bytesRead;
    if (regularSize !== undefined && bytesRead < buf.length) break;
  }
  const all = Buffer.concat(chunks, total);
  return total > limit ? { data: all.subarray(0, limit), truncated: true } : { data: all, truncated: false };
}

/** Length of `buf` without a trailing incomplete UTF-8 sequence (left by a byte cap). */
export function utf8Boundary(buf: Buffer): number {
  const len = buf.length;
  for (let back = 1; back <= Math.min(3, len); back++) {
    const byte = buf[len - back]!;
    if ((byte & 0xc0) === 0x80) continue; // continuation byte: keep looking for the lead
    const need = byte >= 0xf0 ? 4 : byte >= 0xe0 ? 3 : byte >= 0xc0 ? 2 : 1;
    return need > back ? len - back : len;
  }
  return len;
}

/**
 * Decodes bytes as text when they are text: valid UTF-8 (after trimming a sequence cut by
 * a cap) with no NUL byte. Returns undefined for binary data.
 */
export function decodeText(data: Buffer, truncated: boolean): { text: string; bytes: number } | undefined {
  const end = truncated ? utf8Boundary(data) : data.length;
  const body = data.subarray(0, end);
  if (body.includes(0) || !isUtf8(body)) return undefined;
  return { text: body.toString("utf8"), bytes: end };
}

function failure(error: string, metadata: Record<string, unknown> = {}): ToolOutcome {
  return { success: false, output: "", error, metadata: { exit_code: 1, ...metadata } };
}

/** Turns path-guard's refusals into tool results; anything else is a server fault and propagates. */
function pathFailure(err: unknown): ToolOutcome {
  // path_problem lets a caller (ToolContext) tell a refused path from a missing file without parsing text.
  if (err instanceof WorkspacePathError) return failure(err.message, { path_problem: err.problem });
  throw err;
}

export async function readFileTool(
  workspaceDir: PathScope,
  args: ReadFileArgs,
  options: FileToolOptions,
): Promise<ToolOutcome> {
  const limit = Math.min(args.max_bytes ?? options.maxReadBytes, options.maxReadBytes);
  let entry;
  try {
    entry = resolveInWorkspaceSync(workspaceDir, args.path, { intent: "read" });
  } catch (err) {
    return pathFailure(err);
  }
  const { fd, path, stat } = entry;
  try {
    if (stat.isDirectory()) {
      return failure(`path ${JSON.stringify(args.path)} is a directory; list it with bash (ls) instead`, { path });
    }
    if (!stat.isFile()) return failure(`path ${JSON.stringify(args.path)} is not a regular file`, { path });
    const { data, truncated } = (Math.min(limit, stat.size) < SYNC_IO_BYTES ? readHeadSync(fd, limit, stat.size) : undefined) ?? (await readHeadAsync(fd, limit, stat.size));
    const base = { exit_code: 0, path, file_size: stat.size, truncated };
    if (args.encoding === "base64") {
      return {
        success: true,
        output: data.toString("base64"),
        error: "",
        metadata: { ...base, bytes: data.length, encoding: "base64" },
      };
    }
    let text = decodeText(data, truncated);
    let lossy = false;
    if (!text && !data.includes(0)) {
      // Text in another encoding (Latin-1 source, a stray byte): show it with U+FFFD for the
      // bytes that are not UTF-8 rather than refusing the whole file.
      const end = truncated ? utf8Boundary(data) : data.length;
      text = { text: data.subarray(0, end).toString("utf8"), bytes: end };
      lossy = true;
    }
    if (!text) {
      return failure(
        `path ${JSON.stringify(args.path)} is a binary file (${stat.size} bytes), not UTF-8 text; ` +
          `read it with encoding "base64" or inspect it with bash (e.g. xxd | head)`,
        { path, file_size: stat.size, binary: true },
      );
    }
    const note = truncated
      ? `\n[truncated: showing the first ${text.bytes} of ${stat.size} bytes; read the rest with bash (e.g. tail -c)]`
      : "";
    return {
      success: true,
      output: text.text + note,
      error: "",
      metadata: { ...base, bytes: text.bytes, encoding: "text", ...(lossy ? { invalid_utf8: true } : {}) },
    };
  } finally {
    closeSync(fd);
  }
}

/** A large read through the thread pool: the verified fd reopened (its /proc magic link: the same file) as a FileHandle. */
async function readHeadAsync(fd: number, limit: number, size: number): Promise<{ data: Buffer; truncated: boolean }> {
  const handle = await open(fdPath(fd), fsc.O_RDONLY | fsc.O_NONBLOCK);
  try {
    return await readHead(handle, limit, size);
  } finally {
    await handle.close();
  }
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

export async function writeFileTool(
  workspaceDir: PathScope,
  args: WriteFileArgs,
  options: FileToolOptions,
): Promise<ToolOutcome> {
  let data: Buffer;
  if (args.encoding === "base64") {
    const compact = args.content.replace(/\s+/g, "");
    if (!BASE64.test(compact) || compact.length % 4 === 1) {
      return failure(`content is not valid base64 (encoding "base64" was given for ${JSON.stringify(args.path)})`);
    }
    data = Buffer.from(compact, "base64");
  } else {
    const size = Buffer.byteLength(args.content, "utf8");
    if (size > options.maxWriteBytes) return tooBig(args.path, size, options.maxWriteBytes);
    data = Buffer.from(args.content, "utf8");
  }
  if (data.length > options.maxWriteBytes) return tooBig(args.path, data.length, options.maxWriteBytes);

  let entry;
  try {
    entry = resolveInWorkspaceSync(workspaceDir, args.path, {
      intent: "write",
      createParents: true,
      ...(options.owner ? { owner: options.owner } : {}),
    });
  } catch (err) {
    return pathFailure(err);
  }
  const { fd, path, created } = entry;
  try {
    // Truncate only now: the open itself never truncates, so a refused path is left intact.
    if (data.length < SYNC_IO_BYTES) {
      ftruncateSync(fd, 0);
      for (let written = 0; written < data.length; ) written += writeSync(fd, data, written, data.length - written, written);
    } else {
      await writeAsync(fd, data);
    }
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === "ENOSPC" || code === "EDQUOT" || code === "EFBIG") {
      return failure(`could not write ${JSON.stringify(path)}: the workspace is out of space (${code})`, { path });
    }
    throw err;
  } finally {
    closeSync(fd);
  }
  return {
    success: true,
    output: `Wrote ${data.length} bytes to ${path}`,
    error: "",
    metadata: { exit_code: 0, path, bytes: data.length, created },
  };
}

/** A large write through the thread pool, on the verified fd reopened as a FileHandle (see readHeadAsync). */
async function writeAsync(fd: number, data: Buffer): Promise<void> {
  const handle = await open(fdPath(fd), fsc.O_WRONLY | fsc.O_NONBLOCK);
  try {
    await handle.truncate(0);
    for (let written = 0; written < data.length; ) {
      const { bytesWritten } = await handle.write(data, written, data.length - written, written);
      written += bytesWritten;
    }
  } finally {
    await handle.close();
  }
}

function tooBig(path: string, size: number, max: number): ToolOutcome {
  return failure(
    `content for ${JSON.stringify(path)} is ${size} bytes; write_file accepts at most ${max} bytes ` +
      `(generate large files with bash instead)`,
  );
}
