import { createHash } from "node:crypto";
import { constants as fsc, type Dirent, type Stats } from "node:fs";
import { lstat, opendir, readlink, type FileHandle } from "node:fs/promises";
import { extname } from "node:path";
import type {
  ArtifactArchiveRequest,
  ArtifactArchiveResponse,
  ArtifactListRequest,
  ArtifactListResponse,
  ArtifactReadRequest,
  ArtifactReadResponse,
} from "../../protocol/sandbox.js";
import { decodeText, readHead } from "./files.js";
import { fdPath, joinRelative, openChild, resolveInWorkspace, WorkspacePathError, type PathScope } from "./path-guard.js";
import { ArchiveTooLargeError, TarGzWriter } from "./tar-writer.js";
import { throwIfCutOff } from "../core/cut-off.js";

/**
 * The `/artifacts/read|list|archive` routes' work: reading results out of a slot's
 * workspace from the host side. Every path goes through path-guard; trees are walked
 * through open directory handles without following symlinks, so nothing outside the
 * workspace is ever read. User mistakes come back as `success: false` with an error,
 * never as exceptions.
 */

export interface ArtifactLimits {
  /** read: bytes returned when the request gives no max_bytes. */
  defaultReadBytes: number;
  /** read: ceiling on max_bytes. */
  maxReadBytes: number;
  /** list: entries returned when the request gives no max_entries. */
  defaultListEntries: number;
  maxListEntries: number;
  /** archive: compressed size allowed when the request gives no max_bytes. */
  defaultArchiveBytes: number;
  maxArchiveBytes: number;
  defaultArchiveEntries: number;
  maxArchiveEntries: number;
  /**
   * archive: file bytes read before giving up. Sparse or highly compressible files could
   * otherwise keep the server compressing gigabytes under a small max_bytes.
   */
  maxArchiveSourceBytes: number;
}

export const DEFAULT_ARTIFACT_LIMITS: ArtifactLimits = {
  defaultReadBytes: 10 * 1024 * 1024,
  maxReadBytes: 64 * 1024 * 1024,
  defaultListEntries: 10_000,
  maxListEntries: 100_000,
  defaultArchiveBytes: 32 * 1024 * 1024,
  maxArchiveBytes: 128 * 1024 * 1024,
  defaultArchiveEntries: 10_000,
  maxArchiveEntries: 100_000,
  maxArchiveSourceBytes: 2 * 1024 * 1024 * 1024,
};

/** Directory depth a listing or archive descends to; bounds the handles held open at once. */
const MAX_DEPTH = 128;
const CHUNK_BYTES = 64 * 1024;

type ReadParams = Omit<ArtifactReadRequest, "slot_id">;
type ListParams = Omit<ArtifactListRequest, "slot_id">;
type ArchiveParams = Omit<ArtifactArchiveRequest, "slot_id">;

const MIME_BY_EXTENSION: Record<string, string> = {
  ".txt": "text/plain", ".log": "text/plain", ".md": "text/markdown", ".csv": "text/csv",
  ".tsv": "text/tab-separated-values", ".html": "text/html", ".htm": "text/html", ".css": "text/css",
  ".xml": "application/xml", ".json": "application/json", ".jsonl": "application/jsonl",
  ".ndjson": "application/x-ndjson", ".yaml": "application/yaml", ".yml": "application/yaml",
  ".toml": "application/toml", ".js": "text/javascript", ".mjs": "text/javascript", ".cjs": "text/javascript",
  ".ts": "text/x-typescript", ".py": "text/x-python", ".sh": "text/x-shellscript", ".c": "text/x-c",
  ".h": "text/x-c", ".cpp": "text/x-c++", ".rs": "text/x-rust", ".go": "text/x-go", ".java": "text/x-java",
  ".rb": "text/x-ruby", ".diff": "text/x-diff", ".patch": "text/x-diff", ".svg": "image/svg+xml",
  ".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif",
  ".webp": "image/webp", ".bmp": "image/bmp", ".ico": "image/x-icon", ".pdf": "application/pdf",
  ".zip": "application/zip", ".gz": "application/gzip", ".tgz": "application/gzip", ".tar": "application/x-tar",
  ".bz2": "application/x-bzip2", ".xz": "application/x-xz", ".wasm": "application/wasm",
  ".mp3": "audio/mpeg", ".wav": "audio/wav", ".mp4": "video/mp4", ".webm": "video/webm",
  ".parquet": "application/vnd.apache.parquet", ".npy": "application/octet-stream",
};

/** MIME type guessed from the file name's extension. */
export function mimeFor(path: string): string {
  return MIME_BY_EXTENSION[extname(path).toLowerCase()] ?? "application/octet-stream";
}

function clampLimit(requested: number | undefined, fallback: number, ceiling: number): number {
  return Math.min(requested ?? fallback, ceiling);
}

function userError(err: unknown): string {
  if (err instanceof WorkspacePathError) return err.message;
  throw err;
}

export async function readArtifact(
  workspaceDir: PathScope,
  req: ReadParams,
  limits: ArtifactLimits = DEFAULT_ARTIFACT_LIMITS,
  /** The slot's abort signal: a long call stops at its next step once it fires (core/cut-off.ts). */
  signal?: AbortSignal,
): Promise<ArtifactReadResponse> {
  const encoding = req.encoding ?? "text";
  const fail = (error: string, extra: Partial<ArtifactReadResponse> = {}): ArtifactReadResponse => ({
    success: false, content: "", encoding, truncated: false, bytes: 0, file_size: 0,
    path: req.path, mime: mimeFor(req.path), sha256: null, error, ...extra,
  });
  let entry;
  try {
    entry = await resolveInWorkspace(workspaceDir, req.path, { intent: "read" });
  } catch (err) {
    return fail(userError(err));
  }
  const { handle, path, stat } = entry;
  try {
    const where = { path, mime: mimeFor(path) };
    if (stat.isDirectory()) {
      return fail(`path ${JSON.stringify(req.path)} is a directory; use /artifacts/list or /artifacts/archive`, where);
    }
    if (!stat.isFile()) return fail(`path ${JSON.stringify(req.path)} is not a regular file`, where);
    const limit = clampLimit(req.max_bytes, limits.defaultReadBytes, limits.maxReadBytes);
    const { data, truncated } = await readHead(handle, limit);
    let content: string;
    let returned: Buffer;
    if (encoding === "base64") {
      content = data.toString("base64");
      returned = data;
    } else {
      const text = decodeText(data, truncated);
      if (!text) {
        return fail(
          `path ${JSON.stringify(req.path)} is binary (not UTF-8 text); read it with encoding "base64"`,
          { ...where, file_size: stat.size },
        );
      }
      content = text.text;
      returned = data.subarray(0, text.bytes);
    }
    return {
      success: true,
      content,
      encoding,
      truncated,
      bytes: returned.length,
      file_size: stat.size,
      ...where,
      // Hash of the bytes returned (equal to the file's hash when not truncated).
      sha256: req.include_sha256 ? createHash("sha256").update(returned).digest("hex") : null,
    };
  } finally {
    await handle.close();
  }
}

type EntryType = "file" | "dir" | "symlink" | "other";

function typeOf(d: Dirent | Stats): EntryType {
  if (d.isSymbolicLink()) return "symlink";
  if (d.isDirectory()) return "dir";
  if (d.isFile()) return "file";
  return "other";
}

/**
 * Up to `limit` entries of an open directory, sorted by name so listings and archives are
 * deterministic. Read as a stream: a directory of a million files costs `limit` entries
 * of memory, not a million.
 */
async function entriesOf(dir: FileHandle, limit: number): Promise<Dirent[]> {
  const list: Dirent[] = [];
  const stream = await opendir(fdPath(dir), { bufferSize: 256 });
  try {
    for (let d = await stream.read(); d !== null && list.length < limit; d = await stream.read()) list.push(d);
  } finally {
    await stream.close();
  }
  return list.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

export async function listArtifacts(
  workspaceDir: PathScope,
  req: ListParams,
  limits: ArtifactLimits = DEFAULT_ARTIFACT_LIMITS,
  /** The slot's abort signal: a long call stops at its next step once it fires (core/cut-off.ts). */
  signal?: AbortSignal,
): Promise<ArtifactListResponse> {
  const userPath = req.path ?? ".";
  const maxEntries = clampLimit(req.max_entries, limits.defaultListEntries, limits.maxListEntries);
  let entry;
  try {
    entry = await resolveInWorkspace(workspaceDir, userPath, { intent: "directory" });
  } catch (err) {
    return { success: false, entries: [], truncated: false, path: userPath, error: userError(err) };
  }
  const entries: ArtifactListResponse["entries"] = [];
  let truncated = false;

  const walk = async (dir: FileHandle, rel: string, depth: number): Promise<void> => {
    for (const dirent of await entriesOf(dir, maxEntries - entries.length + 1)) {
      throwIfCutOff(signal);
      if (entries.length >= maxEntries) {
        truncated = true;
        return;
      }
      const childRel = joinRelative(rel, dirent.name);
      const type = typeOf(dirent);
      let size = 0;
      if (type === "file") {
        const st = await lstat(fdPath(dir, dirent.name)).catch(() => undefined);
        size = st?.size ?? 0;
      }
      entries.push({ path: childRel, type, size });
      if (type !== "dir" || !req.recursive) continue;
      if (depth >= MAX_DEPTH) {
        truncated = true;
        continue;
      }
      const sub = await openChild(dir, dirent.name, fsc.O_RDONLY | fsc.O_DIRECTORY);
      if (!sub) continue; // vanished or swapped for a symlink since readdir: not followed
      try {
        await walk(sub, childRel, depth + 1);
      } finally {
        await sub.close();
      }
      if (truncated && entries.length >= maxEntries) return;
    }
  };

  try {
    await walk(entry.handle, entry.path, 0);
  } finally {
    await entry.handle.close();
  }
  return { success: true, entries, truncated, path: entry.path };
}

class TooManyEntriesError extends Error {}
class TooMuchDataError extends Error {}
class TooDeepError extends Error {}

export async function archiveArtifacts(
  workspaceDir: PathScope,
  req: ArchiveParams,
  limits: ArtifactLimits = DEFAULT_ARTIFACT_LIMITS,
  /** The slot's abort signal: a long call stops at its next step once it fires (core/cut-off.ts). */
  signal?: AbortSignal,
): Promise<ArtifactArchiveResponse> {
  const userPath = req.path ?? ".";
  const maxBytes = clampLimit(req.max_bytes, limits.defaultArchiveBytes, limits.maxArchiveBytes);
  const maxEntries = clampLimit(req.max_entries, limits.defaultArchiveEntries, limits.maxArchiveEntries);
  const fail = (error: string, path = userPath): ArtifactArchiveResponse => ({
    success: false, content: "", encoding: "base64", format: "tar.gz", bytes: 0, entries: 0, path, error,
  });
  if ((req.format ?? "tar.gz") !== "tar.gz") return fail(`format ${JSON.stringify(req.format)} is not supported; use "tar.gz"`);
  let entry;
  try {
    entry = await resolveInWorkspace(workspaceDir, userPath, { intent: "read" });
  } catch (err) {
    return fail(userError(err));
  }
  const tar = new TarGzWriter(maxBytes);
  // `seen` counts every entry met (skipped fifos too), so a directory read only up to the
  // budget can never drop entries silently; `written` is what the archive holds.
  let seen = 0;
  let written = 0;
  const see = () => {
    if (++seen > maxEntries) throw new TooManyEntriesError();
  };
  let sourceBytes = 0;
  // Entries are named by their workspace-relative path; archiving the root names them bare.
  const addFile = async (handle: FileHandle, stat: Stats, rel: string) => {
    written++;
    sourceBytes += stat.size;
    if (sourceBytes > limits.maxArchiveSourceBytes) throw new TooMuchDataError();
    await tar.writeHeader({ path: rel, type: "file", size: stat.size, mode: stat.mode, mtimeMs: stat.mtimeMs, uid: stat.uid, gid: stat.gid });
    // Exactly stat.size bytes, even if a command grows or shrinks the file meanwhile.
    let offset = 0;
    while (offset < stat.size) {
      throwIfCutOff(signal);
      const buf = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, stat.size - offset));
      const { bytesRead } = await handle.read(buf, 0, buf.length, offset);
      if (bytesRead === 0) {
        await tar.writeData(Buffer.alloc(stat.size - offset));
        offset = stat.size;
        break;
      }
      await tar.writeData(bytesRead === buf.length ? buf : buf.subarray(0, bytesRead));
      offset += bytesRead;
    }
    await tar.endFile(stat.size);
  };
  const addTree = async (dir: FileHandle, stat: Stats, rel: string, depth: number) => {
    if (rel !== ".") {
      written++;
      await tar.writeHeader({ path: rel, type: "dir", size: 0, mode: stat.mode, mtimeMs: stat.mtimeMs, uid: stat.uid, gid: stat.gid });
    }
    if (depth >= MAX_DEPTH) throw new TooDeepError();
    for (const dirent of await entriesOf(dir, maxEntries - seen + 1)) {
      throwIfCutOff(signal);
      see();
      const childRel = joinRelative(rel, dirent.name);
      if (dirent.isSymbolicLink()) {
        // Stored as a link, never followed: its target's content is not read.
        const target = await readlink(fdPath(dir, dirent.name)).catch(() => undefined);
        const st = await lstat(fdPath(dir, dirent.name)).catch(() => undefined);
        if (target === undefined || !st) continue;
        written++;
        await tar.writeHeader({ path: childRel, type: "symlink", size: 0, mode: 0o777, mtimeMs: st.mtimeMs, uid: st.uid, gid: st.gid, linkTarget: target });
        continue;
      }
      if (!dirent.isFile() && !dirent.isDirectory()) continue; // fifos, sockets, devices: no content to archive
      const child = await openChild(dir, dirent.name, fsc.O_RDONLY);
      if (!child) continue; // vanished or swapped for a symlink since readdir
      try {
        const st = await child.stat();
        if (st.isDirectory()) await addTree(child, st, childRel, depth + 1);
        else if (st.isFile()) await addFile(child, st, childRel);
      } finally {
        await child.close();
      }
    }
  };

  try {
    if (entry.path !== ".") see();
    if (entry.stat.isDirectory()) await addTree(entry.handle, entry.stat, entry.path, 0);
    else if (entry.stat.isFile()) await addFile(entry.handle, entry.stat, entry.path);
    else return fail(`path ${JSON.stringify(userPath)} is not a regular file or directory`, entry.path);
    const archive = await tar.finish();
    return {
      success: true,
      content: archive.toString("base64"),
      encoding: "base64",
      format: "tar.gz",
      bytes: archive.length,
      entries: written,
      path: entry.path,
    };
  } catch (err) {
    tar.destroy();
    if (err instanceof TooManyEntriesError) {
      return fail(
        `path ${JSON.stringify(userPath)} has more than ${maxEntries} entries (max_entries); archive a subdirectory or raise max_entries`,
        entry.path,
      );
    }
    if (err instanceof TooDeepError) {
      return fail(`path ${JSON.stringify(userPath)} nests directories deeper than ${MAX_DEPTH} levels; archive a subdirectory`, entry.path);
    }
    if (err instanceof TooMuchDataError) {
      return fail(
        `path ${JSON.stringify(userPath)} holds more than ${limits.maxArchiveSourceBytes} bytes of file data; archive a subdirectory`,
        entry.path,
      );
    }
    if (err instanceof ArchiveTooLargeError) {
      return fail(
        `the archive of ${JSON.stringify(userPath)} exceeds max_bytes (${maxBytes} bytes compressed); archive a subdirectory or raise max_bytes`,
        entry.path,
      );
    }
    throw err;
  } finally {
    await entry.handle.close();
  }
}
