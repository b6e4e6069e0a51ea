/**
 * The ToolExecutor's queue state: a tool call waiting or running (PendingCall) and what the
 * executor holds per trajectory (its queue, its slot, whether that slot was lost). Types only;
 * tool-executor.ts is the one place that changes them.
 */
import type { ParsedToolCall, ToolResult } from "../protocol/tool.js";
import type { LeasedSlot } from "../pool/types.js";
import type { SlotLostError } from "../pool/errors.js";
import type { ToolDefinition } from "../tools/types.js";

export interface PendingCall {
  readonly trajectoryId: string;
  readonly traj: TrajectoryState;
  readonly call: ParsedToolCall;
  readonly tool: ToolDefinition;
  readonly args: Record<string, unknown>;
  /** Isolation arguments the model tried to set (removed; logged once the call runs). */
  readonly strippedIsolationArgs: readonly string[];
  readonly timeoutS: number;
  readonly startedAt: number;
  readonly resolve: (r: ToolResult) => void;
  /** Only ever with the SlotLostError of the trajectory's slot (the one form of slot loss in-process). */
  readonly reject: (err: SlotLostError) => void;
  readonly signal?: AbortSignal;
  onAbort?: () => void;
  dispatched: boolean;
  done: boolean;
}

export interface TrajectoryState {
  readonly id: string;
  readonly queue: PendingCall[];
  running: boolean;
  slot?: LeasedSlot;
  /** The slot it held last, kept after release so late log lines still name it. */
  heldSlot?: LeasedSlot;
  acquiring?: Promise<LeasedSlot>;
  /** Set once its slot was lost: every later sandbox call fails with this error, never runs in a fresh empty slot. */
  lost?: SlotLostError;
  released: boolean;
}
