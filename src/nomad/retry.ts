import type { RetryOptions } from "./config.js";

export const DEFAULT_RETRY: RetryOptions = { attempts: 4, baseMs: 100, maxMs: 2_000 };

/**
 * Delay before retry number `retry` (1-based): capped exponential backoff with full jitter,
 * so many clients retrying after the same outage do not arrive together.
 */
export function backoffDelayMs(retry: number, options: RetryOptions, random: () => number = Math.random): number {
  const ceiling = Math.min(options.maxMs, options.baseMs * 2 ** Math.max(0, retry - 1));
  return Math.floor(random() * ceiling);
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      reject(signal.reason);
      return;
    }
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
