/**
 * The executor's public contract (implemented in `src/executor/`), used by the env layer,
 * the agent loop and the executor HTTP service.
 */
import type { ToolCall, ToolResult } from "../protocol/tool.js";
import type { TemplateSpec } from "../pool/template-affinity.js";
import type { ArtifactArchiveResponse, ArtifactListResponse, ArtifactReadResponse } from "../protocol/sandbox.js";

export interface ExecuteOptions {
  /** Overrides the call's own timeout; clamped to [1 s, 600 s]. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

export interface ExecutorStats {
  queued: number;
  inFlight: number;
  trajectories: number;
  totals: { calls: number; errors: number; sandbox: number; external: number };
  latencyMs: { p50: number; p99: number; count: number };
}

export interface ToolExecutorLike {
  start(): Promise<void>;
  /**
   * Runs one tool call of a trajectory. Tool-level failures (unknown tool, invalid
   * arguments, timeout) come back as `success: false` results. A lost slot is the one
   * exception: the call rejects with the pool's `SlotLostError` (as does every later call of
   * the trajectory), so the caller restarts the trajectory on a new slot. Over HTTP the
   * executor service answers it as a result with `metadata.slot_lost` (docs/executor.md).
   */
  execute(trajectoryId: string, call: ToolCall, options?: ExecuteOptions): Promise<ToolResult>;
  /**
   * Gives the trajectory a slot whose workspace is a copy-on-write view of `template`
   * (built on the slot's container first if it does not hold it; containers holding it are
   * preferred). Call before the trajectory's first tool call. Throws SlotLostError when the
   * container dies meanwhile, PoolTemplateError when the build fails.
   */
  prepareWorkspace?(trajectoryId: string, template: TemplateSpec, options?: { signal?: AbortSignal }): Promise<void>;
  /**
   * Gives the trajectory its (plain) slot now rather than at its first call, so a caller
   * that must answer "no capacity" up front (an OpenEnv reset) learns it here: rejects with
   * the pool's SlotAcquireTimeoutError after the acquire timeout.
   */
  claimSlot?(trajectoryId: string): Promise<void>;
  /**
   * Forks the trajectory's slot into new trajectories `into` (ids not in use): each gets a
   * sibling slot of the same container holding a copy-on-write copy of the parent's
   * workspace as it is now (docs/fork.md). Call between turns (no call of the trajectory in
   * flight). All or nothing; throws SlotForkError (pool) or ExecutorForkError.
   */
  fork?(trajectoryId: string, into: string[], options?: { signal?: AbortSignal; timeoutMs?: number }): Promise<void>;
  /** Returns the trajectory's slot to the pool (reset by default). No-op if it holds none. */
  release(trajectoryId: string, options?: { reset?: boolean }): Promise<void>;
  /** The artifact calls answer failures as `success: false`, except a lost slot: `SlotLostError`. */
  readArtifact(trajectoryId: string, req: { path: string; encoding?: "text" | "base64"; max_bytes?: number; include_sha256?: boolean }): Promise<ArtifactReadResponse>;
  listArtifacts(trajectoryId: string, req: { path?: string; recursive?: boolean; max_entries?: number }): Promise<ArtifactListResponse>;
  archiveArtifacts(trajectoryId: string, req: { path?: string; max_bytes?: number; max_entries?: number }): Promise<ArtifactArchiveResponse>;
  stats(): ExecutorStats;
  /** Releases every held slot and stops accepting calls. */
  close(): Promise<void>;
}
