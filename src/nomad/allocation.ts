/**
 * Reading an allocation: where its sandbox server listens, which name index it holds, and
 * what its tasks reported (for error messages a user can act on).
 */
import type { AllocListStub, Allocation, NetworkResource, TaskEvent } from "./schemas.js";

export interface AllocationAddress {
  /** Host for a URL: an IPv6 address comes bracketed ("[::1]"). */
  host: string;
  port: number;
  /** `http://host:port` */
  url: string;
}

/**
 * Host and port of the allocation's port labelled `label`.
 *
 * Order (shared/nomad-api/README.md "Dynamic ports: where they appear"):
 * 1. `AllocatedResources.Shared.Ports[]` — canonical: connect to `HostIP:Value`;
 * 2. `AllocatedResources.Shared.Networks[].DynamicPorts/ReservedPorts` with the network's `IP`
 *    (the compatibility copy);
 * 3. the deprecated task-level networks (`AllocatedResources.Tasks[t].Networks`,
 *    `TaskResources`, `Resources`) that old servers and the old doc samples use.
 * Null when the allocation (e.g. a list stub) carries no such port.
 */
export function allocationHttpAddress(alloc: AllocListStub | Allocation, label = "http"): AllocationAddress | null {
  const shared = alloc.AllocatedResources?.Shared;
  const networks = shared?.Networks ?? [];
  const mapping = shared?.Ports?.find((p) => p.Label === label && p.Value);
  if (mapping?.Value) {
    const host = mapping.HostIP || networks.find((n) => n.IP)?.IP;
    if (host) return address(host, mapping.Value);
  }
  const fromShared = portInNetworks(networks, label);
  if (fromShared) return fromShared;
  const legacy: NetworkResource[] = [];
  for (const t of Object.values(alloc.AllocatedResources?.Tasks ?? {})) legacy.push(...(t?.Networks ?? []));
  const full = alloc as Allocation;
  for (const t of Object.values(full.TaskResources ?? {})) legacy.push(...(t.Networks ?? []));
  legacy.push(...(full.Resources?.Networks ?? []));
  return portInNetworks(legacy, label);
}

function portInNetworks(networks: NetworkResource[], label: string): AllocationAddress | null {
  for (const network of networks) {
    const port = [...(network.DynamicPorts ?? []), ...(network.ReservedPorts ?? [])].find((p) => p.Label === label && p.Value);
    if (port?.Value && network.IP) return address(network.IP, port.Value);
  }
  return null;
}

function address(ip: string, port: number): AllocationAddress {
  const host = ip.includes(":") && !ip.startsWith("[") ? `[${ip}]` : ip;
  return { host, port, url: `http://${host}:${port}` };
}

/**
 * The N of an allocation name `<job>.<group>[N]`; -1 when the name has no index. Scale-down
 * stops the highest N first and scale-up reuses the lowest free N (README "Scale-down"),
 * so N identifies a position, not an instance: use the allocation ID for identity.
 */
export function allocationNameIndex(name: string | undefined): number {
  const m = /\[(\d+)\]$/.exec(name ?? "");
  return m ? Number(m[1]) : -1;
}

/** Wanted running and reported running, with every task (or `task`, when it reports) running (README "Up and reachable"). */
export function isAllocationRunning(alloc: AllocListStub | Allocation, task?: string): boolean {
  if (alloc.DesiredStatus !== "run" || alloc.ClientStatus !== "running") return false;
  // A poststop task stays pending while the main task runs: look at the named task when it reports.
  const named = task !== undefined ? alloc.TaskStates?.[task] : undefined;
  if (named) return named.State === "running";
  return Object.values(alloc.TaskStates ?? {}).every((t) => t.State === "running");
}

const TERMINAL_CLIENT = new Set(["complete", "failed", "lost"]);

/** The allocation is over or going away: stopped/evicted by the server, or complete/failed/lost on the client. */
export function isAllocationTerminal(alloc: AllocListStub | Allocation): boolean {
  return alloc.DesiredStatus === "stop" || alloc.DesiredStatus === "evict" || TERMINAL_CLIENT.has(alloc.ClientStatus ?? "");
}

/**
 * The last `n` task events of the allocation, oldest first, as readable lines such as
 * "sandbox: Driver Failure: Failed to pull `img`: ..." or "sandbox: Terminated: exit code 137".
 */
export function latestTaskEvents(alloc: AllocListStub | Allocation, n = 5): string[] {
  const events: Array<{ task: string; event: TaskEvent; order: number }> = [];
  let order = 0;
  for (const [task, state] of Object.entries(alloc.TaskStates ?? {})) {
    for (const event of state.Events ?? []) events.push({ task, event, order: order++ });
  }
  events.sort((a, b) => {
    const ta = BigInt(a.event.Time ?? "0");
    const tb = BigInt(b.event.Time ?? "0");
    return ta < tb ? -1 : ta > tb ? 1 : a.order - b.order;
  });
  return events.slice(Math.max(0, events.length - n)).map(({ task, event }) => `${task}: ${describeTaskEvent(event)}`);
}

/** "Type: the most specific message the event carries". */
export function describeTaskEvent(event: TaskEvent): string {
  const details: string[] = [];
  const specific =
    event.DriverError || event.SetupError || event.DownloadError || event.ValidationError || event.KillError || event.DisplayMessage || event.Message || event.DriverMessage;
  if (specific) details.push(specific);
  if (event.Type === "Terminated" || event.ExitCode) {
    const exit = `exit code ${event.ExitCode ?? 0}${event.Signal ? `, signal ${event.Signal}` : ""}`;
    if (!specific?.includes("xit code")) details.push(exit);
  }
  const type = event.Type ?? "event";
  return details.length ? `${type}: ${details.join("; ")}` : type;
}
