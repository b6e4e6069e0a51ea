/**
 * The OpenEnv server under hostile clients and model endpoints (issue 38, its numbered holes):
 * each test is the attack as it was made, and what the server must do instead. Hole 3 (code
 * left in a slot's spawner) is the sandbox's: test/sandbox/spawner-ptrace.test.ts.
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { silentLogger } from "../../src/observability/logger.js";
import { OpenEnvServer } from "../../src/openenv/server.js";
import { eventually, freePort, startOpenEnv, WsClient, type OpenEnvHarness } from "./support.js";
import { rawWs } from "./raw-ws.js";

let h: OpenEnvHarness;
/** The one model endpoint this server allows: each test's model server listens on this port. */
let modelPort = 0;
let allowed = "";

beforeAll(async () => {
  modelPort = await freePort();
  allowed = `http://127.0.0.1:${modelPort}/v1`;
  // Tool calls may run 300 s here, so a session's close must stop its call rather than wait for it.
  h = await startOpenEnv({ slots: 2, acquireTimeoutMs: 20_000, toolTimeoutS: 300, limits: { modelUrlAllow: [allowed], modelAnswerMaxBytes: 1024 * 1024 } });
}, 120_000);

afterAll(async () => {
  await h?.stop();
});

async function post(url: string, body: unknown, init: RequestInit = {}): Promise<{ status: number; body: any }> {
  const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), ...init });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

/** A model endpoint the test scripts at the HTTP level (endless answers, drips), counting connections. */
interface RawModel {
  connections: number;
  requests: number;
  /** Connections that closed (the client cut them). */
  closed: number;
  close(): Promise<void>;
}

async function rawModel(port: number, handle: (req: IncomingMessage, res: ServerResponse, body: string) => void): Promise<RawModel> {
  const state = { connections: 0, requests: 0, closed: 0 };
  const server: Server = createServer((req, res) => {
    state.requests++;
    let body = "";
    req.on("data", (c: Buffer) => (body += c.toString()));
    req.once("end", () => handle(req, res, body));
  });
  server.on("connection", (s) => {
    state.connections++;
    s.once("close", () => state.closed++);
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  return Object.assign(state, {
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}

/** Turn 1 calls bash (so the rollout takes its slot), turn 2 drips. */
function toolThenDrip(req: IncomingMessage, res: ServerResponse, body: string): void {
  if ((JSON.parse(body) as { messages: Array<{ role: string }> }).messages.some((m) => m.role === "tool")) return drip(req, res);
  const message = { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "bash", arguments: JSON.stringify({ command: "echo hi" }) } }] };
  res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ id: "c", object: "chat.completion", choices: [{ index: 0, message, finish_reason: "tool_calls" }] }));
}

/** Answers 200 and then one byte every 200 ms until the client hangs up. */
function drip(_req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(200, { "content-type": "application/json" });
  res.write("{");
  const timer = setInterval(() => res.write(" "), 200);
  res.once("close", () => clearInterval(timer));
}

describe("1. seeds are bounded", () => {
  it("a seed past --max-seed is a validation error naming `seed`, at once, on WebSocket reset, HTTP /reset, /step and /run; the server keeps answering", async () => {
    const seed = 1e11;
    const reset = await post(`${h.url}/reset`, { seed });
    expect(reset.status).toBe(422);
    expect(reset.body).toEqual(expect.objectContaining({ code: "VALIDATION_ERROR", error: expect.stringMatching(/seed must be an item number from 0 to 100000/) }));
    expect(reset.body.errors[0].loc).toEqual(["seed"]);
    const step = await post(`${h.url}/step`, { seed, action: { type: "call_tool", tool_name: "bash", arguments: { command: "true" } } });
    expect(step.status).toBe(422);
    const run = await post(`${h.url}/run`, { seed, model: { base_url: allowed, model: "m" } });
    expect(run.status).toBe(422);
    const ws = await WsClient.connect(h.wsUrl);
    const frame = await ws.reset({ seed });
    expect(frame.data).toEqual(expect.objectContaining({ code: "VALIDATION_ERROR" }));
    await ws.close();
    expect((await fetch(`${h.url}/health`)).status).toBe(200);
    expect(h.free()).toBe(2);
  });
});

describe("2. a model's answer is capped while it streams", () => {
  it("an answer past --model-answer-max-bytes is cut (the endpoint's connection closed long before it finished) and the rollout is an infra failure naming the cap", async () => {
    let written = 0;
    const total = 64 * 1024 * 1024;
    const model = await rawModel(modelPort, (_req, res) => {
      res.writeHead(200, { "content-type": "application/json" });
      const chunk = Buffer.alloc(64 * 1024, 0x20);
      const pump = () => {
        while (written < total && !res.destroyed) {
          written += chunk.length;
          if (!res.write(chunk)) return void res.once("drain", pump);
        }
        if (!res.destroyed) res.end();
      };
      pump();
    });
    try {
      const r = await post(`${h.url}/run`, { seed: 0, model: { base_url: allowed, model: "m", max_retries: 0 } });
      expect(r.status).toBe(200);
      expect(r.body.infra_failure.message).toMatch(/answered more than 1048576 bytes/);
      expect(r.body.infra_failure.cause).toBe("model");
      expect(r.body).toEqual(expect.objectContaining({ status: "infra_failure", reward: null, mask_sample: true }));
      await eventually(() => model.closed === model.connections, "the endpoint's connection cut");
      expect(written).toBeLessThan(total);
      await eventually(() => h.free() === 2, "the rollout's slot back");
    } finally {
      await model.close();
    }
  });
});

describe("4. /run calls only the model endpoints the operator allowed", () => {
  it("a base_url outside --model-url-allow is a 403 before any connection: no listener there is reached, nothing of it reflected", async () => {
    const other = await freePort();
    const elsewhere = await rawModel(other, (_req, res) => res.writeHead(200).end("secret of the internal service"));
    const allowedHost = await rawModel(modelPort, (_req, res) => res.writeHead(500).end("{}"));
    try {
      for (const base_url of [
        `http://127.0.0.1:${other}/v1`,
        `http://127.0.0.1:${modelPort}/v10`,
        `http://127.0.0.1:${modelPort}/`,
        `http://user:pw@127.0.0.1:${modelPort}/v1`,
        `http://localhost:${modelPort}/v1`,
      ]) {
        const r = await post(`${h.url}/run`, { seed: 0, model: { base_url, model: "m" } });
        expect(r.status, base_url).toBe(403);
        expect(r.body.error).not.toContain("secret");
      }
      expect(elsewhere.connections).toBe(0);
      expect(allowedHost.connections).toBe(0);
      // What lies under the prefix is allowed (here it fails, as the endpoint answers 500).
      const ok = await post(`${h.url}/run`, { seed: 0, model: { base_url: `${allowed}/`, model: "m", max_retries: 0 } });
      expect(ok.status).toBe(200);
      expect(allowedHost.connections).toBeGreaterThan(0);
    } finally {
      await elsewhere.close();
      await allowedHost.close();
    }
    await eventually(() => h.free() === 2, "slots back");
  });

  it("a server with no --model-url-allow refuses every /run with a 403 that names the flag, and opens no connection", async () => {
    const server = new OpenEnvServer({ env: h.env, logger: silentLogger() });
    const url = await server.listen(0);
    const model = await rawModel(modelPort, (_req, res) => res.writeHead(500).end("{}"));
    try {
      const r = await post(`${url}/run`, { seed: 0, model: { base_url: allowed, model: "m" } });
      expect(r.status).toBe(403);
      expect(r.body.error).toMatch(/--model-url-allow/);
      expect(model.connections).toBe(0);
    } finally {
      await model.close();
      await server.close();
    }
  });
});

describe("5. one deadline per /run, and a /run whose client left is cancelled", () => {
  it("a model dripping a byte every 200 ms is cut at the request's timeout_ms: an infra failure (deadline, NeMo Gym's agent_timeout), the endpoint's connection closed, the slot freed", async () => {
    const model = await rawModel(modelPort, toolThenDrip);
    try {
      const r = await post(`${h.url}/run`, { seed: 0, timeout_ms: 4_000, model: { base_url: allowed, model: "m", max_retries: 0 } });
      expect(r.status).toBe(200);
      expect(r.body).toEqual(expect.objectContaining({ status: "infra_failure", failure_kind: "agent_timeout", mask_sample: true }));
      expect(r.body.infra_failure.cause).toBe("deadline");
      await eventually(() => model.connections > 0 && model.closed === model.connections, "the drip's connection cut");
      await eventually(() => h.free() === 2, "the slot back");
    } finally {
      await model.close();
    }
  });

  it("the server's --run-timeout-s bounds a request asking for more", async () => {
    const server = new OpenEnvServer({ env: h.env, logger: silentLogger(), limits: { modelUrlAllow: [allowed], runTimeoutMs: 1_500 } });
    const url = await server.listen(0);
    const model = await rawModel(modelPort, drip);
    try {
      const r = await post(`${url}/run`, { seed: 0, timeout_ms: 3_600_000, model: { base_url: allowed, model: "m", max_retries: 0, timeout_ms: 3_600_000 } });
      expect(r.body.infra_failure.cause).toBe("deadline");
      expect(r.body.infra_failure.message).toMatch(/1500 ms/);
    } finally {
      await model.close();
      await server.close();
    }
    await eventually(() => h.free() === 2, "the slot back");
  });

  it("abandoned /run requests are cancelled: their slots come back and the model's connections are closed, long before any timeout", async () => {
    const model = await rawModel(modelPort, toolThenDrip);
    try {
      const clients = [new AbortController(), new AbortController()];
      const runs = clients.map((c) => post(`${h.url}/run`, { seed: 0, model: { base_url: allowed, model: "m", max_retries: 0 } }, { signal: c.signal }).catch((err: unknown) => err));
      await eventually(() => model.requests === 4 && h.free() === 0, `both rollouts waiting on the model, holding both slots`);
      for (const c of clients) c.abort();
      await Promise.all(runs);
      // The model's own timeout is 120 s and the server's deadline 600 s: only the cancellation frees them this soon.
      await eventually(() => h.free() === 2, "both slots back", 30_000);
      await eventually(() => model.closed === model.connections, "the model's connections closed");
    } finally {
      await model.close();
    }
  });
});

describe("6 and 7. sessions, connections and frames in flight are capped", () => {
  let server: OpenEnvServer;
  let url = "";
  beforeAll(async () => {
    server = new OpenEnvServer({ env: h.env, logger: silentLogger(), limits: { maxSessions: 2, maxMessageBytes: 3 * 1024 * 1024, frameBudgetBytes: 4 * 1024 * 1024 } });
    url = await server.listen(0);
  });
  afterAll(async () => {
    await server.close();
  });

  const rpc = (method: string, params: Record<string, unknown> = {}) => post(`${url}/mcp`, { jsonrpc: "2.0", id: 1, method, params });
  const initialize = () =>
    fetch(`${url}/mcp`, {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "t", version: "1" } } }),
    });

  it("past --max-sessions an MCP session, an OpenEnv session and a WebSocket are refused with 503 saying why; closing one makes room", async () => {
    const a = await rpc("openenv/session/create");
    const b = await initialize();
    expect(a.body.result.session_id).toEqual(expect.any(String));
    expect(b.status).toBe(200);
    const mcpSession = b.headers.get("mcp-session-id")!;
    const third = await rpc("openenv/session/create");
    expect(third.body.error.message).toMatch(/--max-sessions 2/);
    const thirdInit = await initialize();
    expect(thirdInit.status).toBe(503);
    const upgrade = await rawWs(`${url.replace(/^http/, "ws")}/ws`);
    expect(upgrade.status).toMatch(/ 503 /);
    expect(upgrade.body).toMatch(/--max-sessions 2/);
    await rpc("openenv/session/close", { session_id: a.body.result.session_id });
    await fetch(`${url}/mcp`, { method: "DELETE", headers: { "mcp-session-id": mcpSession } });
    await eventually(() => server.sessions === 0, "both sessions ended");
    const ws = await WsClient.connect(`${url.replace(/^http/, "ws")}/ws`);
    await ws.close();
  });

  it("frames in flight share one byte budget: the connection that would pass it gets CAPACITY_REACHED and close 1013, the others live on", async () => {
    const wsUrl = `${url.replace(/^http/, "ws")}/ws`;
    const first = (await rawWs(wsUrl)).ws!;
    // 2.5 MiB of a 3 MiB frame, then silence: the server holds it, waiting for the rest.
    first.startFrame(3 * 1024 * 1024, 2.5 * 1024 * 1024);
    await eventually(() => server.framesInFlight >= 2.5 * 1024 * 1024, "the first connection's bytes counted");
    const second = (await rawWs(wsUrl)).ws!;
    second.startFrame(3 * 1024 * 1024, 2.5 * 1024 * 1024);
    await second.ended;
    expect(second.closeCode).toBe(1013);
    expect(JSON.parse(second.texts[0]!)).toEqual({ type: "error", data: expect.objectContaining({ code: "CAPACITY_REACHED", message: expect.stringMatching(/budget for WebSocket messages in flight \(4194304 bytes/) }) });
    expect(first.closeCode).toBeUndefined();
    first.socket.destroy();
    await first.ended;
    await eventually(() => server.sessions === 0, "the sessions ended");
  });
});

describe("8. closing a session stops its running call", () => {
  it("a dropped connection whose `sleep 300` is running frees its slot at once, not when the call ends", async () => {
    const ws = await WsClient.connect(h.wsUrl);
    await ws.reset({ seed: 1 });
    expect(h.free()).toBe(1);
    ws.ws.send(JSON.stringify({ type: "step", data: { type: "call_tool", tool_name: "bash", arguments: { command: "sleep 300" } } }));
    await eventually(() => h.backend.executor.stats().inFlight === 1, "the call running in the slot");
    ws.ws.terminate();
    // The call's own bound is 300 s here: only stopping it frees the slot within this wait.
    await eventually(() => h.free() === 2, "the slot back", 60_000);
  }, 90_000);
});

describe("9. episode ids", () => {
  it("an id the server handed out replays its item, on another connection too", async () => {
    const a = await WsClient.connect(h.wsUrl);
    const first = await a.reset();
    const id = first.data.observation.episode_id as string;
    await a.close();
    const b = await WsClient.connect(h.wsUrl);
    const again = await b.reset({ episode_id: id });
    expect(again.data.observation.item_index).toBe(first.data.observation.item_index);
    expect(again.data.observation.task).toBe(first.data.observation.task);
    expect(id).toMatch(/^ep-\d+-/);
    expect(again.data.observation.episode_id).toBe(id);
    const next = await b.reset();
    expect(next.data.observation.item_index).not.toBe(first.data.observation.item_index);
    await b.close();
  });

  it("an id a client chose is bound on first use: another reset cannot re-bind it to another item", async () => {
    const a = await WsClient.connect(h.wsUrl);
    const mine = await a.reset({ episode_id: "client-a-episode", seed: 3 });
    expect(mine.data.observation.item_index).toBe(3);
    const steal = await a.reset({ episode_id: "client-a-episode", seed: 5 });
    expect(steal.data).toEqual(expect.objectContaining({ code: "VALIDATION_ERROR", message: expect.stringMatching(/replays item 3/) }));
    const replay = await a.reset({ episode_id: "client-a-episode" });
    expect(replay.data.observation.item_index).toBe(3);
    await a.close();
  });
});

describe("10. a token in the URL is accepted on WebSocket handshakes only", () => {
  it("a plain request carrying an Upgrade header and ?token= is refused (401); the WebSocket handshake with ?token= opens", async () => {
    const server = new OpenEnvServer({ env: h.env, logger: silentLogger(), token: "s3cret-token" });
    const url = await server.listen(0);
    try {
      // fetch will not send an Upgrade header: node:http will.
      const plain = await new Promise<number>((resolve, reject) => {
        const req = httpRequest(`${url}/metadata?token=s3cret-token`, { headers: { upgrade: "anything" } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        });
        req.once("error", reject);
        req.end();
      });
      expect(plain).toBe(401);
      const withHeader = await fetch(`${url}/metadata`, { headers: { authorization: "Bearer s3cret-token" } });
      expect(withHeader.status).toBe(200);
      const ws = new WebSocket(`${url.replace(/^http/, "ws")}/ws?token=s3cret-token`);
      await new Promise<void>((resolve, reject) => {
        ws.once("open", () => resolve());
        ws.once("error", reject);
      });
      ws.close();
    } finally {
      await server.close();
    }
  });
});
