import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { request, type IncomingHttpHeaders } from "node:http";
import { request as httpsRequest } from "node:https";
import type { LookupFunction } from "node:net";
import { Sandbox } from "e2b";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebSocket } from "ws";
import { startE2b, type E2bHarness } from "./helpers.js";
import { makeTestTls, opensslMissing, type TestTls } from "../support/test-tls.js";

/**
 * A server started by a sandbox's command, reached from outside through the E2B server, in
 * both forms E2B's SDKs address it: the host `getHost(port)` returns
 * (`<port>-<sandboxId>.<domain>`) and the `E2b-Sandbox-Id` / `E2b-Sandbox-Port` headers the
 * code interpreter SDKs send to E2B_SANDBOX_URL. HTTP and WebSocket, with E2B's proxy's rules
 * (public unless `allowPublicTraffic: false`, then the traffic token; 502s as E2B's; the
 * Host mask) and the bounds of docs/e2b.md.
 */

const SERVER_PY = readFileSync(new URL("./fixtures/port-server.py", import.meta.url), "utf8");
const DOMAIN = "sandboxes.test";

/** Every name resolves to the E2B server on loopback: the wildcard DNS an operator sets up for --domain. */
const toLoopback: LookupFunction = (_host, options, cb) => {
  if ((options as { all?: boolean }).all) (cb as unknown as (e: null, a: Array<{ address: string; family: number }>) => void)(null, [{ address: "127.0.0.1", family: 4 }]);
  else cb(null, "127.0.0.1", 4);
};

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** One HTTP(S) request (a fresh connection), its whole answer; `ca` trusts a test CA. */
function http(url: string, options: { method?: string; headers?: Record<string, string>; body?: Buffer; ca?: Buffer } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const send = url.startsWith("https:") ? httpsRequest : request;
    const req = send(url, { method: options.method ?? "GET", headers: options.headers ?? {}, lookup: toLoopback, agent: false, ...(options.ca ? { ca: options.ca } : {}) }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (d: Buffer) => chunks.push(d));
      res.once("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.once("error", reject);
    });
    req.once("error", reject);
    req.end(options.body);
  });
}

/** A WebSocket to `url`; resolves once open. */
function ws(url: string, headers: Record<string, string> = {}, ca?: Buffer): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const sock = new WebSocket(url, { headers, lookup: toLoopback, maxPayload: 64 * 1024 * 1024, ...(ca ? { ca } : {}) });
    sock.once("open", () => resolve(sock));
    sock.once("error", reject);
    sock.once("unexpected-response", (_req, res) => reject(new Error(`HTTP ${res.statusCode}`)));
  });
}

function echo(sock: WebSocket, data: string | Buffer): Promise<Buffer> {
  return new Promise((resolve) => {
    sock.once("message", (m: Buffer) => resolve(m));
    sock.send(data);
  });
}

async function until(cond: () => boolean | Promise<boolean>, what: string, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await cond())) {
    if (Date.now() > end) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Starts port-server.py in the background in `sbx` on `port` (HTTPS with `tls`); resolves once it listens. */
async function serve(sbx: Sandbox, port: number, tag: string, tls?: TestTls): Promise<void> {
  await sbx.files.write("/home/user/port-server.py", SERVER_PY);
  if (tls) await sbx.files.write([{ path: "/home/user/tls.pem", data: tls.cert.toString() }, { path: "/home/user/tls.key", data: tls.key.toString() }]);
  let out = "";
  await sbx.commands.run(`python3 -u /home/user/port-server.py ${port} ${tag}${tls ? " /home/user/tls.pem /home/user/tls.key" : ""}`, { background: true, onStdout: (d) => void (out += d), onStderr: (d) => void (out += d) });
  await until(() => out.includes("listening"), `${tag}'s server on ${port}`);
}

describe("E2B port traffic: getHost(port) and the E2b-Sandbox-Port header reach a sandbox's own servers", () => {
  let h: E2bHarness;
  let a: Sandbox;
  let b: Sandbox;
  let base: string;
  beforeAll(async () => {
    // The domain handed out with each sandbox: a name of the test's (with the server's port) that resolves to it.
    h = await startE2b({ slots: 4, domain: (url) => `${DOMAIN}:${url.port}` });
    base = h.url;
    a = await Sandbox.create({ ...h.opts, metadata: { role: "a" } });
    b = await Sandbox.create({ ...h.opts, metadata: { role: "b" } });
    await serve(a, 8000, "A");
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("getHost is <port>-<sandboxId>.<the server's domain>, and HTTP to it reaches the sandbox's server (GET and a POST body)", async () => {
    expect(a.getHost(8000)).toBe(`8000-${a.sandboxId}.${DOMAIN}:${new URL(base).port}`);
    const hello = await http(`http://${a.getHost(8000)}/hello`);
    expect(hello.status).toBe(200);
    expect(hello.body.toString()).toBe("hello A 8000");
    // The request reaches it as sent: its Host, and X-Forwarded-For added, as E2B's proxy does.
    const seen = JSON.parse((await http(`http://${a.getHost(8000)}/headers`, { headers: { "x-custom": "kept" } })).body.toString()) as Record<string, string>;
    expect(seen).toMatchObject({ host: a.getHost(8000), "x-custom": "kept", "x-forwarded-for": "127.0.0.1" });
    const body = randomBytes(300_000);
    const digest = await http(`http://${a.getHost(8000)}/digest`, { method: "POST", body, headers: { "content-length": String(body.length) } });
    expect(digest.body.toString()).toBe(`${body.length} ${createHash("sha256").update(body).digest("hex")}`);
  });

  it("the headers form (E2B_SANDBOX_URL with E2b-Sandbox-Id / E2b-Sandbox-Port, as the code interpreter SDKs send) reaches the same server; the envd port still is the sandbox API", async () => {
    const r = await http(`${base}/hello`, { headers: { "E2b-Sandbox-Id": a.sandboxId, "E2b-Sandbox-Port": "8000" } });
    expect(r.status).toBe(200);
    expect(r.body.toString()).toBe("hello A 8000");
    expect((await a.commands.run("echo still envd")).stdout).toBe("still envd\n");
    const envdByHost = await http(`http://49983-${a.sandboxId}.${DOMAIN}:${new URL(base).port}/health`, { headers: { "X-Access-Token": (a as unknown as { envdAccessToken: string }).envdAccessToken } });
    expect(envdByHost.status).toBe(204);
  });

  it("WebSocket through getHost and through the headers: messages both ways, text and a 20 MB binary", async () => {
    const byHost = await ws(`ws://${a.getHost(8000)}/ws`);
    expect((await echo(byHost, "ping")).toString()).toBe("ping");
    const big = randomBytes(20 * 1024 * 1024);
    expect((await echo(byHost, big)).equals(big)).toBe(true);
    byHost.close();
    const byHeaders = await ws(`${base.replace("http", "ws")}/ws`, { "E2b-Sandbox-Id": a.sandboxId, "E2b-Sandbox-Port": "8000" });
    expect((await echo(byHeaders, "via headers")).toString()).toBe("via headers");
    byHeaders.close();
  });

  it("a port nobody listens on is E2B's 502 naming the port; another sandbox does not reach this one's server; a killed sandbox is 'The sandbox was not found'", async () => {
    const closed = await http(`http://${a.getHost(8001)}/`);
    expect(closed.status).toBe(502);
    expect(JSON.parse(closed.body.toString())).toMatchObject({ sandboxId: a.sandboxId, message: "The sandbox is running but port is not open", port: 8001, code: 502 });
    // b runs a command too (its namespace is up), but a's server is not in it.
    await b.commands.run("true");
    const other = await http(`http://${b.getHost(8000)}/hello`);
    expect(other.status).toBe(502);
    expect(JSON.parse(other.body.toString())).toMatchObject({ sandboxId: b.sandboxId, port: 8000 });
    const wsClosed = await ws(`ws://${b.getHost(8000)}/ws`).catch((e: unknown) => e);
    expect(String(wsClosed)).toContain("HTTP 502");

    const gone = await Sandbox.create({ ...h.opts });
    const host = gone.getHost(8000);
    await gone.kill();
    const notFound = await http(`http://${host}/`);
    expect(notFound.status).toBe(502);
    expect(JSON.parse(notFound.body.toString())).toEqual({ sandboxId: gone.sandboxId, message: "The sandbox was not found", code: 502 });
  });

  it("allowPublicTraffic: false needs the sandbox's trafficAccessToken (403 without or with another); public ports need none; maskRequestHost sets the Host", async () => {
    const priv = await Sandbox.create({ ...h.opts, network: { allowPublicTraffic: false, maskRequestHost: "inside.example:${PORT}" } });
    try {
      expect(priv.trafficAccessToken).toBeTruthy();
      await serve(priv, 8080, "P");
      const none = await http(`http://${priv.getHost(8080)}/hello`);
      expect(none.status).toBe(403);
      expect(JSON.parse(none.body.toString()).message).toBe("Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing");
      const wrong = await http(`http://${priv.getHost(8080)}/hello`, { headers: { "e2b-traffic-access-token": "not-it" } });
      expect(wrong.status).toBe(403);
      const wsNone = await ws(`ws://${priv.getHost(8080)}/ws`).catch((e: unknown) => e);
      expect(String(wsNone)).toContain("HTTP 403");
      const ok = await http(`http://${priv.getHost(8080)}/headers`, { headers: { "e2b-traffic-access-token": priv.trafficAccessToken! } });
      expect(ok.status).toBe(200);
      expect(JSON.parse(ok.body.toString()).host).toBe("inside.example:8080");
      // Its envd port keeps envd's own rule (the access token), not the traffic token's.
      expect((await priv.commands.run("echo api")).stdout).toBe("api\n");
    } finally {
      await priv.kill();
    }
    expect(a.trafficAccessToken).toBeUndefined();
  });


  it("a paused sandbox's ports answer 502 until it is resumed; one created with autoResume is resumed by traffic to its port", async () => {
    const paused = await Sandbox.create({ ...h.opts });
    const waking = await Sandbox.create({ ...h.opts, lifecycle: { onTimeout: "pause", autoResume: true } });
    try {
      await serve(paused, 8000, "paused");
      await serve(waking, 8000, "waking");
      await paused.pause();
      await waking.pause();
      const refused = await http(`http://${paused.getHost(8000)}/hello`);
      expect(refused.status).toBe(502);
      expect(JSON.parse(refused.body.toString()).sandboxId).toBe(paused.sandboxId);
      await paused.connect();
      expect((await http(`http://${paused.getHost(8000)}/hello`)).body.toString()).toBe("hello paused 8000");
      // The same server process answers after the wake: it was frozen, not restarted.
      const woke = await http(`http://${waking.getHost(8000)}/hello`);
      expect(woke.status).toBe(200);
      expect(woke.body.toString()).toBe("hello waking 8000");
      expect((await waking.getInfo()).state).toBe("running");
    } finally {
      await Promise.all([paused.kill(), waking.kill()]);
    }
  }, 90_000);
});

describe("E2B port traffic bounds", () => {
  let h: E2bHarness;
  let a: Sandbox;
  beforeAll(async () => {
    h = await startE2b({ slots: 2, domain: (url) => `${DOMAIN}:${url.port}`, portLimits: { maxConnections: 3, idleTimeoutMs: 1500, maxTransferBytes: 48 * 1024 * 1024 } });
    a = await Sandbox.create({ ...h.opts });
    await serve(a, 8000, "A");
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
  });

  it("connections per sandbox (429 past --max-port-connections-per-sandbox), bytes per connection (--max-port-transfer-mb cuts it), idle time (--port-idle-timeout-s closes it)", async () => {
    // Three WebSockets are the cap here; a fourth connection is refused while they are open.
    const open = await Promise.all([0, 1, 2].map(() => ws(`ws://${a.getHost(8000)}/ws`)));
    const fourth = await http(`http://${a.getHost(8000)}/hello`);
    expect(fourth.status).toBe(429);
    for (const s of open) s.terminate();
    await until(async () => (await http(`http://${a.getHost(8000)}/hello`)).status === 200, "a connection is allowed again");
    // 40 MB fits the 48 MB bound; 60 MB is cut off.
    const fits = await http(`http://${a.getHost(8000)}/bytes?n=${40 * 1024 * 1024}`);
    expect(fits.body.length).toBe(40 * 1024 * 1024);
    const cut = await http(`http://${a.getHost(8000)}/bytes?n=${60 * 1024 * 1024}`).catch((e: unknown) => e);
    expect(cut instanceof Error || (cut as Answer).body.length < 60 * 1024 * 1024).toBe(true);
    // An idle WebSocket is closed after 1.5 s here.
    const idle = await ws(`ws://${a.getHost(8000)}/ws`);
    await new Promise<void>((r) => idle.once("close", () => r()));
  }, 60_000);
});

describe.skipIf(opensslMissing)("E2B port traffic over HTTPS (skipped without openssl to make the test certificate)", () => {
  let h: E2bHarness;
  let tls: TestTls;
  let a: Sandbox;
  beforeAll(async () => {
    tls = makeTestTls(DOMAIN);
    h = await startE2b({ slots: 2, domain: (url) => `${DOMAIN}:${url.port}`, tls: { cert: tls.cert, key: tls.key } });
    a = await Sandbox.create({ ...h.opts, network: { httpsPorts: [8443] } });
    await serve(a, 8000, "A");
    await serve(a, 8443, "S", tls);
  }, 120_000);
  afterAll(async () => {
    await h?.stop();
    tls?.remove();
  });

  it("https://getHost(port) (the URL E2B code writes) and wss:// reach the sandbox's server; the domain handed out is the HTTPS port's", async () => {
    expect(h.server.tlsUrl).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
    expect(a.getHost(8000)).toBe(`8000-${a.sandboxId}.${DOMAIN}:${new URL(h.server.tlsUrl).port}`);
    const r = await http(`https://${a.getHost(8000)}/hello`, { ca: tls.ca });
    expect(r.status).toBe(200);
    expect(r.body.toString()).toBe("hello A 8000");
    const sock = await ws(`wss://${a.getHost(8000)}/ws`, {}, tls.ca);
    expect((await echo(sock, "over tls")).toString()).toBe("over tls");
    sock.close();
    // The plain HTTP port keeps serving everything (E2B_API_URL / E2B_SANDBOX_URL point there).
    expect((await a.commands.run("echo ok")).stdout).toBe("ok\n");
  });

  it("a port listed in network.httpsPorts is reached over TLS inside the sandbox (its certificate unchecked, as E2B's proxy)", async () => {
    const r = await http(`https://${a.getHost(8443)}/hello`, { ca: tls.ca });
    expect(r.status).toBe(200);
    expect(r.body.toString()).toBe("hello S 8443");
    // Without httpsPorts the same TLS server would get plain HTTP: E2B's rule, not a guess.
    const plain = await Sandbox.create({ ...h.opts });
    try {
      await serve(plain, 8443, "T", tls);
      const bad = await http(`http://${plain.getHost(8443).replace(/:\d+$/, `:${new URL(h.url).port}`)}/hello`).catch((e: unknown) => e);
      expect(bad instanceof Error || (bad as Answer).status !== 200).toBe(true);
    } finally {
      await plain.kill();
    }
  });
});
