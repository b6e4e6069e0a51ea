import fc from "fast-check";
import { request as httpRequest } from "node:http";
import { rssKb } from "./support.js";

/**
 * Property-based HTTP fuzzing of one server: methods, paths, headers (auth, content type,
 * junk), bodies (random JSON, mutated valid bodies, invalid JSON, raw bytes, deep nesting,
 * large sizes). The property: every answer comes within a bound, is never 5xx, and every
 * 4xx carries a JSON body with a message. Requests go through node:http with raw bodies, so
 * nothing is "fixed up" by a client library.
 */

export interface FuzzRoute {
  method: "GET" | "POST";
  path: string;
  /** Bodies the route accepts; the fuzzer mutates them (valid shapes reach deep validation). */
  validBodies?: unknown[];
}

export interface FuzzTarget {
  name: string;
  url: string;
  token?: string;
  routes: FuzzRoute[];
}

export interface FuzzRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Buffer | undefined;
}

export interface FuzzAnswer {
  status: number;
  text: string;
  ms: number;
}

export interface FuzzReport {
  requests: number;
  byStatus: Record<string, number>;
  maxMs: number;
}

const REQUEST_BOUND_MS = 15_000;

export function send(url: string, r: FuzzRequest, boundMs = REQUEST_BOUND_MS): Promise<FuzzAnswer> {
  const u = new URL(url);
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = httpRequest(
      { host: u.hostname, port: u.port, method: r.method, path: r.path, headers: { ...r.headers, ...(r.body ? { "content-length": String(r.body.length) } : {}) }, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (c: Buffer) => chunks.push(c));
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8"), ms: performance.now() - t0 }));
        res.on("error", reject);
      },
    );
    req.setTimeout(boundMs, () => req.destroy(new Error(`no answer within ${boundMs} ms (hang) to ${r.method} ${r.path}`)));
    req.on("error", reject);
    req.end(r.body);
  });
}

/** What a well-behaved server answers: never 5xx; 4xx as JSON with a message. */
export function checkAnswer(r: FuzzRequest, a: FuzzAnswer): string | null {
  if (a.status >= 500) return `${a.status} for ${r.method} ${r.path}: ${a.text.slice(0, 300)}`;
  if (a.status < 200) return `unexpected status ${a.status}`;
  if (a.status >= 400 && r.method !== "HEAD") {
    // 431 (headers too large) and a bare 400 for a request line with non-ASCII bytes come
    // from Node's HTTP parser before any route code runs.
    if (a.status === 431) return null;
    if (a.status === 400 && a.text === "" && /[^\x21-\x7e]/.test(r.path)) return null;
    let json: unknown;
    try {
      json = JSON.parse(a.text);
    } catch {
      return `${a.status} without a JSON body for ${r.method} ${r.path}: ${a.text.slice(0, 200)}`;
    }
    const msg = (json as { error?: unknown; message?: unknown } | null)?.error ?? (json as { message?: unknown } | null)?.message;
    if (typeof msg !== "string" || msg.length < 3) return `${a.status} JSON without an error message: ${a.text.slice(0, 200)}`;
  }
  return null;
}

const JUNK_PATHS = ["/", "/nope", "//execute", "/EXECUTE", "/execute/", "/artifacts", "/artifacts/", "/artifacts/../execute", "/%2e%2e/health", "/health/..", "/health?x=%zz", "/\u00e9", "/" + "a".repeat(4000), "/execute?stream=1", "/batch?stream=1&stream=0", "*"];

function mutate(valid: unknown): fc.Arbitrary<unknown> {
  if (valid === null || typeof valid !== "object") return fc.jsonValue();
  const obj = valid as Record<string, unknown>;
  const keys = Object.keys(obj);
  const replaced = fc.record({ key: fc.constantFrom(...(keys.length ? keys : ["x"])), value: fc.oneof(fc.jsonValue(), fc.string(), fc.integer(), fc.double(), fc.constant(null), fc.constant(-1), fc.constant(1e308), fc.constant("")) }).map(({ key, value }) => ({ ...obj, [key]: value }));
  const removed = fc.constantFrom(...(keys.length ? keys : ["x"])).map((key) => {
    const copy = { ...obj };
    delete copy[key];
    return copy;
  });
  const added = fc.record({ key: fc.oneof(fc.string({ maxLength: 12 }), fc.constantFrom("__proto__", "constructor", "prototype")), value: fc.jsonValue() }).map(({ key, value }) => JSON.parse(JSON.stringify({ ...obj, [key]: value })));
  const nested = keys.length ? fc.constantFrom(...keys).chain((k) => (obj[k] && typeof obj[k] === "object" ? mutate(obj[k]).map((v) => ({ ...obj, [k]: v })) : replaced)) : replaced;
  return fc.oneof(fc.constant(obj), replaced, removed, added, nested, fc.constant([obj]), fc.constant([obj, obj]));
}

const FIXED_BODIES = [
  "",
  "null",
  "[]",
  "{}",
  '"str"',
  "1e999",
  "-0",
  "{",
  "[1,",
  '{"a":1}garbage',
  '{"__proto__":{"polluted":1}}',
  '{"constructor":{"prototype":{"polluted":1}}}',
  "\ufeff{}",
  "[".repeat(50_000) + "]".repeat(50_000),
  '{"a":'.repeat(5_000) + "1" + "}".repeat(5_000),
];

export function requestArb(target: FuzzTarget): fc.Arbitrary<FuzzRequest> {
  const methods = fc.constantFrom("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD");
  const routePaths = target.routes.map((r) => r.path);
  const path = fc.oneof(
    { weight: 6, arbitrary: fc.constantFrom(...routePaths) },
    { weight: 1, arbitrary: fc.constantFrom(...JUNK_PATHS) },
    { weight: 1, arbitrary: fc.webPath().map((p) => (p.startsWith("/") ? p : `/${p}`)) },
    { weight: 1, arbitrary: fc.tuple(fc.constantFrom(...routePaths), fc.webQueryParameters()).map(([p, q]) => `${p}?${q}`) },
  );
  const auth = target.token
    ? fc.oneof(
        { weight: 6, arbitrary: fc.constant(`Bearer ${target.token}`) },
        { weight: 1, arbitrary: fc.constantFrom(undefined, "Bearer", "Bearer ", "Bearer wrong", `Bearer ${target.token}x`, `bearer ${target.token.slice(0, -1)}`, "Basic Zm9vOmJhcg==", `Bearer ${"x".repeat(8000)}`) },
        { weight: 1, arbitrary: fc.string({ maxLength: 64, unit: fc.constantFrom(..."abcXYZ019 -_=+/.:;\t".split("")) }) },
      )
    : fc.constantFrom(undefined, "Bearer whatever");
  const contentType = fc.constantFrom(undefined, "application/json", "application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=zz", "application/octet-stream", "application/json; charset=latin1");
  const junkHeaders = fc.dictionary(fc.stringMatching(/^x-[a-z0-9-]{1,20}$/), fc.string({ maxLength: 100, unit: fc.constantFrom(..."abc 019;=,\"'".split("")) }), { maxKeys: 4 });
  const validBodies = target.routes.flatMap((r) => r.validBodies ?? []);
  const jsonBody = fc
    .oneof({ weight: 2, arbitrary: validBodies.length ? fc.constantFrom(...validBodies).chain(mutate) : fc.jsonValue() }, { weight: 2, arbitrary: fc.jsonValue({ maxDepth: 4 }) })
    .map((v) => Buffer.from(JSON.stringify(v) ?? "null"));
  const body = fc.oneof(
    { weight: 6, arbitrary: jsonBody },
    { weight: 1, arbitrary: fc.string({ maxLength: 200 }).map((s) => Buffer.from(s)) },
    { weight: 1, arbitrary: fc.uint8Array({ maxLength: 512 }).map((a) => Buffer.from(a)) },
    { weight: 1, arbitrary: fc.constantFrom(...FIXED_BODIES).map((s) => Buffer.from(s)) },
    { weight: 1, arbitrary: fc.integer({ min: 1, max: 3 * 1024 * 1024 }).map((n) => Buffer.alloc(n, 0x7b)) },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
  // Mostly well-aimed requests (a route's own method, its bodies mutated) so the fuzzer gets
  // past routing and auth into validation; the rest entirely random.
  const aimed = fc.constantFrom(...target.routes).chain((route) =>
    fc.record({
      method: fc.constant<string>(route.method),
      path: fc.oneof({ weight: 4, arbitrary: fc.constant(route.path) }, { weight: 1, arbitrary: fc.webQueryParameters().map((q) => `${route.path}?${q}`) }),
      body: route.validBodies?.length
        ? fc.oneof({ weight: 5, arbitrary: fc.constantFrom(...route.validBodies).chain(mutate).map((v) => Buffer.from(JSON.stringify(v) ?? "null")) }, { weight: 1, arbitrary: body })
        : fc.constant(undefined),
    }),
  );
  const random = fc.record({ method: methods, path, body });
  return fc
    .record({ target: fc.oneof({ weight: 3, arbitrary: aimed }, { weight: 2, arbitrary: random }), auth, contentType, junk: junkHeaders })
    .map(({ target: { method, path, body }, auth, contentType, junk }) => {
      const headers: Record<string, string> = { ...junk };
      if (auth !== undefined) headers["authorization"] = auth;
      if (contentType !== undefined) headers["content-type"] = contentType;
      return { method, path, headers, body: method === "GET" || method === "HEAD" ? (body && body.length < 64 ? body : undefined) : body };
    });
}

/**
 * Runs `runs` random requests against `target` and returns what was seen. Throws on the first
 * violated property with the request that broke it (no shrinking: a crashed server would make
 * every shrink step fail the same way).
 */
export async function fuzzServer(target: FuzzTarget, opts: { runs: number; seed?: number; alive?: () => string | null }): Promise<FuzzReport> {
  const report: FuzzReport = { requests: 0, byStatus: {}, maxMs: 0 };
  await fc.assert(
    fc.asyncProperty(requestArb(target), async (r) => {
      let a: FuzzAnswer;
      try {
        a = await send(target.url, r);
      } catch (err) {
        // A server may answer (404/401/413) and close before a large upload finished: the
        // client then sees EPIPE/ECONNRESET instead of the answer. Fine if the server is healthy.
        const code = (err as NodeJS.ErrnoException).code;
        if ((code === "EPIPE" || code === "ECONNRESET") && (r.body?.length ?? 0) > 64 * 1024) {
          const h = await send(target.url, { method: "GET", path: "/health", headers: {}, body: undefined });
          if (h.status === 200) {
            report.requests++;
            report.byStatus["early-close"] = (report.byStatus["early-close"] ?? 0) + 1;
            return;
          }
        }
        const dead = opts.alive?.();
        throw new Error(`${target.name}: ${r.method} ${JSON.stringify(r.path)} failed (${(err as Error).message})${dead ? `; the server died: ${dead}` : ""}`);
      }
      report.requests++;
      report.byStatus[a.status] = (report.byStatus[a.status] ?? 0) + 1;
      report.maxMs = Math.max(report.maxMs, Math.round(a.ms));
      const problem = checkAnswer(r, a);
      if (problem) throw new Error(`${target.name}: ${problem}`);
    }),
    { numRuns: opts.runs, ...(opts.seed !== undefined ? { seed: opts.seed } : {}), endOnFailure: true, interruptAfterTimeLimit: 40_000 },
  );
  return report;
}

/** RSS of a server process before and after, in MB. */
export function rssMb(pid: number): number {
  return Math.round(rssKb(pid) / 1024);
}
