import type { JsonBodyReader } from "../../http/body.js";
import { parseBody } from "../../http/body.js";
import { sendJson } from "../../http/respond.js";
import type { RouteTable } from "../../http/routes.js";
import { ProcessSlotRequestSchema } from "../../protocol/process-session.js";
import type { Slot } from "../core/slot.js";
import type { SlotCgroups } from "../isolation/cgroups.js";
import { processTree, slotUsage } from "../tools/slot-usage.js";

/** What the route needs from the sandbox service. */
export interface UsageRouteHost {
  readonly processes: { sessionPids(slot: Slot): number[] };
  readonly cgroups: SlotCgroups;
  readonly limits: { readonly memoryBytes: number };
  slotById(id: string): Slot;
}

/** `POST /slots/usage {slot_id}`: what the slot uses now (tools/slot-usage.ts; E2B's sandbox metrics). */
export function addUsageRoutes(table: RouteTable, host: UsageRouteHost, body: JsonBodyReader): RouteTable {
  return table.add("POST", "/slots/usage", async (req, res) => {
    const slot = host.slotById((parseBody(ProcessSlotRequestSchema, await body.read(req)) as { slot_id: string }).slot_id);
    // The slot's cgroup holds all its processes; without cgroups, its sessions' trees.
    const inCgroup = host.cgroups.pids(slot.index);
    const pids = inCgroup.length > 0 ? inCgroup : processTree(host.processes.sessionPids(slot));
    sendJson(res, 200, slotUsage(slot, pids, host.limits.memoryBytes, host.cgroups.cpuSeconds(slot.index)));
  });
}
