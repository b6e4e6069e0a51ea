import type { Logger } from "../observability/logger.js";

/**
 * Resolves with the first SIGTERM or SIGINT. A second signal while the server is still
 * releasing its slots means "stop now": it exits at once (130).
 */
export function firstStopSignal(logger: Logger): Promise<NodeJS.Signals> {
  return new Promise<NodeJS.Signals>((resolve) => {
    let seen = 0;
    const onSignal = (sig: NodeJS.Signals) => {
      if (++seen > 1) {
        logger.warn({ signal: sig }, "second signal: exiting without waiting for slots to be released");
        logger.flush();
        process.exit(130);
      }
      resolve(sig);
    };
    process.on("SIGTERM", onSignal);
    process.on("SIGINT", onSignal);
  });
}

/**
 * A server's life in the CLI: listen, say so, wait for the first SIGTERM/SIGINT, then run
 * `shutdown` (which releases every slot) and exit 0. A failure anywhere still runs
 * `shutdown`, so no pool is left behind, and is rethrown.
 */
export async function serveUntilStopped(s: {
  logger: Logger;
  listen: () => Promise<string>;
  listening: (url: string) => Record<string, unknown>;
  /** What the shutdown does, for the log ("ending every episode"). */
  stopping: string;
  shutdown: () => Promise<void>;
}): Promise<number> {
  try {
    const url = await s.listen();
    s.logger.info(s.listening(url), "listening");
    const signal = await firstStopSignal(s.logger);
    s.logger.info({ signal }, `shutting down: ${s.stopping}`);
    await s.shutdown();
    s.logger.info("stopped");
    return 0;
  } catch (err) {
    await s.shutdown().catch(() => undefined);
    throw err;
  } finally {
    s.logger.flush();
  }
}
