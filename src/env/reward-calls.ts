import type { ToolExecutorLike } from "../executor/types.js";
import type { RewardCallExtras } from "../report/rollout-extras.js";
import { ToolContext } from "./tool-context.js";

/** How much of a reward call's arguments, output and error is kept with the trajectory (the JSONL, the report). */
export const REWARD_ARGUMENTS_KEPT = 500;
export const REWARD_OUTPUT_KEPT = 4000;

/**
 * The executor as the reward sees it (through its ToolContext), recording every call with its output and exit code: a reward that scores 0
 * can then be read, not guessed at. Outputs are cut (head and tail kept), the rest is the slot's.
 */
export function recordingExecutor(inner: ToolExecutorLike, into: RewardCallExtras[]): ToolExecutorLike {
  return new Proxy(inner, {
    get(target, prop) {
      if (prop === "execute") {
        const execute: ToolExecutorLike["execute"] = async (trajectoryId, call, options) => {
          const started = performance.now();
          const record: RewardCallExtras = { tool: call.name, arguments: cut(JSON.stringify(call.arguments ?? {}), REWARD_ARGUMENTS_KEPT), duration_ms: 0, success: false };
          into.push(record);
          try {
            const r = await target.execute(trajectoryId, call, options);
            record.success = r.success;
            record.output = cut(r.output, REWARD_OUTPUT_KEPT);
            if (r.error) record.error = cut(r.error, REWARD_OUTPUT_KEPT);
            const exit = r.metadata["exit_code"];
            if (typeof exit === "number" || exit === null) record.exit_code = exit;
            if (r.metadata["timeout"] === true) record.timed_out = true;
            return r;
          } catch (err) {
            record.error = cut(err instanceof Error ? err.message : String(err), REWARD_OUTPUT_KEPT);
            throw err;
          } finally {
            record.duration_ms = Math.round((performance.now() - started) * 10) / 10;
          }
        };
        return execute;
      }
      const v = Reflect.get(target, prop, target) as unknown;
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/** The reward's ToolContext: its own timeout, every call recorded into `calls`. */
export function rewardContext(trajectoryId: string, executor: ToolExecutorLike, timeoutS: number, minTimeoutS?: number): { ctx: ToolContext; calls: RewardCallExtras[] } {
  const calls: RewardCallExtras[] = [];
  // The env's floor applies; its ceiling bounds the model, not the reward's own commands (the author's, up to 600 s).
  return { ctx: new ToolContext(trajectoryId, recordingExecutor(executor, calls), { timeoutS, ...(minTimeoutS !== undefined ? { minTimeoutS } : {}) }), calls };
}

/** Head and tail of a long text, saying how much was cut. */
function cut(text: string, max: number): string {
  if (text.length <= max) return text;
  const half = Math.floor(max / 2);
  return `${text.slice(0, half)}\n… [${text.length - 2 * half} characters cut] …\n${text.slice(text.length - half)}`;
}
