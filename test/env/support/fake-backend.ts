/**
 * An in-memory tools backend for env-layer unit tests: `bash` answers `echo X` with X and
 * remembers files written with `printf '%s' 'X' > F` per trajectory; no processes.
 */
import type { ExecuteOptions, ExecutorStats, ToolExecutorLike } from "../../../src/executor/types.js";
import type { ToolCall, ToolResult } from "../../../src/protocol/tool.js";
import type { ToolBackend } from "../../../src/env/backend.js";
import { ToolRegistry } from "../../../src/tools/registry.js";
import { SlotLostError } from "../../../src/pool/errors.js";

export class FakeExecutor implements ToolExecutorLike {
  readonly files = new Map<string, Map<string, string>>();
  readonly released: string[] = [];
  readonly calls: Array<{ trajectoryId: string; call: ToolCall; timeoutMs?: number }> = [];
  /** Trajectory ids whose next call fails with SlotLostError, as the ToolExecutor does (once each). */
  readonly loseNext = new Set<string>();
  loseAllCalls = false;

  async start(): Promise<void> {}
  async execute(trajectoryId: string, call: ToolCall, options?: ExecuteOptions): Promise<ToolResult> {
    options?.signal?.throwIfAborted();
    this.calls.push({ trajectoryId, call, ...(options?.timeoutMs !== undefined ? { timeoutMs: options.timeoutMs } : {}) });
    if (this.loseAllCalls || this.loseNext.delete(trajectoryId)) {
      throw new SlotLostError("slot_0", "alloc-1", "killed", trajectoryId);
    }
    const fs = this.files.get(trajectoryId) ?? new Map<string, string>();
    this.files.set(trajectoryId, fs);
    const cmd = String(call.arguments?.["command"] ?? "");
    const write = /^printf '%s' '([^']*)' > (\S+)$/.exec(cmd);
    if (write) {
      fs.set(write[2]!, write[1]!);
      return { success: true, output: "", error: "", metadata: { exit_code: 0 }, uniq_id: null };
    }
    const cat = /^cat (\S+)$/.exec(cmd);
    if (cat) {
      const c = fs.get(cat[1]!);
      return c === undefined
        ? { success: false, output: "", error: `cat: ${cat[1]}: No such file`, metadata: { exit_code: 1 }, uniq_id: null }
        : { success: true, output: c, error: "", metadata: { exit_code: 0 }, uniq_id: null };
    }
    if (call.name === "read_file") {
      return { success: true, output: "seeded\n", error: "", metadata: {}, uniq_id: null };
    }
    return { success: true, output: cmd.replace(/^echo /, "") + "\n", error: "", metadata: { exit_code: 0 }, uniq_id: null };
  }
  async release(trajectoryId: string): Promise<void> {
    this.released.push(trajectoryId);
    this.files.delete(trajectoryId);
  }
  async readArtifact(): Promise<never> {
    throw new Error("not used");
  }
  async listArtifacts(): Promise<never> {
    throw new Error("not used");
  }
  async archiveArtifacts(): Promise<never> {
    throw new Error("not used");
  }
  stats(): ExecutorStats {
    return { queued: 0, inFlight: 0, trajectories: 0, totals: { calls: this.calls.length, errors: 0, sandbox: this.calls.length, external: 0 }, latencyMs: { p50: 0, p99: 0, count: 0 } };
  }
  async close(): Promise<void> {}
}

export function fakeBackend(): ToolBackend & { executor: FakeExecutor } {
  const executor = new FakeExecutor();
  return { executor, registry: ToolRegistry.withBuiltins(), close: async () => {} };
}
