import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { z } from "zod";
import { readJsonBody } from "../http/body.js";
import { requestTarget } from "../http/target.js";
import { E2bApiError } from "./errors.js";

/**
 * E2B's secrets (the SDKs' `Secret`): named values a sandbox gets as environment variables,
 * through the placeholder `${e2b.secrets.<name>}` (`Secret.fill(name)`) in `Sandbox.create`'s
 * `envs`, resolved to the secret's current value when the sandbox is made. Values are
 * write-only: no answer, listing, log line or `/health` carries one (the API answers the
 * secret's id, name, version, metadata and times; an unknown name in a placeholder is named,
 * its value never). Routes as E2B's API (github:e2b-dev/infra, handlers/secrets.go), behind
 * the API key: `POST /secrets`, `GET /secrets` (`limit`, `nextToken`, `x-next-token`),
 * `GET|POST|DELETE /secrets/{id or name}`. Names: letters, digits, `_` and `-`, at most 128,
 * kept lowercase, not starting with `sec_` (ids do). Kept in memory, or in `--secrets-file`
 * (mode 0600, rewritten whole on each change) to outlive the server.
 */

interface StoredSecret {
  secretID: string;
  name: string;
  value: string;
  currentVersion: number;
  metadata: Record<string, string>;
  createdAt: string;
  updatedAt: string;
}

const MAX_VALUE_BYTES = 64 * 1024;
const MAX_SECRETS = 10_000;
const PLACEHOLDER = /\$\{e2b\.secrets\.([^{}]*)\}/g;

const Metadata = z.record(z.string().max(256), z.string().max(4096)).refine((m) => Object.keys(m).length <= 64, "at most 64 metadata entries");
const CreateBody = z.object({ name: z.string(), value: z.string(), metadata: Metadata.nullish() });
const UpdateBody = z.object({ value: z.string(), metadata: Metadata.nullish() });

/** E2B's name rule (secretsstore.NormalizeName): trimmed, [A-Za-z0-9_-]{1,128}, lowercase, not `sec_…`. */
export function normalizeSecretName(input: string): string | undefined {
  const name = input.trim();
  if (!/^[A-Za-z0-9_-]{1,128}$/.test(name)) return undefined;
  const lower = name.toLowerCase();
  return lower.startsWith("sec_") ? undefined : lower;
}

export class SecretStore {
  private readonly byId = new Map<string, StoredSecret>();

  constructor(private readonly file?: string) {
    if (file && existsSync(file)) {
      const stored = JSON.parse(readFileSync(file, "utf8")) as StoredSecret[];
      for (const s of stored) this.byId.set(s.secretID, s);
    }
  }

  /** By id (`sec_…`) or name; undefined when there is none. */
  find(selector: string): StoredSecret | undefined {
    const sel = selector.trim().toLowerCase();
    if (sel.startsWith("sec_")) return this.byId.get(sel);
    const name = normalizeSecretName(selector);
    return name === undefined ? undefined : [...this.byId.values()].find((s) => s.name === name);
  }

  /**
   * `envs` with every `${e2b.secrets.<name>}` replaced by that secret's current value; a name
   * with no secret is a 400 naming the placeholder (never a value).
   */
  resolve(envs: Record<string, string>): { envs: Record<string, string>; secretKeys: string[] } {
    const out: Record<string, string> = {};
    const secretKeys: string[] = [];
    for (const [k, v] of Object.entries(envs)) {
      let used = false;
      out[k] = v.replace(PLACEHOLDER, (_m, name: string) => {
        const s = this.find(name);
        if (!s) throw new E2bApiError(400, `envVars.${k}: no secret named '${name.slice(0, 128)}' (Secret.create makes one)`, `envVars.${k}`);
        used = true;
        return s.value;
      });
      if (used) secretKeys.push(k);
    }
    return { envs: out, secretKeys };
  }

  /** The secret API's routes (the API key was checked); false when `path` is not one. */
  async handle(req: IncomingMessage, res: ServerResponse, path: string): Promise<boolean> {
    if (path === "/secrets" && req.method === "POST") {
      const body = parseBody(CreateBody, await readJsonBody(req, MAX_VALUE_BYTES * 2));
      const name = normalizeSecretName(body.name);
      if (!name) throw new E2bApiError(400, "invalid secret name: letters, digits, '_' and '-' (at most 128), not starting with 'sec_'", "name");
      checkValue(body.value);
      if (this.find(name)) throw new E2bApiError(409, `a secret named '${name}' exists already: Secret.update sets a new value`, "name");
      if (this.byId.size >= MAX_SECRETS) throw new E2bApiError(409, `this server keeps at most ${MAX_SECRETS} secrets`);
      const now = new Date().toISOString();
      const s: StoredSecret = { secretID: `sec_${randomBytes(13).toString("hex")}`, name, value: body.value, currentVersion: 1, metadata: body.metadata ?? {}, createdAt: now, updatedAt: now };
      this.byId.set(s.secretID, s);
      this.save();
      send(res, 201, visible(s));
      return true;
    }
    if (path === "/secrets" && req.method === "GET") {
      const { query } = requestTarget(req.url);
      const limit = query.has("limit") ? Number(query.get("limit")) : 100;
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new E2bApiError(400, "limit must be a whole number from 1 to 1000", "limit");
      const all = [...this.byId.values()].sort((a, b) => a.createdAt.localeCompare(b.createdAt) || a.secretID.localeCompare(b.secretID));
      const start = query.get("nextToken") ? Number(Buffer.from(query.get("nextToken")!, "base64url").toString("utf8")) : 0;
      if (!Number.isInteger(start) || start < 0) throw new E2bApiError(400, "nextToken is not one this server gave", "nextToken");
      const page = all.slice(start, start + limit);
      if (start + limit < all.length) res.setHeader("x-next-token", Buffer.from(String(start + limit)).toString("base64url"));
      send(res, 200, page.map(visible));
      return true;
    }
    const m = /^\/secrets\/([^/]+)$/.exec(path);
    if (!m) return false;
    const selector = decodeURIComponent(m[1]!);
    const s = this.find(selector);
    if (req.method === "GET") {
      if (!s) throw notFound();
      send(res, 200, visible(s));
      return true;
    }
    if (req.method === "POST") {
      const body = parseBody(UpdateBody, await readJsonBody(req, MAX_VALUE_BYTES * 2));
      if (!s) throw notFound();
      checkValue(body.value);
      s.value = body.value;
      s.currentVersion++;
      // An omitted metadata keeps what the secret has; a given one (even {}) replaces it.
      if (body.metadata) s.metadata = body.metadata;
      s.updatedAt = new Date().toISOString();
      this.save();
      send(res, 200, visible(s));
      return true;
    }
    if (req.method === "DELETE") {
      if (!s) throw notFound();
      this.byId.delete(s.secretID);
      this.save();
      send(res, 204);
      return true;
    }
    throw new E2bApiError(405, `method ${req.method} not allowed on ${path}`);
  }

  private save(): void {
    if (!this.file) return;
    const tmp = `${this.file}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify([...this.byId.values()]), { mode: 0o600 });
    renameSync(tmp, this.file);
  }
}

/** What the API answers of a secret: everything but its value. */
function visible(s: StoredSecret) {
  return { secretID: s.secretID, name: s.name, currentVersion: s.currentVersion, metadata: s.metadata, createdAt: s.createdAt, updatedAt: s.updatedAt };
}

function notFound(): E2bApiError {
  return new E2bApiError(404, "Secret not found");
}

function checkValue(value: string): void {
  if (Buffer.byteLength(value) > MAX_VALUE_BYTES) throw new E2bApiError(400, `a secret's value is at most ${MAX_VALUE_BYTES} bytes`, "value");
}

/** A body's first problem, naming the field (never its value). */
function parseBody<S extends z.ZodType>(schema: S, raw: unknown): z.output<S> {
  const r = schema.safeParse(raw);
  if (!r.success) {
    const issue = r.error.issues[0]!;
    const field = issue.path.map(String).join(".") || "body";
    throw new E2bApiError(400, `invalid request: ${field}: ${issue.message}`, field);
  }
  return r.data;
}

function send(res: ServerResponse, status: number, body?: unknown): void {
  if (body === undefined) {
    res.writeHead(status);
    res.end();
    return;
  }
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}
