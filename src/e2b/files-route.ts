import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { gunzipSync } from "node:zlib";
import { requestTarget } from "../http/target.js";
import type { ProcessEvent } from "../protocol/process-session.js";
import type { BudgetLease, UploadBudget } from "./upload-budget.js";
import { E2bApiError } from "./errors.js";
import { metadataFromHeaders, setfattrPair, type FileMetadata } from "./file-metadata.js";
import { nodeHeaders, sandboxForHeaders } from "./envd-auth.js";
import { E2B_HOME, workspacePath } from "./paths.js";
import type { E2bSandbox, SandboxRegistry } from "./sandboxes.js";
import type { ProcessStream } from "./slot-processes.js";

/**
 * envd's `/files` routes: download (GET) and upload (POST, multipart/form-data or
 * application/octet-stream), run inside the sandbox's slot like its commands, so they see
 * and write exactly what the sandbox's commands do. Paths must lie in the workspace.
 *
 * Bounds (docs/e2b.md): a download reads regular files only, up to `maxDownloadBytes`, streamed
 * with backpressure (never held whole), within `timeoutMs`; an upload is at most
 * `maxUploadBytes` (after gzip), and the bytes all uploads hold at once are bounded by a
 * server-wide and a per-sandbox budget. An upload of several files is all or nothing: every
 * file is staged in the slot first and moved into place only when all arrived.
 *
 * Besides `X-Access-Token`, a signed URL (`signature`, from the SDK's uploadUrl/downloadUrl)
 * opens exactly the one path and operation it was signed for; without `E2b-Sandbox-Id` (the
 * SDK pointed at this server with E2B_SANDBOX_URL) the signature itself names the sandbox.
 */

export interface FilesLimits {
  maxUploadBytes: number;
  maxDownloadBytes: number;
  /** Deadline of one download or upload's work in the slot, ms. */
  timeoutMs: number;
  uploads: UploadBudget;
}

const NOT_FOUND = 44;
const IS_DIR = 45;
const NOT_REGULAR = 46;
const TOO_LARGE = 47;
const NOT_READABLE = 48;
/** The commit helper's exit code: a destination the sandbox's user may not write (checked before any file moves). */
const NOT_WRITABLE = 49;
/** The commit helper's exit code: the upload's metadata could not be stored as xattrs (no setfattr, or the filesystem refuses user xattrs). */
const META_FAILED = 50;
/** Stdin is sent to the slot in pieces of this size (each is one JSON request to the sandbox server). */
const INPUT_CHUNK = 4 * 1024 * 1024;
/** A download this small is answered with a Content-Length (and a clean error if it fails). */
const SMALL_DOWNLOAD = 256 * 1024;

export async function handleFiles(registry: SandboxRegistry, req: IncomingMessage, res: ServerResponse, limits: FilesLimits): Promise<void> {
  const { query } = requestTarget(req.url);
  const op = req.method === "GET" ? "read" : req.method === "POST" ? "write" : undefined;
  if (!op) throw new E2bApiError(405, `method ${req.method} not allowed on /files`);
  const { sandbox: s, signed } = authorize(registry, req, query, op);
  if (op === "read") return download(s, req, res, workspacePath(query.get("path") ?? undefined), limits);
  // Checked before the body is read: a bad key refuses the upload, nothing is written.
  const metadata = metadataFromHeaders(req.headers);
  const lease = limits.uploads.open(s.id);
  try {
    const files = await readUpload(req, query.get("path") ?? undefined, limits.maxUploadBytes, lease, signed);
    // Every path is checked before anything is written.
    const dests = files.map((f) => workspacePath(f.path));
    await writeAll(s, dests, files.map((f) => f.data), metadata, limits.timeoutMs);
    const body = JSON.stringify(dests.map((dest) => ({ name: dest.slice(dest.lastIndexOf("/") + 1), type: "file", path: dest, ...(metadata ? { metadata } : {}) })));
    res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
  } finally {
    lease.release();
  }
}

/** The SDK's signature: `v1_` + base64(sha256("path:op:user:token[:expiry]")), padding stripped. */
function signatureFor(s: E2bSandbox, query: URLSearchParams, op: "read" | "write"): string {
  const exp = query.get("signature_expiration");
  const raw = `${query.get("path") ?? ""}:${op}:${query.get("username") ?? ""}:${s.accessToken}${exp ? `:${exp}` : ""}`;
  return "v1_" + createHash("sha256").update(raw).digest("base64").replace(/=+$/, "");
}

function sameString(a: string, b: string): boolean {
  return timingSafeEqual(createHash("sha256").update(a).digest(), createHash("sha256").update(b).digest());
}

function authorize(registry: SandboxRegistry, req: IncomingMessage, query: URLSearchParams, op: "read" | "write"): { sandbox: E2bSandbox; signed: boolean } {
  const signature = query.get("signature");
  if (!signature || req.headers["x-access-token"]) return { sandbox: sandboxForHeaders(registry, nodeHeaders(req.headers)), signed: false };
  // A signed URL: no token header, the signature proves it was made with the token, for this path and operation.
  const exp = query.get("signature_expiration");
  if (exp !== null && !/^\d{1,12}$/.test(exp)) throw new E2bApiError(400, "signature_expiration must be a Unix time in seconds", "signature_expiration");
  if (exp !== null && Number(exp) * 1000 < Date.now()) throw new E2bApiError(401, "signature is already expired"); // envd's words, which E2B code compares
  const id = req.headers["e2b-sandbox-id"];
  if (typeof id === "string") {
    const s = registry.get(id);
    if (!s) throw new E2bApiError(502, `sandbox '${id}' was not found: it was killed, timed out, or never existed`);
    if (!sameString(signatureFor(s, query, op), signature)) throw new E2bApiError(401, "invalid signature for this path and operation");
    return { sandbox: s, signed: true };
  }
  // No sandbox id (E2B_SANDBOX_URL points here): the sandbox whose token made the signature.
  const s = registry.list().find((c) => sameString(signatureFor(c, query, op), signature));
  if (!s) throw new E2bApiError(401, "invalid signature: it matches no running sandbox for this path and operation");
  return { sandbox: s, signed: true };
}

/**
 * Streams a regular file out of the slot: checked first (exists, not a directory, a regular
 * file, readable, at most `maxDownloadBytes`), then `head -c` one byte past the bound, so a
 * file that grows while read (or a symlink swapped for a device) is cut off too.
 */
const READ_SCRIPT = `[ -e "$1" ] || exit ${NOT_FOUND}; [ -d "$1" ] && exit ${IS_DIR}; [ -f "$1" ] || exit ${NOT_REGULAR}; [ -r "$1" ] || exit ${NOT_READABLE}
n=$(stat -L -c %s -- "$1") || exit 1; [ "$n" -gt "$2" ] && { echo "$n" >&2; exit ${TOO_LARGE}; }; echo "$n"; exec head -c "$(($2 + 1))" -- "$1"`;

async function download(s: E2bSandbox, req: IncomingMessage, res: ServerResponse, path: string, limits: FilesLimits): Promise<void> {
  const cap = limits.maxDownloadBytes;
  const p = await s.processes.startHelper({ cmd: "/bin/sh", args: ["-c", READ_SCRIPT, "sh", path, String(cap)], stdin: false, workspace_alias: E2B_HOME, cwd: E2B_HOME });
  let timedOut = false;
  const stop = () => {
    p.close();
    void s.processes.signal(p.pid, "SIGKILL").catch(() => undefined);
  };
  const timer = setTimeout(() => {
    timedOut = true;
    stop();
  }, limits.timeoutMs);
  // The client went away: the read in the slot ends with it.
  const onClose = () => {
    if (!res.writableFinished) stop();
  };
  res.once("close", onClose);
  try {
    await relayFile(p, res, path, cap, () => timedOut, limits.timeoutMs);
  } finally {
    clearTimeout(timer);
    res.off("close", onClose);
    p.close();
  }
}

async function relayFile(p: ProcessStream, res: ServerResponse, path: string, cap: number, timedOut: () => boolean, timeoutMs: number): Promise<void> {
  let header: string | undefined;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  let sent = 0;
  let stderr = "";
  let end: Extract<ProcessEvent, { type: "end" }> | undefined;
  const send = async (chunk: Buffer) => {
    sent += chunk.length;
    if (sent > cap) throw new E2bApiError(413, `'${path}' grew past this server's download limit of ${cap} bytes while being read (--max-download-mb)`);
    if (!res.write(chunk)) await drainedOrClosed(res);
  };
  for await (const ev of p.events) {
    if (ev.type === "end") {
      end = ev;
      break;
    }
    if (ev.type === "start") continue;
    const data = Buffer.from(ev.data, "base64");
    if (ev.type === "stderr") {
      if (stderr.length < 4096) stderr += data.toString("utf8");
      continue;
    }
    let chunk = data;
    if (header === undefined) {
      // The first line is the checked size; the file's bytes follow.
      const nl = chunk.indexOf(10);
      if (nl < 0) throw new E2bApiError(502, `reading '${path}': the helper's output did not begin with the file's size`);
      header = chunk.subarray(0, nl).toString("utf8");
      chunk = chunk.subarray(nl + 1);
    }
    if (res.headersSent) {
      await send(chunk);
      continue;
    }
    pending.push(chunk);
    pendingBytes += chunk.length;
    if (pendingBytes > SMALL_DOWNLOAD) {
      // Large: headers now, the rest streamed as it comes (held back while the client is slow).
      res.writeHead(200, { "content-type": "application/octet-stream" });
      const first = pending;
      pending = [];
      for (const c of first) await send(c);
    }
  }
  if (timedOut()) throw new E2bApiError(504, `reading '${path}' did not finish within ${timeoutMs / 1000} s (--file-timeout-s)`);
  if (!end) throw new E2bApiError(502, `reading '${path}': the sandbox server ended the stream early`);
  if (end.exit_code === NOT_FOUND) throw new E2bApiError(404, `file '${path}' not found`);
  if (end.exit_code === IS_DIR) throw new E2bApiError(400, `'${path}' is a directory`);
  if (end.exit_code === NOT_REGULAR) throw new E2bApiError(400, `'${path}' is not a regular file (a device, FIFO or socket): /files reads regular files only`);
  if (end.exit_code === NOT_READABLE) throw new E2bApiError(403, `'${path}' is not readable by the sandbox's user`);
  if (end.exit_code === TOO_LARGE) throw new E2bApiError(413, `'${path}' is ${stderr.trim()} bytes, above this server's download limit of ${cap} bytes (--max-download-mb)`);
  if (end.exit_code !== 0) throw new E2bApiError(500, `reading '${path}' failed: ${stderr.trim() || `exit ${end.exit_code}`}`);
  if (!res.headersSent) {
    const body = Buffer.concat(pending);
    if (body.length > cap) throw new E2bApiError(413, `'${path}' grew past this server's download limit of ${cap} bytes while being read (--max-download-mb)`);
    res.writeHead(200, { "content-type": "application/octet-stream", "content-length": body.length });
    res.end(body);
    return;
  }
  res.end();
}

/**
 * Writes every file or none: each is streamed into a staging directory in the workspace
 * (the same filesystem, so the final step is a rename), then one helper checks that every
 * destination can take a file and moves them all into place. A failure before that removes
 * the staging directory and leaves the workspace as it was.
 */
const STAGE_SCRIPT = `mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"`;
const COMMIT_SCRIPT = `stage=$1; n=$2; shift 2
while [ "$n" -gt 0 ]; do
  for f in "$stage"/*; do setfattr -h -n "$1" -v "$2" -- "$f" || exit ${META_FAILED}; done
  shift 2; n=$((n - 1))
done
for d in "$@"; do
  if [ -d "$d" ] && [ ! -L "$d" ]; then echo "'$d' is a directory" >&2; exit ${IS_DIR}; fi
  p=$(dirname -- "$d")
  while [ "$p" != / ]; do if [ -e "$p" ] && [ ! -d "$p" ]; then echo "'$p' is not a directory" >&2; exit ${IS_DIR}; fi; p=$(dirname -- "$p"); done
  p=$(dirname -- "$d"); while [ ! -e "$p" ]; do p=$(dirname -- "$p"); done
  if [ ! -w "$p" ] || { [ -e "$d" ] && [ ! -w "$d" ]; }; then echo "'$d': permission denied" >&2; exit ${NOT_WRITABLE}; fi
done
i=0
for d in "$@"; do
  mkdir -p -- "$(dirname -- "$d")" || exit 1
  [ -f "$d" ] && chmod --reference="$d" -- "$stage/$i" 2>/dev/null
  mv -f -T -- "$stage/$i" "$d" || exit 1
  i=$((i + 1))
done
rm -rf -- "$stage"`;

/** /workspace and /home/user are the same directory: one spelling, so every rename stays on one mount. */
const homePath = (p: string): string => (p === "/workspace" || p.startsWith("/workspace/") ? E2B_HOME + p.slice("/workspace".length) : p);

async function writeAll(s: E2bSandbox, dests: string[], data: Buffer[], metadata: FileMetadata | undefined, timeoutMs: number): Promise<void> {
  const stage = `${E2B_HOME}/.slotpool-upload-${randomBytes(6).toString("hex")}`;
  const deadline = AbortSignal.timeout(timeoutMs);
  try {
    for (let i = 0; i < dests.length; i++) await stageOne(s, `${stage}/${i}`, dests[i]!, data[i]!, deadline);
    // Set on the staged files: each destination gets a new inode, so an overwrite leaves no stale metadata.
    const pairs = Object.entries(metadata ?? {}).flatMap(([k, v]) => setfattrPair(k, v));
    const r = await s.processes.run("/bin/sh", ["-c", COMMIT_SCRIPT, "sh", stage, String(pairs.length / 2), ...pairs, ...dests.map(homePath)]);
    if (r.exitCode === META_FAILED) {
      const why = r.stderr.trim();
      throw new E2bApiError(500, `storing the upload's metadata as user xattrs failed: ${/not found/i.test(why) ? "setfattr is not installed in the sandbox (Debian package attr)" : why}; nothing was written`);
    }
    if (r.exitCode === IS_DIR) throw new E2bApiError(400, `cannot write the upload: ${r.stderr.trim()}; nothing was written`);
    if (r.exitCode === NOT_WRITABLE) throw new E2bApiError(403, `cannot write the upload: ${r.stderr.trim()} for the sandbox's user; nothing was written`);
    if (r.exitCode !== 0) throw writeError(dests.join(", "), r.stderr.trim() || `exit ${r.exitCode}`);
  } catch (err) {
    await s.processes.run("/bin/rm", ["-rf", "--", stage]).catch(() => undefined);
    if (deadline.aborted) throw new E2bApiError(504, `the upload did not finish within ${timeoutMs / 1000} s (--file-timeout-s); nothing was written`);
    throw err;
  }
}

async function stageOne(s: E2bSandbox, staged: string, dest: string, data: Buffer, deadline: AbortSignal): Promise<void> {
  const p = await s.processes.startHelper({ cmd: "/bin/sh", args: ["-c", STAGE_SCRIPT, "sh", staged], stdin: true, workspace_alias: E2B_HOME, cwd: E2B_HOME }, deadline);
  const kill = () => {
    p.close();
    void s.processes.signal(p.pid, "SIGKILL").catch(() => undefined);
  };
  deadline.addEventListener("abort", kill, { once: true });
  let end;
  try {
    for (let off = 0; off < data.length; off += INPUT_CHUNK) await s.processes.input(p.pid, data.subarray(off, off + INPUT_CHUNK));
    await s.processes.closeStdin(p.pid);
    let stderr = "";
    for await (const ev of p.events) {
      if (ev.type === "stderr") stderr += Buffer.from(ev.data, "base64").toString("utf8");
      if (ev.type === "end") end = { ...ev, stderr };
    }
  } finally {
    deadline.removeEventListener("abort", kill);
    p.close();
  }
  if (!end) throw new E2bApiError(502, `writing '${dest}': the sandbox server ended the stream early`);
  if (end.exit_code !== 0) throw writeError(dest, end.stderr.trim() || end.error || `exit ${end.exit_code}`);
}

function writeError(path: string, msg: string): E2bApiError {
  return new E2bApiError(/no space|quota/i.test(msg) ? 507 : /too large/i.test(msg) ? 413 : /permission denied|read-only/i.test(msg) ? 403 : 500, `writing '${path}' failed: ${msg}`);
}

/**
 * The uploaded files: one raw body (octet-stream, path from the query) or the parts of a
 * multipart form. A signed URL writes exactly its one path: one file, at the path signed.
 */
async function readUpload(req: IncomingMessage, queryPath: string | undefined, maxBytes: number, lease: BudgetLease, signed: boolean): Promise<Array<{ path: string; data: Buffer }>> {
  const type = req.headers["content-type"] ?? "";
  let body = await readCapped(req, maxBytes, lease);
  const encoding = req.headers["content-encoding"];
  if (encoding === "gzip") body = gunzipBounded(body, maxBytes, lease);
  else if (encoding !== undefined && encoding !== "identity") throw new E2bApiError(415, `unsupported Content-Encoding '${encoding}': send gzip or none`);
  if (signed && !queryPath) throw new E2bApiError(400, "a signed upload URL must name its path", "path");
  if (/^application\/octet-stream/i.test(type)) {
    if (!queryPath) throw new E2bApiError(400, "path is required for an octet-stream upload", "path");
    return [{ path: queryPath, data: body }];
  }
  if (!/^multipart\/form-data/i.test(type)) throw new E2bApiError(400, `unsupported upload content-type '${type}': send multipart/form-data or application/octet-stream`);
  // undici's (Node's) form parser: no hand-written multipart code.
  const form = await new Response(body as unknown as ConstructorParameters<typeof Response>[0], { headers: { "content-type": type } }).formData().catch((err: unknown) => {
    throw new E2bApiError(400, `malformed multipart upload: ${err instanceof Error ? err.message : String(err)}`);
  });
  // A part with a file name is a file; one without (form.append('file', 'text'), E2B's own
  // signing test) is a form field, its value text: envd takes both, the path then from the query.
  const parts = form.getAll("file");
  if (parts.length === 0) throw new E2bApiError(400, "the upload has no 'file' part", "file");
  if (signed && parts.length !== 1) throw new E2bApiError(400, `a signed upload URL writes exactly one file, its signed path; this upload has ${parts.length} parts`, "file");
  return Promise.all(
    parts.map(async (f, i) => {
      const path = (parts.length === 1 && queryPath) || (typeof f === "string" ? "" : f.name);
      if (!path) throw new E2bApiError(400, `part ${i + 1} of the upload has no file name, and the upload names no path (?path=)`, "file");
      return { path, data: typeof f === "string" ? Buffer.from(f, "utf8") : Buffer.from(await f.arrayBuffer()) };
    }),
  );
}

/** Gunzips with the upload bound applied to what comes out (a gzip bomb is a 413, corrupt gzip a 400). */
function gunzipBounded(body: Buffer, maxBytes: number, lease: BudgetLease): Buffer {
  let out: Buffer;
  try {
    out = gunzipSync(body, { maxOutputLength: maxBytes });
  } catch (err) {
    if (err instanceof RangeError || (err as { code?: string }).code === "ERR_BUFFER_TOO_LARGE") {
      throw new E2bApiError(413, `the gzip upload expands past this server's limit of ${maxBytes} bytes (--max-upload-mb)`);
    }
    throw new E2bApiError(400, `the upload says Content-Encoding gzip but is not valid gzip: ${err instanceof Error ? err.message : String(err)}`);
  }
  lease.take(out.length);
  return out;
}

function readCapped(req: IncomingMessage, maxBytes: number, lease: BudgetLease): Promise<Buffer> {
  const declared = Number(req.headers["content-length"] ?? "0");
  const tooLarge = () => new E2bApiError(413, `upload is larger than this server's limit of ${maxBytes} bytes (--max-upload-mb)`);
  if (declared > maxBytes) return Promise.reject(tooLarge());
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (c: Buffer) => {
      size += c.length;
      try {
        if (size > maxBytes) throw tooLarge();
        lease.take(c.length);
      } catch (err) {
        // The rest of the body is drained unread (the server's error handler resumes it).
        req.off("data", onData);
        chunks.length = 0;
        reject(err instanceof Error ? err : new Error(String(err)));
        return;
      }
      chunks.push(c);
    };
    req.on("data", onData);
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/**
 * Resolves once `res` drains or closes, and leaves no listener behind: a race of two
 * `events.once` calls would leave the loser's close/error listeners on the response at every
 * full buffer (MaxListenersExceededWarning after ten on a large download).
 */
function drainedOrClosed(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    if (res.destroyed) return resolve(); // closed already: no event is coming
    const done = (): void => {
      res.off("drain", done);
      res.off("close", done);
      resolve();
    };
    res.on("drain", done);
    res.on("close", done);
  });
}
