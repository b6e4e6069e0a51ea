/**
 * Keeps new placements off a node that lost the pool's containers (issue 29: a dead node is
 * one failure domain). Nomad itself never places on a node it knows is down or draining; this
 * covers the seconds before it knows, when the pool has seen the node's containers go (a
 * crash of its servers, a silent node the health checks gave up on) and Nomad would place the
 * replacements right back there.
 *
 * A node is avoided once the pool lost a container on it and has no live container left on
 * it (a node whose other containers still answer their checks serves, and is only served
 * last: slot-pool.ts), and only while some other node the pool knows keeps a live container:
 * avoiding every node would place nothing at all (a one-node cluster, a dev agent). The
 * avoidance lasts `windowMs` after the node's last loss, then the node is eligible again.
 */
import type { Logger } from "pino";
import type { Provisioner } from "./provisioner.js";

export interface NodeAvoidanceHost {
  readonly provisioner: Pick<Provisioner, "avoidNodes">;
  readonly logger: Logger;
  /** Nodes of the pool's live (ready or being checked) containers, one entry per container. */
  liveNodes(): Iterable<string>;
}

export class NodeAvoidance {
  /** Nodes that lost a container lately, and until when (performance.now()). */
  private readonly lost = new Map<string, number>();
  private avoided: string[] = [];
  private applying: Promise<void> = Promise.resolve();
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;

  constructor(
    private readonly host: NodeAvoidanceHost,
    private readonly windowMs: number,
  ) {}

  /** The nodes currently kept out of placements. */
  get nodes(): readonly string[] {
    return this.avoided;
  }

  /** A container of `node` was lost (after the pool detached it). */
  containerLost(node: string): void {
    if (this.stopped || !this.host.provisioner.avoidNodes) return;
    this.lost.set(node, performance.now() + this.windowMs);
    this.update();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  private update(): void {
    const now = performance.now();
    for (const [node, until] of this.lost) if (until <= now) this.lost.delete(node);
    const live = new Map<string, number>();
    for (const node of this.host.liveNodes()) live.set(node, (live.get(node) ?? 0) + 1);
    const keep = this.avoided.filter((n) => this.lost.has(n));
    const candidates = [...this.lost.keys()].filter((n) => !keep.includes(n) && !live.has(n));
    const next = [...keep];
    for (const node of candidates) {
      // Some other node must keep serving: else the avoidance would place nothing anywhere.
      const elsewhere = [...live.keys()].some((n) => n !== node && !next.includes(n));
      if (elsewhere) next.push(node);
    }
    next.sort();
    this.schedule();
    if (next.join(",") === this.avoided.join(",")) return;
    this.avoided = next;
    const nodes = [...next];
    this.host.logger.warn({ nodes }, nodes.length ? "placements kept off nodes that lost the pool's containers" : "no node kept off placements any more");
    // One change at a time, in order: the last one applied is the current set.
    this.applying = this.applying.then(async () => {
      if (this.stopped) return;
      try {
        await this.host.provisioner.avoidNodes!(nodes);
      } catch (err) {
        this.host.logger.warn({ nodes, err: err instanceof Error ? err.message : String(err) }, "could not keep placements off the nodes (Nomad's own rescheduling still applies)");
      }
    });
  }

  /** Wakes up when the earliest suspicion ends, to let its node back in. */
  private schedule(): void {
    clearTimeout(this.timer);
    if (this.stopped || this.lost.size === 0) return;
    const next = Math.min(...this.lost.values());
    this.timer = setTimeout(() => this.update(), Math.max(0, next - performance.now()) + 10);
    this.timer.unref();
  }

  /** Settles once the changes asked for so far were made (tests, shutdown). */
  settled(): Promise<void> {
    return this.applying;
  }
}
