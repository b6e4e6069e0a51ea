import type { IncomingMessage, ServerResponse } from "node:http";
import type { JsonBodyReader } from "../../http/body.js";
import { parseBody } from "../../http/body.js";
import { HttpError } from "../../http/errors.js";
import { sendJson } from "../../http/respond.js";
import type { RouteTable } from "../../http/routes.js";
import {
  ProcessInputRequestSchema,
  ProcessSelectorSchema,
  ProcessSignalRequestSchema,
  ProcessSlotRequestSchema,
  ProcessStartRequestSchema,
  type ProcessEvent,
} from "../../protocol/process-session.js";
import type { ProcessSession, ProcessSessions } from "../tools/process-sessions.js";
import { SlotEgressRequestSchema, type EgressRules } from "../../protocol/egress.js";
import { EgressRulesError } from "../isolation/egress-rules.js";
import type { Slot } from "../core/slot.js";

/** What the routes need from the sandbox service. */
export interface ProcessRouteHost {
  readonly processes: ProcessSessions;
  /** Whether the server's shutdown has begun: no process starts then. */
  readonly shuttingDown: boolean;
  slotById(id: string): Slot;
}

/** Unsent output past which a reader counts as slow and the process is paused. */
const HIGH_WATER = 1024 * 1024;

/**
 * The `/processes/*` routes (see protocol/process-session.ts). Start and connect stream
 * NDJSON until the process ends; a client that goes away leaves the process running.
 */
export function addProcessRoutes(table: RouteTable, host: ProcessRouteHost, body: JsonBodyReader): RouteTable {
  const read = async <T>(req: IncomingMessage, schema: Parameters<typeof parseBody>[0]): Promise<T> => parseBody(schema, await body.read(req)) as T;
  return table
    .add("POST", "/processes/start", async (req, res) => {
      const r = parseBody(ProcessStartRequestSchema, await body.read(req));
      // A request still arriving when the shutdown began: its process would be killed at once, or outlive the slot's teardown.
      if (host.shuttingDown) throw new HttpError(503, "sandbox server is shutting down: the process was not started");
      const session = await host.processes.startWhenSettled(host.slotById(r.slot_id), {
        cmd: r.cmd,
        args: r.args,
        envs: r.envs,
        cwd: r.cwd,
        stdin: r.stdin,
        tag: r.tag,
        workspaceAlias: r.workspace_alias,
        allowNetwork: r.allow_network,
        volumes: r.volumes,
        user: r.user,
      });
      stream(res, session);
    })
    .add("POST", "/processes/connect", async (req, res) => {
      const r = await read<{ slot_id: string; pid: number }>(req, ProcessSelectorSchema);
      stream(res, host.processes.get(host.slotById(r.slot_id), r.pid));
    })
    .add("POST", "/processes/input", async (req, res) => {
      const r = await read<{ slot_id: string; pid: number; data: string }>(req, ProcessInputRequestSchema);
      await host.processes.get(host.slotById(r.slot_id), r.pid).write(Buffer.from(r.data, "base64"));
      sendJson(res, 200, {});
    })
    .add("POST", "/processes/close-stdin", async (req, res) => {
      const r = await read<{ slot_id: string; pid: number }>(req, ProcessSelectorSchema);
      host.processes.get(host.slotById(r.slot_id), r.pid).closeStdin();
      sendJson(res, 200, {});
    })
    .add("POST", "/processes/signal", async (req, res) => {
      const r = await read<{ slot_id: string; pid: number; signal: NodeJS.Signals }>(req, ProcessSignalRequestSchema);
      await host.processes.get(host.slotById(r.slot_id), r.pid).signal(r.signal);
      sendJson(res, 200, {});
    })
    .add("POST", "/processes/list", async (req, res) => {
      const r = await read<{ slot_id: string }>(req, ProcessSlotRequestSchema);
      sendJson(res, 200, { processes: host.processes.list(host.slotById(r.slot_id)) });
    })
    // Pause/resume of every process of the slot (isolation/slot-freezer.ts); both idempotent.
    .add("POST", "/processes/freeze", async (req, res) => {
      const slot = host.slotById((await read<{ slot_id: string }>(req, ProcessSlotRequestSchema)).slot_id);
      sendJson(res, 200, await host.processes.freezer.freeze(slot.index, slot.id));
    })
    .add("POST", "/processes/thaw", async (req, res) => {
      const slot = host.slotById((await read<{ slot_id: string }>(req, ProcessSlotRequestSchema)).slot_id);
      await host.processes.freezer.thaw(slot.index);
      sendJson(res, 200, { mechanism: host.processes.freezer.mechanism(slot.index) });
    })
    // The slot's egress rules (protocol/egress.ts): in force for what runs when this answers.
    .add("POST", "/processes/egress", async (req, res) => {
      const r = await read<EgressRules & { slot_id: string }>(req, SlotEgressRequestSchema);
      const slot = host.slotById(r.slot_id);
      try {
        await host.processes.networks.setEgress(slot.index, { allow: r.allow, deny: r.deny });
      } catch (err) {
        if (err instanceof EgressRulesError) throw new HttpError(host.processes.networks.egressUnavailable ? 503 : 500, err.message);
        throw err;
      }
      sendJson(res, 200, host.processes.networks.egressOf(slot.index));
    })
    .add("POST", "/processes/kill-all", async (req, res) => {
      const r = await read<{ slot_id: string }>(req, ProcessSlotRequestSchema);
      await host.processes.endAll(host.slotById(r.slot_id));
      sendJson(res, 200, {});
    });
}

function stream(res: ServerResponse, session: ProcessSession): void {
  res.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-cache" });
  const write = (ev: ProcessEvent): boolean => {
    if (res.destroyed) return false;
    res.write(JSON.stringify(ev) + "\n");
    if (ev.type === "end") res.end();
    return res.writableLength > HIGH_WATER;
  };
  write({ type: "start", pid: session.pid });
  if (session.ended) {
    write(session.ended);
    return;
  }
  const listener = {
    event: write,
    onDrain: (resume: () => void) => {
      const done = () => {
        res.off("drain", done);
        res.off("close", done);
        resume();
      };
      res.on("drain", done);
      res.on("close", done);
    },
  };
  session.listeners.add(listener);
  // The client went away: the process goes on (E2B semantics), only this stream ends.
  res.once("close", () => session.listeners.delete(listener));
}
