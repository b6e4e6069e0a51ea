import { createHash } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { gunzipSync } from "node:zlib";
import { requestTarget } from "../http/target.js";
import { E2bApiError } from "./errors.js";
import { nodeHeaders, sandboxForHeaders } from "./envd-auth.js";
import { workspacePath } from "./paths.js";
import { SandboxRegistry, type E2bSandbox } from "./sandboxes.js";
import { HELPER_TAG } from "./slot-processes.js";

/**
 * envd's `/files` routes: download (GET) and upload (POST, multipart/form-data or
 * application/octet-stream), run inside the sandbox's slot like its commands (`cat`), so
 * they see and write exactly what the sandbox's commands do. Paths must lie in the
 * workspace; uploads above `maxBytes` are refused with 413 before anything is written.
 * Besides `X-Access-Token`, a signed URL (`signature`, from the SDK's uploadUrl/downloadUrl)
 * opens the one path and operation it was signed for.
 */

const NOT_FOUND = 44;
const IS_DIR = 45;
/** Stdin is sent to the slot in pieces of this size (each is one JSON request to the sandbox server). */
const INPUT_CHUNK = 4 * 1024 * 1024;

export async function handleFiles(registry: SandboxRegistry, req: IncomingMessage, res: ServerResponse, maxBytes: number): Promise<void> {
  const { query } = requestTarget(req.url);
  const op = req.method === "GET" ? "read" : req.method === "POST" ? "write" : undefined;
  if (!op) throw new E2bApiError(405, `method ${req.method} not allowed on /files`);
  const s = authorize(registry, req, query, op);
  if (op === "read") return download(s, res, workspacePath(query.get("path") ?? undefined));
  const files = await readUpload(req, query.get("path") ?? undefined, maxBytes);
  const written = [];
  for (const f of files) {
    const dest = workspacePath(f.path);
    await write(s, dest, f.data);
    written.push({ name: dest.slice(dest.lastIndexOf("/") + 1), type: "file", path: dest });
  }
  const body = JSON.stringify(written);
  res.writeHead(200, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
  res.end(body);
}

function authorize(registry: SandboxRegistry, req: IncomingMessage, query: URLSearchParams, op: "read" | "write"): E2bSandbox {
  const signature = query.get("signature");
  if (!signature || req.headers["x-access-token"]) return sandboxForHeaders(registry, nodeHeaders(req.headers));
  // A signed URL: no token header, the signature proves it was made with the token.
  const id = req.headers["e2b-sandbox-id"];
  const s = typeof id === "string" ? registry.get(id) : undefined;
  if (!s) throw new E2bApiError(502, `sandbox '${String(id)}' not found: it was killed, timed out, or never existed`);
  const exp = query.get("signature_expiration");
  if (exp && Number(exp) * 1000 < Date.now()) throw new E2bApiError(401, "the signed URL has expired");
  const raw = `${query.get("path") ?? ""}:${op}:${query.get("username") ?? ""}:${s.accessToken}${exp ? `:${exp}` : ""}`;
  const expected = "v1_" + createHash("sha256").update(raw).digest("base64").replace(/=+$/, "");
  if (!SandboxRegistry.tokenMatches({ ...s, accessToken: expected }, signature)) throw new E2bApiError(401, "invalid signature for this path and operation");
  return s;
}

async function download(s: E2bSandbox, res: ServerResponse, path: string): Promise<void> {
  const r = await s.processes.run("/bin/sh", ["-c", `[ -e "$1" ] || exit ${NOT_FOUND}; [ -d "$1" ] && exit ${IS_DIR}; exec cat -- "$1"`, "sh", path]);
  if (r.exitCode === NOT_FOUND) throw new E2bApiError(404, `file '${path}' not found`);
  if (r.exitCode === IS_DIR) throw new E2bApiError(400, `'${path}' is a directory`);
  if (r.exitCode !== 0) throw new E2bApiError(500, `reading '${path}' failed: ${r.stderr.trim() || `exit ${r.exitCode}`}`);
  res.writeHead(200, { "content-type": "application/octet-stream", "content-length": r.stdout.length });
  res.end(r.stdout);
}

async function write(s: E2bSandbox, path: string, data: Buffer): Promise<void> {
  const p = await s.processes.start({ cmd: "/bin/sh", args: ["-c", `mkdir -p -- "$(dirname -- "$1")" && exec cat > "$1"`, "sh", path], stdin: true, tag: HELPER_TAG, workspace_alias: "/home/user", cwd: "/home/user" });
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
    p.close();
  }
  if (!end) throw new E2bApiError(502, `writing '${path}': the sandbox server ended the stream early`);
  if (end.exit_code !== 0) {
    const msg = end.stderr.trim() || end.error || `exit ${end.exit_code}`;
    throw new E2bApiError(/no space/i.test(msg) ? 507 : /too large/i.test(msg) ? 413 : /permission denied|read-only/i.test(msg) ? 403 : 500, `writing '${path}' failed: ${msg}`);
  }
}

/** The uploaded files: one raw body (octet-stream, path from the query) or the parts of a multipart form. */
async function readUpload(req: IncomingMessage, queryPath: string | undefined, maxBytes: number): Promise<Array<{ path: string; data: Buffer }>> {
  const type = req.headers["content-type"] ?? "";
  let body = await readCapped(req, maxBytes);
  if (/^application\/octet-stream/i.test(type)) {
    if (req.headers["content-encoding"] === "gzip") body = gunzipSync(body, { maxOutputLength: maxBytes });
    if (!queryPath) throw new E2bApiError(400, "path is required for an octet-stream upload", "path");
    return [{ path: queryPath, data: body }];
  }
  if (!/^multipart\/form-data/i.test(type)) throw new E2bApiError(400, `unsupported upload content-type '${type}': send multipart/form-data or application/octet-stream`);
  // undici's (Node's) form parser: no hand-written multipart code.
  const form = await new Response(body as unknown as ConstructorParameters<typeof Response>[0], { headers: { "content-type": type } }).formData().catch((err: unknown) => {
    throw new E2bApiError(400, `malformed multipart upload: ${err instanceof Error ? err.message : String(err)}`);
  });
  const parts = form.getAll("file").filter((v): v is File => typeof v !== "string");
  if (parts.length === 0) throw new E2bApiError(400, "the upload has no 'file' part", "file");
  return Promise.all(parts.map(async (f) => ({ path: (parts.length === 1 && queryPath) || f.name, data: Buffer.from(await f.arrayBuffer()) })));
}

function readCapped(req: IncomingMessage, maxBytes: number): Promise<Buffer> {
  const declared = Number(req.headers["content-length"] ?? "0");
  const tooLarge = () => new E2bApiError(413, `upload is larger than this server's limit of ${maxBytes} bytes (--max-upload-mb)`);
  if (declared > maxBytes) {
    req.resume();
    return Promise.reject(tooLarge());
  }
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on("data", (c: Buffer) => {
      size += c.length;
      if (size > maxBytes) {
        req.removeAllListeners("data");
        req.resume();
        reject(tooLarge());
        return;
      }
      chunks.push(c);
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}
