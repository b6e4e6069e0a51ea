import type { E2bSandbox } from "./sandboxes.js";

/** Makes `count` new sandboxes from a running one (`POST /sandboxes/{id}/fork`); one entry per fork, a sandbox or why it failed. */
export interface SandboxForker {
  fork(source: E2bSandbox, count: number, timeout: number | undefined): Promise<Array<E2bSandbox | Error>>;
}
