import { Agent, request, type Dispatcher } from "undici";
import type { ProcessEvent, ProcessInfo, ProcessStartRequest } from "../protocol/process-session.js";
import type { LeasedSlot } from "../pool/types.js";
import type { VolumeMount } from "../protocol/volumes.js";
import type { EgressRules } from "../protocol/egress.js";
import { E2bApiError } from "./errors.js";

/** The events of a started or re-attached process; `close()` stops listening (the process goes on). */
export interface ProcessStream {
  readonly pid: number;
  events: AsyncIterable<ProcessEvent>;
  close(): void;
}

/** One sample of a slot's use (the sandbox server's `POST /slots/usage`, sandbox/tools/slot-usage.ts). */
export interface SlotUsageSample {
  timestamp: number;
  cpu_seconds: number;
  mem_used: number;
  mem_total: number;
  disk_used: number;
  disk_total: number;
}

/** What a finished helper command gave (filesystem operations, /files). */
export interface CapturedRun {
  exitCode: number;
  signal: string | null;
  stdout: Buffer;
  stderr: string;
}

/**
 * Tag of the server's own helper processes (filesystem operations, /files, watches), for
 * the sandbox server's logs. A tag is not what hides them from clients: a client can tag
 * its own command with anything, so helpers are known by the pids this server started
 * them under (`isHelper`).
 */
export const HELPER_TAG = "slotpool:helper";

/** Per-sandbox bounds on what a sandbox holds open on its sandbox server (see docs/e2b.md). */
export interface SlotProcessLimits {
  /** Open process streams (commands streamed or attached, watches, file transfers). */
  maxStreams: number;
  /** Stdin bytes on their way to the sandbox server at once (SendInput / StreamInput). */
  maxInputBytes: number;
}

export const DEFAULT_SLOT_PROCESS_LIMITS: SlotProcessLimits = { maxStreams: 32, maxInputBytes: 32 * 1024 * 1024 };

/**
 * Two separate connection budgets to the sandbox servers. Streams (a command's events, a
 * watch, a download) hold a connection for as long as they run, so they get their own
 * agent, bounded per sandbox by `maxStreams` rather than by a shared connection count
 * that one sandbox could fill. Control calls (signal, kill-all, list, close-stdin) are
 * short and go through another agent, so a kill or a timeout never waits behind any
 * sandbox's streams; their timeouts keep a stuck sandbox server from holding one forever.
 */
const streamAgent: Dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: null, headersTimeout: 120_000, bodyTimeout: 0 });
const controlAgent: Dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: 32, headersTimeout: 30_000, bodyTimeout: 30_000 });
/** Stdin writes: on the stream agent (they may wait on a full pipe), with a deadline. */
const INPUT_TIMEOUT_MS = 60_000;
/** Stdin goes to the sandbox server in pieces of at most this size (one JSON request each). */
const INPUT_PIECE = 4 * 1024 * 1024;

/**
 * Client of one slot's process sessions on its sandbox server (`/processes/*`, see
 * protocol/process-session.ts). A refusal by the server becomes an E2bApiError with the
 * server's status and message.
 */
export class SlotProcesses {
  /** Pids of this server's own helpers: hidden from clients' lists and tag selectors. */
  private readonly helpers = new Set<number>();
  /** Streams open now (each holds a connection): closed when the sandbox ends. */
  private readonly open = new Set<{ destroy(): void }>();
  /** Streams being started (counted against the cap before their connection exists). */
  private starting = 0;
  private inputBytes = 0;
  private ended = false;

  /** Whether the sandbox ended (closeAll ran): its streams were torn down, not finished. */
  get closed(): boolean {
    return this.ended;
  }

  constructor(
    private readonly slot: LeasedSlot,
    private readonly limits: SlotProcessLimits = DEFAULT_SLOT_PROCESS_LIMITS,
    /** The sandbox's volumes: every process it starts (helpers too) has them mounted. */
    private readonly volumes: readonly VolumeMount[] = [],
  ) {}

  /** Whether `pid` is one of this server's helper processes (never a client's command). */
  isHelper(pid: number): boolean {
    return this.helpers.has(pid);
  }

  /** Open streams now (for tests and metrics). */
  get openStreams(): number {
    return this.open.size + this.starting;
  }

  /** The sandbox ended: every open stream is torn down and no new one starts. */
  closeAll(): void {
    this.ended = true;
    for (const s of this.open) s.destroy();
    this.open.clear();
  }

  private async call(path: string, body: Record<string, unknown>, signal?: AbortSignal, dispatcher: Dispatcher = controlAgent): Promise<Dispatcher.ResponseData> {
    const c = this.slot.container;
    this.slot.touch();
    const res = await request(c.url + path, {
      method: "POST",
      dispatcher,
      headers: { "content-type": "application/json", ...(c.token ? { authorization: `Bearer ${c.token}` } : {}) },
      body: JSON.stringify({ slot_id: this.slot.slotId, ...body }),
      ...(signal ? { signal } : {}),
    });
    if (res.statusCode !== 200) {
      const text = await res.body.text();
      let message = text;
      try {
        message = (JSON.parse(text) as { error?: string }).error ?? text;
      } catch {
        /* not JSON: keep the text */
      }
      throw new E2bApiError(res.statusCode, message);
    }
    return res;
  }

  private async json<T>(path: string, body: Record<string, unknown>): Promise<T> {
    return (await (await this.call(path, body)).body.json()) as T;
  }

  /** Starts a client's command (or, with `helper`, one of this server's own) and streams its events. */
  async start(req: Omit<ProcessStartRequest, "slot_id">, signal?: AbortSignal, helper = false): Promise<ProcessStream> {
    return this.openStream("/processes/start", this.volumes.length > 0 ? { ...req, volumes: this.volumes } : req, signal, helper);
  }

  async connect(pid: number, signal?: AbortSignal): Promise<ProcessStream> {
    return this.openStream("/processes/connect", { pid }, signal, false);
  }

  /** Starts one of this server's helpers (tagged, hidden from clients' lists). */
  startHelper(req: Omit<ProcessStartRequest, "slot_id" | "tag">, signal?: AbortSignal): Promise<ProcessStream> {
    return this.start({ ...req, tag: HELPER_TAG }, signal, true);
  }

  /**
   * Stdin for a process. What is on its way to the sandbox server at once is bounded per
   * sandbox (past it: 429, the client retries once earlier input has gone through), and a
   * write the sandbox server does not take within INPUT_TIMEOUT_MS fails: nothing here
   * buffers stdin for a process that never reads it.
   */
  async input(pid: number, data: Uint8Array): Promise<void> {
    if (data.length > this.limits.maxInputBytes) throw new E2bApiError(413, `stdin of ${data.length} bytes in one message is above this server's limit of ${this.limits.maxInputBytes} bytes; send it in pieces`);
    if (this.inputBytes + data.length > this.limits.maxInputBytes) {
      throw new E2bApiError(429, `this sandbox already has ${this.inputBytes} bytes of stdin on their way (limit ${this.limits.maxInputBytes}); wait for earlier input to be taken`);
    }
    this.inputBytes += data.length;
    try {
      const deadline = AbortSignal.timeout(INPUT_TIMEOUT_MS);
      // In pieces the sandbox server's JSON body limit takes, in order, each after the last was taken.
      for (let off = 0; off < data.length || off === 0; off += INPUT_PIECE) {
        const piece = Buffer.from(data.buffer, data.byteOffset + off, Math.min(INPUT_PIECE, data.length - off));
        const res = await this.call("/processes/input", { pid, data: piece.toString("base64") }, deadline, streamAgent);
        await res.body.dump();
        if (data.length === 0) break;
      }
    } catch (err) {
      if (err instanceof Error && err.name === "TimeoutError") throw new E2bApiError(504, `stdin for process ${pid} was not taken within ${INPUT_TIMEOUT_MS / 1000} s (the process does not read it?)`);
      throw err;
    } finally {
      this.inputBytes -= data.length;
    }
  }

  async closeStdin(pid: number): Promise<void> {
    await this.json("/processes/close-stdin", { pid });
  }

  async signal(pid: number, signal: "SIGKILL" | "SIGTERM"): Promise<void> {
    await this.json("/processes/signal", { pid, signal });
  }

  /** Every process of the slot's sessions, this server's helpers included (see `isHelper`). */
  async list(): Promise<ProcessInfo[]> {
    const all = (await this.json<{ processes: ProcessInfo[] }>("/processes/list", {})).processes;
    // A helper that is no longer listed has ended: forget its pid (it may be reused).
    const live = new Set(all.map((p) => p.pid));
    for (const pid of this.helpers) if (!live.has(pid)) this.helpers.delete(pid);
    return all;
  }

  async killAll(): Promise<void> {
    await this.json("/processes/kill-all", {});
  }

  /** Freezes every process of the slot (the sandbox server's freezer: cgroup or SIGSTOP); `thaw` resumes them. */
  async freeze(): Promise<{ mechanism: string; processes: number }> {
    return this.json("/processes/freeze", {});
  }

  /** Replaces the slot's egress rules (protocol/egress.ts): in force for all its processes when this resolves. */
  async setEgress(rules: EgressRules): Promise<void> {
    await this.json("/processes/egress", { allow: rules.allow, deny: rules.deny });
  }

  /** What the slot uses now (its processes' memory and CPU time, its disk): E2B's metrics. */
  async usage(): Promise<SlotUsageSample> {
    return this.json("/slots/usage", {});
  }

  async thaw(): Promise<void> {
    await this.json("/processes/thaw", {});
  }

  /** Runs a helper command to its end and collects its output (stdin written first when given). */
  async run(cmd: string, args: string[], stdin?: Uint8Array): Promise<CapturedRun> {
    const p = await this.startHelper({ cmd, args, stdin: stdin !== undefined, workspace_alias: "/home/user", cwd: "/home/user" });
    if (stdin !== undefined) {
      if (stdin.length > 0) await this.input(p.pid, stdin);
      await this.closeStdin(p.pid);
    }
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    for await (const ev of p.events) {
      if (ev.type === "stdout") out.push(Buffer.from(ev.data, "base64"));
      else if (ev.type === "stderr") err.push(Buffer.from(ev.data, "base64"));
      else if (ev.type === "end") return { exitCode: ev.exit_code, signal: ev.signal, stdout: Buffer.concat(out), stderr: Buffer.concat(err).toString("utf8") };
    }
    throw new E2bApiError(502, `the sandbox server ended process ${p.pid}'s stream without its end`);
  }

  /** A process stream, counted against the sandbox's stream cap from request to close. */
  private async openStream(path: string, body: Record<string, unknown>, signal: AbortSignal | undefined, helper: boolean): Promise<ProcessStream> {
    if (this.ended) throw new E2bApiError(502, "this sandbox has ended (killed or timed out)");
    if (this.open.size + this.starting >= this.limits.maxStreams) {
      throw new E2bApiError(
        429,
        `this sandbox already holds ${this.limits.maxStreams} open streams (commands being streamed or attached, watches, file transfers; --max-streams-per-sandbox): end or disconnect one first`,
      );
    }
    this.starting++;
    let res: Dispatcher.ResponseData;
    try {
      res = await this.call(path, body, signal, streamAgent);
    } finally {
      this.starting--;
    }
    const handle = { destroy: () => res.body.destroy() };
    this.open.add(handle);
    const release = () => this.open.delete(handle);
    res.body.once("close", release);
    if (this.ended) res.body.destroy();
    const lines = ndjson(res.body);
    const first = await lines.next();
    if (first.done || first.value.type !== "start") {
      res.body.destroy();
      throw new E2bApiError(502, "the sandbox server's process stream did not begin with its start");
    }
    const pid = first.value.pid;
    if (helper) this.helpers.add(pid);
    return { pid, events: { [Symbol.asyncIterator]: () => lines }, close: () => res.body.destroy() };
  }
}

async function* ndjson(body: AsyncIterable<Buffer>): AsyncGenerator<ProcessEvent> {
  let buf = "";
  const utf8 = new TextDecoder();
  try {
    for await (const chunk of body) {
      buf += utf8.decode(chunk, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl);
        buf = buf.slice(nl + 1);
        if (line) yield JSON.parse(line) as ProcessEvent;
      }
    }
  } catch (err) {
    // The stream was closed by us (close()) or the server went away: the events just end.
    if (!(err instanceof Error) || !/aborted|destroyed|terminated|socket/i.test(err.message)) throw err;
  }
}
