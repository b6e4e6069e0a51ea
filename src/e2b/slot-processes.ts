import { Agent, request, type Dispatcher } from "undici";
import type { ProcessEvent, ProcessInfo, ProcessStartRequest } from "../protocol/process-session.js";
import type { LeasedSlot } from "../pool/types.js";
import { E2bApiError } from "./errors.js";

/** The events of a started or re-attached process; `close()` stops listening (the process goes on). */
export interface ProcessStream {
  readonly pid: number;
  events: AsyncIterable<ProcessEvent>;
  close(): void;
}

/** What a finished helper command gave (filesystem operations, /files). */
export interface CapturedRun {
  exitCode: number;
  signal: string | null;
  stdout: Buffer;
  stderr: string;
}

/** Tag of the server's own helper processes (filesystem operations, /files, watches): not listed to clients. */
export const HELPER_TAG = "slotpool:helper";
export const isHelperTag = (tag: string | undefined): boolean => tag?.startsWith("slotpool:") ?? false;

/** One keep-alive agent for every sandbox server this process talks to. */
const agent: Dispatcher = new Agent({ keepAliveTimeout: 30_000, connections: 64 });

/**
 * Client of one slot's process sessions on its sandbox server (`/processes/*`, see
 * protocol/process-session.ts). A refusal by the server becomes an E2bApiError with the
 * server's status and message.
 */
export class SlotProcesses {
  constructor(private readonly slot: LeasedSlot) {}

  private async call(path: string, body: Record<string, unknown>, signal?: AbortSignal): Promise<Dispatcher.ResponseData> {
    const c = this.slot.container;
    this.slot.touch();
    const res = await request(c.url + path, {
      method: "POST",
      dispatcher: agent,
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

  async start(req: Omit<ProcessStartRequest, "slot_id">, signal?: AbortSignal): Promise<ProcessStream> {
    return this.stream(await this.call("/processes/start", req, signal));
  }

  async connect(pid: number, signal?: AbortSignal): Promise<ProcessStream> {
    return this.stream(await this.call("/processes/connect", { pid }, signal));
  }

  async input(pid: number, data: Uint8Array): Promise<void> {
    await this.json("/processes/input", { pid, data: Buffer.from(data).toString("base64") });
  }

  async closeStdin(pid: number): Promise<void> {
    await this.json("/processes/close-stdin", { pid });
  }

  async signal(pid: number, signal: "SIGKILL" | "SIGTERM"): Promise<void> {
    await this.json("/processes/signal", { pid, signal });
  }

  async list(): Promise<ProcessInfo[]> {
    return (await this.json<{ processes: ProcessInfo[] }>("/processes/list", {})).processes;
  }

  async killAll(): Promise<void> {
    await this.json("/processes/kill-all", {});
  }

  /** Runs a helper command to its end and collects its output (stdin written first when given). */
  async run(cmd: string, args: string[], stdin?: Uint8Array): Promise<CapturedRun> {
    const p = await this.start({ cmd, args, stdin: stdin !== undefined, tag: HELPER_TAG, workspace_alias: "/home/user", cwd: "/home/user" });
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

  private async stream(res: Dispatcher.ResponseData): Promise<ProcessStream> {
    const lines = ndjson(res.body);
    const first = await lines.next();
    if (first.done || first.value.type !== "start") {
      res.body.destroy();
      throw new E2bApiError(502, "the sandbox server's process stream did not begin with its start");
    }
    return { pid: first.value.pid, events: { [Symbol.asyncIterator]: () => lines }, close: () => res.body.destroy() };
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
