import type {
  ArtifactArchiveResponse,
  ArtifactListResponse,
  ArtifactReadResponse,
  ExecuteRequest,
  ExecuteResponse,
  ForkResponse,
  ResetResponse,
  TemplateBuildRequest,
  TemplateBuildResponse,
} from "../protocol/sandbox.js";
import { SandboxRequestError, SlotLostError, SlotReleasedError } from "./errors.js";
import type { SlotRecord } from "./records.js";
import { isConnectionFailure, type ResetInto } from "./sandbox-client.js";
import { imageKey } from "./image-key.js";
import type { CallOptions, ContainerInfo, ForkableSlot, ForkOptions, SlotCall } from "./types.js";

/** What a lease needs from its pool. */
export interface LeaseHost {
  /** What a call that does not set `allow_network` gets (the pool's default: loopback only unless asked). */
  readonly allowNetwork: boolean;
  /** After a call failed to connect: decides (quickly) whether the container is gone. */
  confirmContainerLoss(record: SlotRecord, error: unknown): Promise<void>;
  /** Holds n free sibling slots, forks `lease` into them, hands them out (see `SlotLease.fork`). */
  forkLease(lease: SlotLease, n: number, options: ForkOptions): Promise<SlotLease[]>;
}

export type LeaseEnd =
  | { kind: "released" }
  | { kind: "lost"; containerId: string; reason: string };

/**
 * The handle one trajectory holds for one slot, from acquire to release. A new lease is made
 * per acquire, so an old handle kept by a finished trajectory can never touch the slot's
 * next holder: once ended, every method raises (SlotLostError or SlotReleasedError).
 */
export class SlotLease implements ForkableSlot {
  readonly key: string;
  readonly slotId: string;
  readonly container: ContainerInfo;
  lastUsed: number;
  /** Calls in flight: a lease with a running call is never reclaimed. */
  inFlight = 0;
  end: LeaseEnd | undefined;
  /** Server lacks `/batch?stream=1`: fall back to `/batch`. */
  private static streamUnsupported = new WeakSet<object>();

  /**
   * The trajectory wants the server's own system (no image, no template), but the slot's root
   * is still the image a previous trajectory left it in: its first call resets it first.
   */
  private plainFirst: boolean;

  constructor(
    readonly record: SlotRecord,
    readonly trajectoryId: string,
    private readonly host: LeaseHost,
    readonly acquiredAt: number,
    plain = true,
  ) {
    this.plainFirst = plain && record.root !== undefined;
    this.key = record.key;
    this.slotId = record.slotId;
    this.container = record.container.info;
    this.lastUsed = acquiredAt;
  }

  get lost(): boolean {
    return this.end?.kind === "lost";
  }

  touch(): void {
    this.check();
    this.lastUsed = performance.now();
  }

  /**
   * A call the server refuses (400: unknown tool, invalid arguments such as a path outside the
   * workspace) resolves to an error result, as the executor's; a failed transport, a lost slot
   * or any other server error still raises.
   */
  execute(call: SlotCall, options: CallOptions = {}): Promise<ExecuteResponse> {
    return this.use(async (client) => {
      try {
        return await client.execute(this.request(call), options);
      } catch (err) {
        if (isRefusal(err)) return refusedResult(err, call);
        throw err;
      }
    });
  }

  executeBatch(
    calls: SlotCall[],
    onResult?: (index: number, result: ExecuteResponse) => void,
    options: CallOptions = {},
  ): Promise<ExecuteResponse[]> {
    return this.use(async (client) => {
      const requests = calls.map((c) => this.request(c));
      if (requests.length === 0) return [];
      // The server refuses a whole batch for one bad call, before any runs: then they run one
      // by one, in order, so each refused call gets its own error result and the others run.
      const oneByOne = async (): Promise<ExecuteResponse[]> => {
        const results: ExecuteResponse[] = [];
        for (const [i, call] of calls.entries()) {
          const r = await client.execute(requests[i]!, options).catch((e: unknown) => (isRefusal(e) ? refusedResult(e, call) : Promise.reject(e)));
          results.push(r);
          onResult?.(i, r);
        }
        return results;
      };
      if (onResult && !SlotLease.streamUnsupported.has(client)) {
        try {
          return await client.batchStream(requests, onResult, options);
        } catch (err) {
          if (isRefusal(err)) return oneByOne();
          if (!(err instanceof SandboxRequestError) || (err.status !== 404 && err.status !== 405)) throw err;
          SlotLease.streamUnsupported.add(client);
        }
      }
      let results: ExecuteResponse[];
      try {
        results = await client.batch(requests, options);
      } catch (err) {
        if (isRefusal(err)) return oneByOne();
        throw err;
      }
      if (onResult) results.forEach((r, i) => onResult(i, r));
      return results;
    });
  }

  reset(options: CallOptions & ResetInto = {}): Promise<ResetResponse> {
    this.plainFirst = false;
    return this.use(async (client) => {
      let res: ResetResponse;
      try {
        res = await client.reset(this.slotId, options);
      } catch (err) {
        // Refused (an image it could not mount, say): the server may have reset the slot before it
        // failed, and answers no generation. The reset was this lease's own: its next calls go without one.
        if (err instanceof SandboxRequestError && err.status !== undefined) this.record.generation = undefined;
        throw err;
      }
      this.record.generation = res.generation;
      this.record.root = options.image !== undefined && res.success && res.image ? { key: imageKey(options.image), image: options.image, reset: res.image } : undefined;
      this.record.fresh = res.success;
      return res;
    }, false);
  }

  /** See `LeasedSlot.fork`: n sibling leases holding copy-on-write copies of this slot's workspace. */
  fork(n: number, options: ForkOptions = {}): Promise<SlotLease[]> {
    this.check();
    return this.host.forkLease(this, n, options);
  }

  /** The server side of a fork (the pool holds the children already). */
  forkInto(children: string[], options: CallOptions = {}): Promise<ForkResponse> {
    return this.use((client) => {
      if (!client.fork) throw new SandboxRequestError(`the sandbox client of ${this.container.id} cannot fork`, this.container.id);
      return client.fork(this.slotId, children, options);
    });
  }

  /** Builds a workspace template on this slot's container (see `template-affinity.ts`). */
  buildTemplate(request: TemplateBuildRequest, options: CallOptions = {}): Promise<TemplateBuildResponse> {
    return this.use((client) => {
      if (!client.buildTemplate) throw new SandboxRequestError(`the sandbox client of ${this.container.id} cannot build templates`, this.container.id);
      return client.buildTemplate(request, options);
    });
  }

  readArtifact(
    req: { path: string; encoding?: "text" | "base64"; max_bytes?: number; include_sha256?: boolean },
    options: CallOptions = {},
  ): Promise<ArtifactReadResponse> {
    return this.use((client) => client.readArtifact({ ...req, ...this.slotRef() }, options));
  }

  listArtifacts(req: { path?: string; recursive?: boolean; max_entries?: number }, options: CallOptions = {}): Promise<ArtifactListResponse> {
    return this.use((client) => client.listArtifacts({ ...req, ...this.slotRef() }, options));
  }

  archiveArtifacts(req: { path?: string; max_bytes?: number; max_entries?: number }, options: CallOptions = {}): Promise<ArtifactArchiveResponse> {
    return this.use((client) => client.archiveArtifacts({ ...req, ...this.slotRef() }, options));
  }

  /** Raises if the lease has ended. */
  check(): void {
    const end = this.end;
    if (!end) return;
    if (end.kind === "lost") throw new SlotLostError(this.slotId, end.containerId, end.reason, this.trajectoryId);
    throw new SlotReleasedError(this.key, this.trajectoryId);
  }

  private request(call: SlotCall): ExecuteRequest {
    // Every sandbox tool takes allow_network; without it the server's own default (network on) would apply.
    const args = call.args["allow_network"] === undefined ? { ...call.args, allow_network: this.host.allowNetwork } : call.args;
    const req: ExecuteRequest = { ...this.slotRef(), tool: call.tool, args };
    if (call.execution_id !== undefined) req.execution_id = call.execution_id;
    if (call.timeout !== undefined) req.timeout = call.timeout;
    return req;
  }

  /** The slot, with the generation this lease holds when the server reports one (records.ts). */
  private slotRef(): { slot_id: string; generation?: number } {
    const generation = this.record.generation;
    return generation === undefined ? { slot_id: this.slotId } : { slot_id: this.slotId, generation };
  }

  private async use<T>(fn: (client: SlotRecord["container"]["client"]) => Promise<T>, used = true): Promise<T> {
    this.check();
    this.inFlight++;
    this.lastUsed = performance.now();
    try {
      const client = this.record.container.client;
      if (this.plainFirst) {
        // Back to the server's own system before the trajectory's first call (see `plainFirst`).
        this.plainFirst = false;
        const res = await client.reset(this.slotId);
        this.record.generation = res.generation;
        this.record.root = undefined;
        if (!res.success) throw new SandboxRequestError(`slot ${this.key} could not be reset for trajectory ${this.trajectoryId}: ${res.error || res.output}`, this.container.id);
      }
      if (used) this.record.fresh = false;
      return await fn(client);
    } catch (err) {
      // A call that failed because the container went away reports the loss, not the socket error.
      if (!this.end && err instanceof SandboxRequestError && isConnectionFailure(err)) {
        await this.host.confirmContainerLoss(this.record, err);
      }
      if (this.end?.kind === "lost") this.check();
      throw err;
    } finally {
      this.inFlight--;
      this.lastUsed = performance.now();
    }
  }
}

/** The server refused the call itself (HTTP 400), as opposed to failing to run it. */
function isRefusal(err: unknown): err is SandboxRequestError {
  return err instanceof SandboxRequestError && err.status === 400;
}

/**
 * A refused call as a result, in the executor's shape for the same refusal (success false,
 * the reason in `error`, `metadata.tool_error` naming the kind, `refused` true).
 */
function refusedResult(err: SandboxRequestError, call: SlotCall): ExecuteResponse {
  // The client's message is "sandbox <id> answered POST /execute with 400: <reason>"; the reason is what the caller can act on.
  const reason = err.message.replace(/^sandbox \S+ answered \S+ \S+ with 400: /, "");
  return {
    success: false,
    output: "",
    error: reason,
    execution_id: call.execution_id ?? null,
    metadata: { tool_error: reason.startsWith("unknown tool") ? "UnknownToolError" : "ToolArgumentsError", refused: true },
  };
}
