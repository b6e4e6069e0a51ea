import type { Logger } from "pino";
import type { SlotPoolConfig } from "./config.js";
import type { Provisioner } from "./provisioner.js";
import type { ContainerRecord } from "./records.js";
import { isConnectionFailure, type SandboxClientLike } from "./sandbox-client.js";
import type { ContainerInfo } from "./types.js";
import type { HealthResponse } from "../protocol/sandbox.js";

/** What the health monitor reads from and tells the pool. */
export interface HealthHost {
  readonly config: Pick<SlotPoolConfig, "containerHealthTimeoutMs" | "healthIntervalMs" | "healthFailuresBeforeLost">;
  readonly provisioner: Pick<Provisioner, "replaceContainer">;
  readonly logger: Logger;
  isRunning(): boolean;
  /** Live and checking containers. */
  containers(): readonly ContainerRecord[];
  createClient(info: ContainerInfo): SandboxClientLike;
  /** The container is gone: drop its free slots, mark held ones lost. */
  markLost(container: ContainerRecord, reason: string): void;
  /** A quarantined container answers again (its slots reset): admit it as new. */
  rejoin(info: ContainerInfo): void;
  /** A container answered /health (admission, the periodic checks): what it holds (its task images) is news. */
  observed?(container: ContainerRecord, health: HealthResponse): void;
}

interface Quarantined {
  info: ContainerInfo;
  probing: boolean;
  healthyChecks: number;
}

/**
 * Watches the containers' sandbox servers: admission (wait for the first /health), periodic
 * checks, a quick check after a failed connection, and quarantine. A container that failed
 * its checks is given up: the provisioner replaces it when it can (local: kill and restart);
 * otherwise (Nomad keeps the allocation running) it is quarantined and probed, and rejoins
 * with every slot reset once it answers twice in a row.
 */
export class HealthMonitor {
  private readonly quarantined = new Map<string, Quarantined>();
  private readonly suspicions = new Map<ContainerRecord, Promise<void>>();

  constructor(
    private readonly host: HealthHost,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * Polls a new container's /health until it answers: its slot count, or undefined when the
   * container stopped being checked meanwhile or did not answer in time (then given up).
   */
  /** The container's slot count and, from servers that report them, its slots' generations. */
  async admit(record: ContainerRecord): Promise<{ slots: number; generations?: number[] } | undefined> {
    const timeoutMs = this.host.config.containerHealthTimeoutMs;
    const deadline = this.now() + timeoutMs;
    let delay = 100;
    let lastError: unknown;
    while (record.state === "checking") {
      try {
        const health = await record.client.health({ timeoutMs: 5_000 });
        if (record.state !== "checking") return undefined;
        this.host.observed?.(record, health);
        const slots = health.slots;
        if (slots !== record.info.slots) {
          this.host.logger.warn({ container: record.info.id, expected: record.info.slots, reported: slots }, "container reports a different slot count; using its own");
        }
        if (slots === 0) throw new Error("the sandbox server reports 0 slots");
        return health.slot_generations?.length === slots ? { slots, generations: health.slot_generations } : { slots };
      } catch (err) {
        lastError = err;
      }
      if (this.now() > deadline) break;
      await new Promise((r) => setTimeout(r, delay).unref());
      delay = Math.min(delay * 2, 2_000);
    }
    if (record.state !== "checking") return undefined;
    this.giveUp(record, `its sandbox server at ${record.info.url} did not answer /health within ${timeoutMs} ms (${errorMessage(lastError)})`);
    return undefined;
  }

  /** A call to the container failed to connect: check it now (once at a time), give it up if it is gone. */
  suspect(container: ContainerRecord, error: unknown): Promise<void> {
    if (container.state === "lost") return Promise.resolve();
    let pending = this.suspicions.get(container);
    if (pending) return pending;
    pending = (async () => {
      // Give the provisioner a moment to report the exit with its reason (exit code, task events).
      await new Promise((r) => setTimeout(r, 200));
      if (container.state === "lost" || container.state === "checking") return;
      try {
        await container.client.health({ timeoutMs: 2_000 });
      } catch (err) {
        // Being stopped by scale-down: refusing connections is expected; the provisioner reports it gone.
        if (!container.live || container.retiring) return;
        if (isConnectionFailure(err)) {
          this.giveUp(container, `its sandbox server at ${container.info.url} stopped accepting connections (${errorMessage(error)})`);
        }
      }
    })().finally(() => this.suspicions.delete(container));
    this.suspicions.set(container, pending);
    return pending;
  }

  /**
   * Another container of `container`'s node was lost: check this one now instead of at the
   * next round (a dead node takes all its containers). A check that fails in any way (no
   * answer within the check's timeout included, the sign of a node gone silent) gives it up.
   */
  suspectSibling(container: ContainerRecord, node: string): void {
    if (!container.live || container.healthCheckRunning) return;
    container.healthCheckRunning = true;
    const timeoutMs = Math.min(5_000, this.host.config.healthIntervalMs);
    void container.client
      .health({ timeoutMs })
      .then(
        () => undefined,
        (err: unknown) => {
          if (container.live) this.giveUp(container, `another container of its node ${node} was lost, and it did not answer /health either (${errorMessage(err)})`);
        },
      )
      .finally(() => {
        container.healthCheckRunning = false;
      });
  }

  /** The periodic round: every live container, every quarantined one. */
  checkAll(): void {
    if (!this.host.isRunning()) return;
    for (const c of this.host.containers()) if (c.live) void this.check(c);
    for (const q of this.quarantined.values()) void this.probe(q);
  }

  /** The pool stops using the container; the provisioner replaces it, or it is quarantined. */
  giveUp(container: ContainerRecord, reason: string): void {
    this.host.markLost(container, reason);
    const provisioner = this.host.provisioner;
    if (provisioner.replaceContainer) {
      // Nomad stops the allocation and places a new one; if it refuses, probe it instead.
      void provisioner.replaceContainer(container.info.id, reason).catch((err: unknown) => {
        this.host.logger.warn({ container: container.info.id, err: errorMessage(err) }, "could not replace a container that failed its checks; quarantined");
        this.quarantined.set(container.info.id, { info: container.info, probing: false, healthyChecks: 0 });
      });
    } else {
      this.quarantined.set(container.info.id, { info: container.info, probing: false, healthyChecks: 0 });
    }
  }

  /** The provisioner reports the container gone for good: stop probing it. */
  forget(id: string): void {
    this.quarantined.delete(id);
  }

  private async check(container: ContainerRecord): Promise<void> {
    if (container.healthCheckRunning) return;
    container.healthCheckRunning = true;
    const config = this.host.config;
    try {
      const health = await container.client.health({ timeoutMs: Math.min(5_000, config.healthIntervalMs) });
      container.healthFailures = 0;
      if (container.live) this.host.observed?.(container, health);
    } catch (err) {
      if (!container.live || container.retiring) return;
      container.healthFailures++;
      this.host.logger.warn({ container: container.info.id, failures: container.healthFailures, err: errorMessage(err) }, "container health check failed");
      if (container.healthFailures >= config.healthFailuresBeforeLost) {
        this.giveUp(container, `its sandbox server at ${container.info.url} failed ${container.healthFailures} health checks in a row (last: ${errorMessage(err)})`);
      }
    } finally {
      container.healthCheckRunning = false;
    }
  }

  private async probe(q: Quarantined): Promise<void> {
    if (q.probing) return;
    q.probing = true;
    const client = this.host.createClient(q.info);
    try {
      const health = await client.health({ timeoutMs: Math.min(5_000, this.host.config.healthIntervalMs) });
      // Two good answers in a row, then wipe what the lost trajectories left behind.
      if (++q.healthyChecks < 2) return;
      for (let i = 0; i < health.slots; i++) {
        const res = await client.reset(`slot_${i}`);
        if (!res.success) throw new Error(`reset of slot_${i} failed: ${res.error || res.output}`);
      }
      if (this.quarantined.get(q.info.id) !== q || !this.host.isRunning()) return;
      this.quarantined.delete(q.info.id);
      this.host.logger.info({ container: q.info.id, index: q.info.index }, "container answers again; its slots were reset and it rejoins the pool");
      this.host.rejoin(q.info);
    } catch {
      q.healthyChecks = 0;
    } finally {
      q.probing = false;
      await client.close();
    }
  }
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
