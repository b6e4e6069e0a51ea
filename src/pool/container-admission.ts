import type { SlotPoolConfig } from "./config.js";
import type { HealthMonitor } from "./health-monitor.js";
import { ContainerRecord } from "./records.js";
import type { SandboxClientLike } from "./sandbox-client.js";
import type { ContainerInfo } from "./types.js";

/** What admitting a container needs from the pool. */
export interface AdmissionHost {
  readonly config: Pick<SlotPoolConfig, "maxConcurrencyPerContainer" | "slotsPerContainer">;
  readonly health: Pick<HealthMonitor, "admit" | "suspect">;
  /** False once the pool is stopping: containers that come up then are not taken in. */
  accepting(): boolean;
  /** The container is known already, or was given up (a retired id never comes back). */
  known(id: string): boolean;
  createClient(info: ContainerInfo, hooks: { onConnectionFailure: (error: Error) => void; maxConcurrency: number }): SandboxClientLike;
  /** A new record, still being checked: the pool files it (by id, in packing order). */
  register(record: ContainerRecord): void;
  /** Its first /health answered with `slots` slots: the pool opens them. */
  opened(record: ContainerRecord, slots: number, generations?: readonly number[]): void;
}

/**
 * Container admission: a container the provisioner reports up gets a client and a record,
 * is health-checked until it answers (HealthMonitor.admit), and only then are its slots
 * opened. A connection failure on its client makes the health monitor suspect it.
 */
export class ContainerAdmission {
  constructor(private readonly host: AdmissionHost) {}

  /** The provisioner reports `info` up: take it in and check it (unless known or stopping). */
  containerUp(info: ContainerInfo): void {
    if (!this.host.accepting() || this.host.known(info.id)) return;
    const maxConcurrency = this.host.config.maxConcurrencyPerContainer ?? Math.max(info.slots, this.host.config.slotsPerContainer) * 4;
    let record: ContainerRecord | undefined;
    const client = this.host.createClient(info, {
      maxConcurrency,
      onConnectionFailure: (error) => {
        if (record) void this.host.health.suspect(record, error);
      },
    });
    record = new ContainerRecord(info, client);
    this.host.register(record);
    void this.admit(record);
  }

  /** Health-checks a new container until it answers, then opens its slots. */
  private async admit(record: ContainerRecord): Promise<void> {
    const found = await this.host.health.admit(record);
    if (found === undefined || record.state !== "checking" || !this.host.accepting()) return;
    this.host.opened(record, found.slots, found.generations);
  }
}

/** Inserts `record` into `containers` (sorted by index, ties in arrival order). */
export function insertByIndex(containers: ContainerRecord[], record: ContainerRecord): void {
  let lo = 0;
  let hi = containers.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (containers[mid]!.index <= record.index) lo = mid + 1;
    else hi = mid;
  }
  containers.splice(lo, 0, record);
}
