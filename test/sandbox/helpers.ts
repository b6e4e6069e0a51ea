import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSandboxProcess, type SandboxProcess } from "../../src/pool/sandbox-process.js";
import type { ExecuteResponse } from "../../src/protocol/sandbox.js";

/** A real sandbox server on loopback (the built `slotpool sandbox-server`) for one test file. */
export interface TestServer {
  proc: SandboxProcess;
  url: string;
  dataDir: string;
  token: string | undefined;
  logs: string[];
  post(path: string, body: unknown, headers?: Record<string, string>): Promise<{ status: number; json: any; text: string }>;
  get(path: string, headers?: Record<string, string>): Promise<{ status: number; json: any; text: string }>;
  bash(slot: number, command: string, extra?: Record<string, unknown>, envelope?: Record<string, unknown>): Promise<ExecuteResponse>;
  stop(): Promise<void>;
}

export async function startServer(opts: { slots?: number; token?: string; extraArgs?: string[]; env?: NodeJS.ProcessEnv } = {}): Promise<TestServer> {
  const dataDir = mkdtempSync(join(tmpdir(), "slotpool-sbx-"));
  const logs: string[] = [];
  const proc = await startSandboxProcess({
    slots: opts.slots ?? 4,
    dataDir,
    ...(opts.token ? { token: opts.token } : {}),
    extraArgs: opts.extraArgs ?? [],
    env: { SLOTPOOL_LOG_LEVEL: "debug", ...opts.env },
    onLog: (l) => logs.push(l),
    startTimeoutMs: 60_000,
  });
  const auth: Record<string, string> = opts.token ? { authorization: `Bearer ${opts.token}` } : {};
  const request = async (method: string, path: string, body?: unknown, headers?: Record<string, string>) => {
    const res = await fetch(proc.url + path, {
      method,
      headers: { "content-type": "application/json", ...auth, ...headers },
      ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
    });
    const text = await res.text();
    let json: any;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    return { status: res.status, json, text };
  };
  const server: TestServer = {
    proc,
    url: proc.url,
    dataDir,
    token: opts.token,
    logs,
    post: (path, body, headers) => request("POST", path, body, headers),
    get: (path, headers) => request("GET", path, undefined, headers),
    async bash(slot, command, extra = {}, envelope = {}) {
      const r = await request("POST", "/execute", { slot_id: `slot_${slot}`, tool: "bash", args: { command, ...extra }, ...envelope });
      if (r.status !== 200) throw new Error(`HTTP ${r.status}: ${r.text}`);
      return r.json as ExecuteResponse;
    },
    async stop() {
      await proc.stop(10_000);
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
  return server;
}

/** Host uid of a slot's processes when the tests run as root (see `--slot-uid-base`). */
export const SLOT_UID_BASE = 20_000;
export const isRoot = typeof process.getuid === "function" && process.getuid() === 0;

/**
 * The server's log lines since `from` that match, once at least `atLeast` have arrived (or
 * after `timeoutMs`): a line logged before an answer may still be in the server's stdout
 * pipe when the answer reaches the test. The lines come in milliseconds; 60 s is only the
 * point where a test gives up (a loaded box once took more than the 10 s it had).
 */
export async function logLinesSince(s: TestServer, from: number, match: (line: string) => boolean, atLeast = 1, timeoutMs = 60_000): Promise<string[]> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const lines = s.logs.slice(from).filter(match);
    if (lines.length >= atLeast || Date.now() >= deadline) return lines;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Waits until a slot's entry of GET /slots satisfies `ready` — e.g. `queued >= 2`: a call is
 * running there and another waits behind it — instead of sleeping for "long enough" (the event
 * a test needs, whatever the machine's load). Gives up after a minute.
 */
export async function untilSlot(s: TestServer, slot: number, ready: (entry: { state: string; queued: number; warm?: boolean }) => boolean, what = "the slot's state"): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (;;) {
    const entry = ((await s.get("/slots")).json as { slots: Array<{ state: string; queued: number; warm?: boolean }> }).slots[slot]!;
    if (ready(entry)) return;
    if (Date.now() > deadline) throw new Error(`slot_${slot}: ${what} not reached within 60 s (last: ${JSON.stringify(entry)})`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/** Reads a streaming route's newline-delimited JSON events into `events` as they come; resolves at the stream's end. */
export async function readEvents<T>(res: Response, events: T[]): Promise<void> {
  let buf = "";
  for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
    buf += Buffer.from(chunk).toString("utf8");
    let nl: number;
    while ((nl = buf.indexOf("\n")) >= 0) {
      events.push(JSON.parse(buf.slice(0, nl)) as T);
      buf = buf.slice(nl + 1);
    }
  }
}
