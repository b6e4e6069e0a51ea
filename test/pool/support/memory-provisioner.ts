/**
 * In-memory test doubles of the pool's two outside parties: a provisioner that "runs"
 * containers as plain objects, and a sandbox client whose slots hold files in maps. Pool
 * logic (packing, waiters, scaling, drain, loss, leases) is tested and benchmarked on them
 * without processes or HTTP.
 */
import { ImageUnavailableError, SandboxRequestError } from "../../../src/pool/errors.js";
import type { ResetInto } from "../../../src/pool/sandbox-client.js";
import type { ContainerGone, Provisioner, ProvisionerError, ProvisionerEvents } from "../../../src/pool/provisioner.js";
import type { RequestOptions, SandboxClientLike } from "../../../src/pool/sandbox-client.js";
import type { ContainerInfo } from "../../../src/pool/types.js";
import type {
  ArtifactArchiveResponse,
  ArtifactListResponse,
  ArtifactReadResponse,
  ExecuteRequest,
  ExecuteResponse,
  HealthResponse,
  ResetResponse,
} from "../../../src/protocol/sandbox.js";

export interface MemoryContainer {
  info: ContainerInfo;
  /** slot id → path → content */
  files: Map<string, Map<string, string>>;
  dead: boolean;
  /** Health answers fail while set (the server hangs or errors). */
  unhealthy: boolean;
  resets: number;
  /** Reset answers success: false while set. */
  failResets: boolean;
  /** Task images in its store: reference as first asked for → digest (reported by /health as `images.cached`). */
  images: Map<string, string>;
  /** Resets into an image that had to fetch it first. */
  imageFetches: number;
  /** Each slot's root: the image its last reset put it in (absent: the server's own system). */
  roots: Map<string, string>;
  /** Images the store holds at most; an image no slot's root is evicted for a new one, else store_full (default: no bound). */
  imageCapacity: number;
}

/** The memory server's task images: a reference containing "missing" is not found at its source, one containing "huge" does not fit the store. */
export function memoryImageDigest(image: string): string {
  let h = 0;
  for (const ch of image) h = (h * 31 + ch.charCodeAt(0)) >>> 0;
  return `sha256:${h.toString(16).padStart(64, "0")}`;
}

export interface MemoryProvisionerOptions {
  slots: number;
  /** Delay before a placed container is up (default 0: next macrotask). */
  upDelayMs?: number;
  /** Delay before a killed container is replaced (default 10 ms), like Nomad's reschedule. */
  replaceDelayMs?: number;
  /** Delay between a scale-down and the stopped container being gone (default 0). */
  stopDelayMs?: number;
}

export class MemoryProvisioner implements Provisioner {
  readonly kind = "memory";
  readonly scaleCalls: Array<{ count: number; reason: string }> = [];
  /** Running containers by index. */
  readonly running = new Map<number, MemoryContainer>();
  /** Every container ever made, by id (the client factory looks them up). */
  readonly all = new Map<string, MemoryContainer>();
  target = 0;
  stopped: { purge: boolean } | undefined;
  private events: ProvisionerEvents | undefined;
  private generation = 0;
  private failScales = 0;
  private readonly pending = new Set<NodeJS.Timeout>();

  constructor(private readonly options: MemoryProvisionerOptions) {}

  async start(events: ProvisionerEvents, initialCount: number): Promise<void> {
    this.events = events;
    this.target = initialCount;
    this.reconcile();
  }

  /** The next `n` scale calls fail (like Nomad answering 500). */
  failNextScales(n: number): void {
    this.failScales = n;
  }

  async setTargetCount(count: number, reason: string): Promise<void> {
    this.scaleCalls.push({ count, reason });
    if (this.failScales > 0) {
      this.failScales--;
      throw new Error("Unexpected response code: 500 (injected)");
    }
    this.target = count;
    this.reconcile();
  }

  async replaceContainer(id: string, reason: string): Promise<void> {
    const c = this.all.get(id);
    if (!c || !this.running.has(c.info.index) || this.running.get(c.info.index) !== c) return;
    this.kill(c.info.index, reason);
  }

  /** Kills the container at `index` (unexpected loss); it is replaced after replaceDelayMs. */
  kill(index: number, reason = "killed by test"): MemoryContainer {
    const c = this.running.get(index);
    if (!c) throw new Error(`no container at index ${index}`);
    c.dead = true;
    this.running.delete(index);
    this.events?.containerGone({ id: c.info.id, index, reason, expected: false });
    this.later(this.options.replaceDelayMs ?? 10, () => this.reconcile());
    return c;
  }

  problem(error: ProvisionerError): void {
    this.events?.problem(error);
  }

  async stop(options: { purge: boolean }): Promise<void> {
    this.stopped = options;
    for (const t of this.pending) clearTimeout(t);
    this.pending.clear();
    this.target = 0;
    for (const [index, c] of this.running) {
      c.dead = true;
      this.running.delete(index);
      this.events?.containerGone({ id: c.info.id, index, reason: "stopped", expected: true });
    }
  }

  private reconcile(): void {
    if (this.stopped) return;
    for (let i = 0; i < this.target; i++) {
      if (this.running.has(i)) continue;
      const info: ContainerInfo = { id: `mem-${i}-${++this.generation}`, index: i, url: `http://memory.invalid/${i}`, slots: this.options.slots };
      const c: MemoryContainer = { info, files: new Map(), dead: false, unhealthy: false, resets: 0, failResets: false, images: new Map(), imageFetches: 0, roots: new Map(), imageCapacity: Infinity };
      this.running.set(i, c);
      this.all.set(info.id, c);
      this.events?.containerStarting(info.id, i);
      this.later(this.options.upDelayMs ?? 0, () => {
        if (!c.dead) this.events?.containerUp(info);
      });
    }
    for (const [index, c] of [...this.running]) {
      if (index < this.target) continue;
      // Like Nomad: the index is free for a new container at once; the old one stops later.
      this.running.delete(index);
      const gone: ContainerGone = { id: c.info.id, index, reason: "scaled down", expected: true };
      const finish = () => {
        c.dead = true;
        this.events?.containerGone(gone);
      };
      if (this.options.stopDelayMs) this.later(this.options.stopDelayMs, finish);
      else finish();
    }
  }

  private later(ms: number, fn: () => void): void {
    const t = setTimeout(() => {
      this.pending.delete(t);
      fn();
    }, ms);
    this.pending.add(t);
  }

  /** The pool's `createClient` option for containers of this provisioner. */
  clientFactory = (info: ContainerInfo, hooks: { onConnectionFailure: (error: Error) => void }): SandboxClientLike => {
    const c = this.all.get(info.id);
    if (!c) throw new Error(`unknown memory container ${info.id}`);
    return new MemorySandboxClient(c, hooks.onConnectionFailure);
  };
}

function refused(c: MemoryContainer): SandboxRequestError {
  const cause = Object.assign(new Error("connect ECONNREFUSED"), { code: "ECONNREFUSED" });
  return new SandboxRequestError(`cannot reach sandbox ${c.info.id}: connect ECONNREFUSED`, c.info.id, undefined, { cause });
}

export class MemorySandboxClient implements SandboxClientLike {
  constructor(
    private readonly c: MemoryContainer,
    private readonly onConnectionFailure: (error: Error) => void,
  ) {}

  private alive(): void {
    if (this.c.dead) {
      const err = refused(this.c);
      this.onConnectionFailure(err);
      throw err;
    }
  }

  private slot(slotId: string): Map<string, string> {
    let m = this.c.files.get(slotId);
    if (!m) this.c.files.set(slotId, (m = new Map()));
    return m;
  }

  async health(_options?: RequestOptions): Promise<HealthResponse> {
    this.alive();
    if (this.c.unhealthy) throw new SandboxRequestError(`sandbox ${this.c.info.id} answered GET /health with 500`, this.c.info.id, 500);
    const cached = [...this.c.images].map(([reference, digest]) => ({ reference, digest, size_bytes: 1, in_use: 0 }));
    return { status: "ok", slots: this.c.info.slots, bwrap_available: false, images: { available: true, cached, used_bytes: cached.length, budget_bytes: 1 << 30 } };
  }

  async execute(req: ExecuteRequest, _options?: RequestOptions): Promise<ExecuteResponse> {
    this.alive();
    const files = this.slot(req.slot_id);
    const args = (req.args ?? {}) as Record<string, string>;
    const ok = (output: string): ExecuteResponse => ({ success: true, output, error: "", execution_id: req.execution_id ?? null, metadata: { exit_code: 0 } });
    switch (req.tool) {
      case "write_file":
        files.set(args["path"]!, args["content"]!);
        return ok("");
      case "read_file": {
        const content = files.get(args["path"]!);
        if (content === undefined) return { success: false, output: "", error: `no such file: ${args["path"]}`, execution_id: req.execution_id ?? null, metadata: { exit_code: 1 } };
        return ok(content);
      }
      case "sleep":
        await new Promise((r) => setTimeout(r, Number(args["ms"] ?? 0)));
        this.alive();
        return ok("");
      default:
        return ok(`${req.tool}: ${JSON.stringify(args)}`);
    }
  }

  async batch(reqs: ExecuteRequest[], options?: RequestOptions): Promise<ExecuteResponse[]> {
    const out: ExecuteResponse[] = [];
    for (const r of reqs) out.push(await this.execute(r, options));
    return out;
  }

  async batchStream(reqs: ExecuteRequest[], onLine: (i: number, r: ExecuteResponse) => void, options?: RequestOptions): Promise<ExecuteResponse[]> {
    const out: ExecuteResponse[] = [];
    for (const [i, r] of reqs.entries()) {
      const res = await this.execute(r, options);
      onLine(i, res);
      out.push(res);
    }
    return out;
  }

  async reset(slotId: string, options?: RequestOptions & ResetInto): Promise<ResetResponse> {
    this.alive();
    this.c.resets++;
    if (this.c.failResets) return { success: false, output: "", error: "injected reset failure" };
    const image = options?.image;
    if (image !== undefined) {
      // As the sandbox server answers (protocol/images.ts): the slot is left as it was.
      if (image.includes("missing")) throw new ImageUnavailableError(`sandbox ${this.c.info.id} could not give a slot the image ${image} (not_found): no such image`, this.c.info.id, 404, "not_found", image);
      if (image.includes("huge")) throw new ImageUnavailableError(`sandbox ${this.c.info.id} could not give a slot the image ${image} (store_full): it does not fit`, this.c.info.id, 507, "store_full", image);
    }
    const fetched = image !== undefined && !this.c.images.has(image);
    if (fetched && this.c.images.size >= this.c.imageCapacity) {
      // The least recently fetched image no other slot's root is, evicted; none: no room.
      const inUse = new Set([...this.c.roots].filter(([s]) => s !== slotId).map(([, i]) => i));
      const victim = [...this.c.images.keys()].find((i) => !inUse.has(i));
      if (victim === undefined) throw new ImageUnavailableError(`sandbox ${this.c.info.id} could not give a slot the image ${image} (store_full): every image is in use`, this.c.info.id, 507, "store_full", image);
      this.c.images.delete(victim);
    }
    this.c.files.delete(slotId);
    if (image === undefined) {
      this.c.roots.delete(slotId);
      return { success: true, output: "", error: "" };
    }
    this.c.roots.set(slotId, image);
    const digest = memoryImageDigest(image);
    if (fetched) {
      this.c.images.set(image, digest);
      this.c.imageFetches++;
    }
    const runtime = { env: ["PATH=/bin"], working_dir: "/srv", user: "", uid: 0, gid: 0, home: "/root" };
    return { success: true, output: "", error: "", image: { reference: image, digest, runtime, ...(fetched ? { fetched: { pull_ms: 5, unpack_ms: 3, pulled_bytes: 1000, layers: 1, layers_reused: 0 } } : {}) } };
  }

  async readArtifact(req: { slot_id: string; path: string }): Promise<ArtifactReadResponse> {
    this.alive();
    const content = this.slot(req.slot_id).get(req.path) ?? "";
    return { success: true, content, encoding: "text", truncated: false, bytes: content.length, file_size: content.length, path: req.path, mime: "text/plain" };
  }

  async listArtifacts(req: { slot_id: string; path?: string }): Promise<ArtifactListResponse> {
    this.alive();
    const entries = [...this.slot(req.slot_id).entries()].map(([path, content]) => ({ path, type: "file" as const, size: content.length }));
    return { success: true, entries, truncated: false, path: req.path ?? "." };
  }

  async archiveArtifacts(req: { slot_id: string; path?: string }): Promise<ArtifactArchiveResponse> {
    this.alive();
    return { success: true, content: "", encoding: "base64", format: "tar.gz", bytes: 0, entries: this.slot(req.slot_id).size, path: req.path ?? "." };
  }

  async close(): Promise<void> {}
}
