/**
 * Test double of the pool (`SlotPoolLike`) whose slots talk straight to REAL sandbox
 * servers with plain undici calls: enough to test the executor end to end while the real
 * SlotPool is written in another room. Free slots are handed out FIFO; release resets the
 * workspace. `markLost()` simulates a container dying: its slots raise SlotLostError.
 */
import { Agent, request, type Dispatcher } from "undici";
import { SandboxRequestError, SlotAcquireTimeoutError, SlotLostError } from "../../../src/pool/errors.js";
import type {
  AcquireOptions,
  CallOptions,
  ContainerInfo,
  PoolStats,
  ReleaseOptions,
  LeasedSlot,
  SlotCall,
  SlotPoolLike,
} from "../../../src/pool/types.js";
import type {
  ArtifactArchiveResponse,
  ArtifactListResponse,
  ArtifactReadResponse,
  ExecuteResponse,
  ResetResponse,
} from "../../../src/protocol/sandbox.js";

export class DirectSlotPool implements SlotPoolLike {
  readonly dispatcher: Dispatcher = new Agent({ connections: 256, keepAliveTimeout: 30_000 });
  private readonly free: DirectSlot[] = [];
  private readonly held = new Set<DirectSlot>();
  private readonly waiting: Array<{ trajectoryId: string; resolve: (s: DirectSlot) => void }> = [];
  readonly lostContainers = new Map<string, string>();
  acquires = 0;
  releases: Array<{ key: string; reset: boolean }> = [];

  constructor(readonly containers: ContainerInfo[]) {
    for (const c of containers) for (let i = 0; i < c.slots; i++) this.free.push(new DirectSlot(this, c, `slot_${i}`));
  }

  async start(): Promise<void> {}

  async acquire(options: AcquireOptions): Promise<LeasedSlot> {
    this.acquires++;
    const slot = this.free.shift();
    if (slot) return this.hold(slot, options.trajectoryId);
    const timeoutMs = options.timeoutMs ?? 30_000;
    return new Promise<LeasedSlot>((resolve, reject) => {
      const entry = { trajectoryId: options.trajectoryId, resolve: (s: DirectSlot) => resolve(this.hold(s, options.trajectoryId)) };
      this.waiting.push(entry);
      setTimeout(() => {
        const i = this.waiting.indexOf(entry);
        if (i < 0) return;
        this.waiting.splice(i, 1);
        reject(new SlotAcquireTimeoutError(timeoutMs, { slots: this.free.length + this.held.size, held: this.held.size, waiting: this.waiting.length, containers: this.containers.length, maxContainers: this.containers.length }));
      }, timeoutMs).unref();
    });
  }

  async release(slot: LeasedSlot, options: ReleaseOptions = {}): Promise<void> {
    const s = slot as DirectSlot;
    const reset = options.reset ?? true;
    this.releases.push({ key: s.key, reset });
    this.held.delete(s);
    if (this.lostContainers.has(s.container.id)) return;
    if (reset) await s.reset();
    const fresh = new DirectSlot(this, s.container, s.slotId);
    const next = this.waiting.shift();
    if (next) next.resolve(fresh);
    else this.free.push(fresh);
  }

  stats(): PoolStats {
    const total = this.free.length + this.held.size;
    return {
      containers: { starting: 0, ready: this.containers.length, draining: 0, lost: this.lostContainers.size, total: this.containers.length },
      slots: { total, free: this.free.length, held: this.held.size, lost: 0 },
      waiting: this.waiting.length,
      targetContainers: this.containers.length,
      acquireLatencyMs: { p50: 0, p99: 0, count: this.acquires },
      scaleEvents: 0,
    };
  }

  async stop(): Promise<void> {
    await this.dispatcher.close();
  }

  markLost(containerId: string, reason: string): void {
    this.lostContainers.set(containerId, reason);
  }

  heldCount(): number {
    return this.held.size;
  }

  private hold(slot: DirectSlot, trajectoryId: string): DirectSlot {
    slot.trajectoryId = trajectoryId;
    this.held.add(slot);
    return slot;
  }
}

class DirectSlot implements LeasedSlot {
  trajectoryId = "";
  constructor(
    private readonly pool: DirectSlotPool,
    readonly container: ContainerInfo,
    readonly slotId: string,
  ) {}

  get key(): string {
    return `${this.container.id}/${this.slotId}`;
  }

  get lost(): boolean {
    return this.pool.lostContainers.has(this.container.id);
  }

  touch(): void {}

  async execute(call: SlotCall, options?: CallOptions): Promise<ExecuteResponse> {
    return (await this.post("/execute", { slot_id: this.slotId, ...call }, options)) as ExecuteResponse;
  }

  async executeBatch(calls: SlotCall[], onResult?: (index: number, result: ExecuteResponse) => void, options?: CallOptions): Promise<ExecuteResponse[]> {
    this.checkLost();
    const results: ExecuteResponse[] = new Array(calls.length);
    try {
      const res = await request(`${this.container.url}/batch?stream=1`, {
        method: "POST",
        headers: this.headers(),
        body: JSON.stringify(calls.map((c) => ({ slot_id: this.slotId, ...c }))),
        dispatcher: this.pool.dispatcher,
        headersTimeout: options?.timeoutMs ?? 60_000,
        bodyTimeout: options?.timeoutMs ?? 60_000,
      });
      if (res.statusCode !== 200) throw new Error(`sandbox /batch answered HTTP ${res.statusCode}: ${await res.body.text()}`);
      let buf = "";
      for await (const chunk of res.body) {
        buf += chunk.toString();
        let nl: number;
        while ((nl = buf.indexOf("\n")) >= 0) {
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + 1);
          if (!line.trim()) continue;
          const { index, ...r } = JSON.parse(line) as ExecuteResponse & { index: number };
          results[index] = r;
          onResult?.(index, r);
        }
      }
    } catch (err) {
      this.checkLost();
      throw err;
    }
    return results;
  }

  async reset(options?: CallOptions): Promise<ResetResponse> {
    return (await this.post("/reset", { slot_id: this.slotId }, options)) as ResetResponse;
  }

  async readArtifact(req: { path: string; encoding?: "text" | "base64"; max_bytes?: number; include_sha256?: boolean }, options?: CallOptions): Promise<ArtifactReadResponse> {
    return (await this.post("/artifacts/read", { slot_id: this.slotId, ...req }, options)) as ArtifactReadResponse;
  }

  async listArtifacts(req: { path?: string; recursive?: boolean; max_entries?: number }, options?: CallOptions): Promise<ArtifactListResponse> {
    return (await this.post("/artifacts/list", { slot_id: this.slotId, ...req }, options)) as ArtifactListResponse;
  }

  async archiveArtifacts(req: { path?: string; max_bytes?: number; max_entries?: number }, options?: CallOptions): Promise<ArtifactArchiveResponse> {
    return (await this.post("/artifacts/archive", { slot_id: this.slotId, ...req }, options)) as ArtifactArchiveResponse;
  }

  private headers(): Record<string, string> {
    const h: Record<string, string> = { "content-type": "application/json" };
    if (this.container.token) h["authorization"] = `Bearer ${this.container.token}`;
    return h;
  }

  private checkLost(): void {
    const reason = this.pool.lostContainers.get(this.container.id);
    if (reason !== undefined) throw new SlotLostError(this.slotId, this.container.id, reason, this.trajectoryId);
  }

  private async post(path: string, body: unknown, options?: CallOptions): Promise<unknown> {
    this.checkLost();
    try {
      const res = await request(`${this.container.url}${path}`, {
        method: "POST",
        headers: this.headers(),
        body: JSON.stringify(body),
        dispatcher: this.pool.dispatcher,
        headersTimeout: options?.timeoutMs ?? 60_000,
        bodyTimeout: options?.timeoutMs ?? 60_000,
      });
      const text = await res.body.text();
      // As the real client does (SandboxClient): the status travels with the error.
      if (res.statusCode !== 200) throw new SandboxRequestError(`sandbox ${path} answered HTTP ${res.statusCode}: ${text}`, this.container.id, res.statusCode);
      return JSON.parse(text);
    } catch (err) {
      this.checkLost();
      throw err;
    }
  }
}
