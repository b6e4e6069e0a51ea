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
