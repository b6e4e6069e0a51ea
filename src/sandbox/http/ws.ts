import { spawn } from "node:child_process";
import type { IncomingMessage } from "node:http";
import type { Duplex } from "node:stream";
import { WebSocketServer, type WebSocket } from "ws";
import { SlotIdSchema } from "../../protocol/sandbox.js";
import { HttpError } from "../../http/errors.js";
import { SANDBOX_PATH } from "../isolation/isolation.js";
import { sendFilter } from "../isolation/seccomp.js";
import { ATTACH_FILTER_FD } from "../tools/stateful.js";
import type { SandboxService } from "../service/service.js";
import { withoutCapabilities } from "../../host/mount-namespace.js";

/**
 * WebSocket route `GET /ws` (same bearer token as HTTP; `?token=` also accepted for
 * clients that cannot set headers). The first client message picks the mode:
 *
 *  {"type":"execute", ...execute body}   run a call (queued on its slot like any other),
 *      stream {"type":"output","stream":"stdout"|"stderr","data":…} as it is produced, then
 *      {"type":"result", ...execute answer}; the socket then closes.
 *  {"type":"attach","slot_id":"slot_0"}  read-only view of the slot's terminal session:
 *      {"type":"screen","data":…} (current screen), then {"type":"output","data":…} as the
 *      terminal prints. Client messages after that are ignored (read-only by construction,
 *      and tmux attaches with -r). {"type":"error","error":…} then close when the slot has
 *      no session.
 */
export class SandboxWebSockets {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: 16 * 1024 * 1024 });

  constructor(private readonly service: SandboxService) {}

  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    this.wss.handleUpgrade(req, socket, head, (ws) => this.onConnection(ws));
  }

  private send(ws: WebSocket, msg: unknown): void {
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(msg));
  }

  private onConnection(ws: WebSocket): void {
    ws.once("message", (raw) => {
      let msg: { type?: string; [k: string]: unknown };
      try {
        msg = JSON.parse(String(raw)) as typeof msg;
      } catch {
        this.send(ws, { type: "error", error: "first message must be JSON", field: "body" });
        ws.close(1003);
        return;
      }
      if (msg.type === "execute") void this.execute(ws, msg);
      else if (msg.type === "attach") this.attach(ws, msg);
      else {
        this.send(ws, { type: "error", error: "first message must have type 'execute' or 'attach'", field: "type" });
        ws.close(1003);
      }
    });
  }

  private async execute(ws: WebSocket, msg: Record<string, unknown>): Promise<void> {
    const { type: _t, ...body } = msg;
    try {
      const call = this.service.parseCall(body);
      const result = await this.service.execute(call, (stream, data) => {
        this.send(ws, { type: "output", stream, data });
        // A reader that does not keep up makes the command wait, not the server buffer.
        if (ws.bufferedAmount > HIGH_WATER) return belowLowWater(ws);
        return undefined;
      });
      this.send(ws, { type: "result", ...result });
      ws.close(1000);
    } catch (err) {
      this.send(ws, { type: "error", error: err instanceof Error ? err.message : String(err), ...(err instanceof HttpError && err.field ? { field: err.field } : {}) });
      ws.close(1008);
    }
  }

  private attach(ws: WebSocket, msg: Record<string, unknown>): void {
    const id = SlotIdSchema.safeParse(msg["slot_id"]);
    if (!id.success) {
      this.send(ws, { type: "error", error: id.error.issues[0]!.message, field: "slot_id" });
      ws.close(1008);
      return;
    }
    let slot;
    try {
      slot = this.service.slotById(id.data);
    } catch (err) {
      this.send(ws, { type: "error", error: (err as Error).message, field: "slot_id" });
      ws.close(1008);
      return;
    }
    const cmd = this.service.stateful.attachCommand(slot);
    if (!cmd) {
      this.send(ws, { type: "error", error: `${slot.id} has no terminal session (start one with bash_stateful or tmux start)` });
      ws.close(1000);
      return;
    }
    const svc = this.service;
    const owner = slot.owner ? { uid: slot.owner.uid, gid: slot.owner.gid } : {};
    const sandboxed = cmd.sandboxArgs !== null && svc.bwrap.path !== null;
    // Without the capabilities a non-root server holds over its own user namespace.
    const [file, ...args] = sandboxed ? [svc.bwrap.path!, "--args", "3", "--", ...cmd.command] : cmd.command;
    const start = withoutCapabilities(file!, args);
    // A process group of its own: the slot's reset kills all of it (StatefulSessions.stop).
    const child = sandboxed
      ? spawn(start.file, start.args, { stdio: ["pipe", "pipe", "pipe", "pipe", "pipe"], env: {}, cwd: "/", detached: true, ...owner })
      : spawn(start.file, start.args, {
          stdio: ["pipe", "pipe", "pipe"],
          cwd: slot.workspaceDir,
          env: { PATH: SANDBOX_PATH, TERM: "xterm", HOME: slot.workspaceDir, LANG: "C.UTF-8", SHELL: "/bin/bash" },
          detached: true,
          ...owner,
        });
    svc.stateful.trackAttach(slot, child);
    const killGroup = (): void => {
      if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
      try {
        process.kill(-child.pid, "SIGKILL");
      } catch {
        child.kill("SIGKILL");
      }
    };
    // The same wall-clock bound as any slot command: the viewer may attach again.
    const timer = setTimeout(() => {
      this.send(ws, { type: "error", error: `terminal attach ended after ${cmd.timeoutS} s (the slot's longest command timeout); attach again to keep watching` });
      killGroup();
    }, cmd.timeoutS * 1000);
    timer.unref();
    child.once("exit", () => clearTimeout(timer));
    if (sandboxed) {
      // In the slot's cgroups before bwrap reads its arguments (and forks anything).
      if (child.pid !== undefined) svc.cgroups.place(slot.index, child.pid);
      (child.stdio[3] as NodeJS.WritableStream).end(Buffer.from(cmd.sandboxArgs!.map((a) => a + "\0").join(""), "utf8"));
      sendFilter(child.stdio[ATTACH_FILTER_FD] as NodeJS.WritableStream, svc.bwrap.filter);
    }
    // Control mode: ask for the current screen once, then forward %output notifications.
    child.stdin.write("capture-pane -p -e -t main\n");
    let buf = "";
    let inBlock = false;
    let ours = false;
    let screenSent = false;
    let screen: string[] = [];
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk: string) => {
      buf += chunk;
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line.startsWith("%begin")) {
          inBlock = true;
          // "%begin <time> <number> <flags>": flags 1 marks the answer to a command this
          // client sent (our capture-pane); others answer the attach itself.
          ours = line.split(" ")[3] === "1";
          screen = [];
        } else if (line.startsWith("%end") || line.startsWith("%error")) {
          if (inBlock && ours && !screenSent) {
            screenSent = true;
            this.send(ws, { type: "screen", data: screen.join("\n").replace(/\n+$/, "") });
          }
          inBlock = false;
        } else if (inBlock) screen.push(line);
        else if (line.startsWith("%output ")) {
          const m = /^%output %\d+ (.*)$/.exec(line);
          if (m) this.send(ws, { type: "output", data: unescapeControl(m[1]!) });
        } else if (line.startsWith("%exit")) {
          this.send(ws, { type: "exit" });
        }
      }
    });
    child.stderr.resume();
    child.stdin.on("error", () => undefined);
    child.once("exit", () => ws.close(1000));
    child.once("error", (err) => {
      this.send(ws, { type: "error", error: `cannot attach: ${err.message}` });
      ws.close(1011);
    });
    ws.on("close", killGroup);
  }

  close(): void {
    for (const c of this.wss.clients) c.terminate();
    this.wss.close();
  }
}

const HIGH_WATER = 1024 * 1024;
const LOW_WATER = 256 * 1024;

/** Resolves once the socket's send buffer is below the low-water mark (or it closed). */
function belowLowWater(ws: WebSocket): Promise<void> {
  return new Promise((resolve) => {
    const check = setInterval(() => {
      if (ws.readyState !== ws.OPEN || ws.bufferedAmount < LOW_WATER) {
        clearInterval(check);
        resolve();
      }
    }, 20);
  });
}

/** tmux control mode escapes bytes < 32 and backslash as \ooo (octal). */
export function unescapeControl(s: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < s.length; i++) {
    if (s[i] === "\\" && /^[0-7]{3}$/.test(s.slice(i + 1, i + 4))) {
      bytes.push(parseInt(s.slice(i + 1, i + 4), 8));
      i += 3;
    } else {
      const code = s.charCodeAt(i);
      if (code < 0x80) bytes.push(code);
      else for (const b of Buffer.from(s[i]!, "utf8")) bytes.push(b);
    }
  }
  return Buffer.from(bytes).toString("utf8");
}
