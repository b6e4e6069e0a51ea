/**
 * The pool's public contract, shared by the executor and the env layer. Implemented in
 * `pool/slot-pool.ts`; provisioners implement `Provisioner`.
 */
import type {
  ArtifactArchiveResponse,
  ArtifactListResponse,
  ArtifactReadResponse,
  ExecuteResponse,
  ResetResponse,
} from "../protocol/sandbox.js";

/** One call as the pool sends it to a slot: the execute body without `slot_id`. */
export interface SlotCall {
  tool: string;
  args: Record<string, unknown>;
  execution_id?: string | null;
  /** Seconds, as on the wire. */
  timeout?: number;
}

export interface CallOptions {
  signal?: AbortSignal;
  /** Client-side bound on the HTTP call, in ms (defaults to the call's timeout plus a margin). */
  timeoutMs?: number;
}

/** A container as the pool sees it: one sandbox server hosting `slots` slots. */
export interface ContainerInfo {
  /** Stable id: Nomad allocation ID, or the local process's generated id. */
  id: string;
  /** Nomad's `<job>.sandbox[N]` name index (local: the same numbering). Lowest first when packing. */
  index: number;
  /** Base URL of its sandbox server, e.g. http://127.0.0.1:23456 */
  url: string;
  token?: string;
  slots: number;
  /**
   * The node it runs on (Nomad: the allocation's NodeID; local: absent, one machine). A node is
   * one failure domain: a loss there makes the pool check the node's other containers at once.
   */
  node?: string;
}

/** A slot held by one trajectory. Every method raises SlotLostError once the slot is lost. */
export interface LeasedSlot {
  /** Unique across the pool: `${container.id}/${slotId}`. */
  readonly key: string;
  /** The slot's id on its container (`slot_0` …). */
  readonly slotId: string;
  readonly container: ContainerInfo;
  readonly trajectoryId: string;
  readonly lost: boolean;
  execute(call: SlotCall, options?: CallOptions): Promise<ExecuteResponse>;
  /** Calls of this slot, run in order on the server; results delivered one by one as they finish. */
  executeBatch(calls: SlotCall[], onResult?: (index: number, result: ExecuteResponse) => void, options?: CallOptions): Promise<ExecuteResponse[]>;
  /**
   * With `template`: the workspace becomes a copy-on-write view of that template (built on the
   * container); with `image`: the slot's root becomes that task image (ImageUnavailableError
   * when the container cannot get it).
   */
  reset(options?: CallOptions & { template?: string; image?: string }): Promise<ResetResponse>;
  readArtifact(req: { path: string; encoding?: "text" | "base64"; max_bytes?: number; include_sha256?: boolean }, options?: CallOptions): Promise<ArtifactReadResponse>;
  listArtifacts(req: { path?: string; recursive?: boolean; max_entries?: number }, options?: CallOptions): Promise<ArtifactListResponse>;
  archiveArtifacts(req: { path?: string; max_bytes?: number; max_entries?: number }, options?: CallOptions): Promise<ArtifactArchiveResponse>;
  /** Marks the slot used now (lease keep-alive); execute() does this itself. */
  touch(): void;
  /**
   * Forks this slot into `n` sibling slots of the same container (docs/fork.md): holds n free
   * slots there (waiting up to `timeoutMs` for them), makes each a copy-on-write copy of this
   * slot's workspace as it is now, and hands them back as leases of their own (release each
   * as usual). All or nothing: on failure no child lease is held and this slot is unchanged.
   * Raises SlotForkError. Optional: a pool that cannot fork leaves it out.
   */
  fork?(n: number, options?: ForkOptions): Promise<LeasedSlot[]>;
}

/** A lease of a pool that can fork (SlotPool's): `fork` is always there, no `!` needed. */
export interface ForkableSlot extends LeasedSlot {
  fork(n: number, options?: ForkOptions): Promise<ForkableSlot[]>;
}

export interface ForkOptions extends CallOptions {
  /** The children's trajectory ids (default `<this trajectory>/fork-<i>`); n of them if given. */
  trajectoryIds?: string[];
}

export interface AcquireOptions {
  trajectoryId: string;
  /** Prefer a container that already holds this workspace template (affinity). */
  template?: string;
  /**
   * Prefer a container that already holds this task image (image routing, after `template`);
   * else any container (it fetches the image at the reset). A reference that cannot name an
   * image rejects at once with ImageReferenceError.
   */
  image?: string;
  signal?: AbortSignal;
  timeoutMs?: number;
}

export interface ReleaseOptions {
  /** Reset the workspace before the slot is handed out again (default true). */
  reset?: boolean;
}

export interface PoolStats {
  containers: { starting: number; ready: number; draining: number; lost: number; total: number };
  slots: { total: number; free: number; held: number; lost: number };
  waiting: number;
  targetContainers: number;
  acquireLatencyMs: { p50: number; p99: number; count: number };
  scaleEvents: number;
}

export interface SlotPoolLike {
  start(): Promise<void>;
  acquire(options: AcquireOptions): Promise<LeasedSlot>;
  release(slot: LeasedSlot, options?: ReleaseOptions): Promise<void>;
  stats(): PoolStats;
  stop(options?: { purge?: boolean }): Promise<void>;
  /** Builds `spec` on the slot's container unless held there, then resets the slot into it (or into its image); SlotPool answers with the reset's answer. */
  useTemplate?(slot: LeasedSlot, spec: TemplateSpec, options?: { signal?: AbortSignal }): Promise<ResetResponse | void>;
}

/**
 * A workspace template: `files` written, then `setup` run once per container in a sandbox;
 * slots get a copy-on-write view of the result. With `image`, the slot's root is that task
 * image (docs/images.md): `files` land in the image's WorkingDir and `setup` runs in its
 * root, built once per container on the image; with neither files nor setup, the slot is
 * reset straight into the image (no build).
 */
export interface TemplateSpec {
  name: string;
  setup?: string[];
  files?: Record<string, string>;
  /** A task image reference (protocol/images.ts: registry, docker-daemon:, oci:, docker-archive:). */
  image?: string;
  /** Build time limit, seconds (the server caps it with its --max-timeout). */
  timeoutS?: number;
}
