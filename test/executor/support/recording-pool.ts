/**
 * A pool double that records what the executor sends to slots and answers at once: for
 * checks on the exact wire arguments (policy stamping, timeout clamping) that a real
 * sandbox would not echo back.
 */
import type { CallOptions, ContainerInfo, PoolStats, LeasedSlot, SlotCall, SlotPoolLike } from "../../../src/pool/types.js";
import type { ExecuteResponse } from "../../../src/protocol/sandbox.js";

export class RecordingPool implements SlotPoolLike {
  readonly sent: SlotCall[] = [];
  readonly container: ContainerInfo = { id: "rec-0", index: 0, url: "http://127.0.0.1:9", slots: 64 };
  acquired = 0;

  async start(): Promise<void> {}
  async stop(): Promise<void> {}
  async release(): Promise<void> {}

  async acquire(options: { trajectoryId: string }): Promise<LeasedSlot> {
    const n = this.acquired++;
    const answer = (call: SlotCall): ExecuteResponse => {
      this.sent.push(call);
      return { success: true, output: `ran ${call.tool}`, error: "", execution_id: call.execution_id ?? null, metadata: { exit_code: 0 } };
    };
    const container = this.container;
    return {
      key: `${container.id}/slot_${n}`,
      slotId: `slot_${n}`,
      container,
      trajectoryId: options.trajectoryId,
      lost: false,
      touch() {},
      async execute(call: SlotCall, _o?: CallOptions) {
        return answer(call);
      },
      async executeBatch(calls: SlotCall[], onResult?: (i: number, r: ExecuteResponse) => void) {
        return calls.map((c, i) => {
          const r = answer(c);
          onResult?.(i, r);
          return r;
        });
      },
      async reset() {
        return { success: true, output: "", error: "" };
      },
      async readArtifact() {
        throw new Error("not used");
      },
      async listArtifacts() {
        throw new Error("not used");
      },
      async archiveArtifacts() {
        throw new Error("not used");
      },
    };
  }

  stats(): PoolStats {
    return {
      containers: { starting: 0, ready: 1, draining: 0, lost: 0, total: 1 },
      slots: { total: 64, free: 64 - this.acquired, held: this.acquired, lost: 0 },
      waiting: 0,
      targetContainers: 1,
      acquireLatencyMs: { p50: 0, p99: 0, count: this.acquired },
      scaleEvents: 0,
    };
  }
}
