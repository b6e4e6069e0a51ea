import { chmodSync, chownSync, mkdirSync } from "node:fs";

export type SlotState = "idle" | "busy" | "resetting";

/**
 * One slot: a workspace directory, the host uid its commands run as, and a FIFO queue so
 * that calls to the slot run one at a time in arrival order (also inside one /batch).
 * Different slots have independent queues and run in parallel.
 */
export class Slot {
  readonly id: string;
  private queueTail: Promise<unknown> = Promise.resolve();
  private pending = 0;
  private resetting = false;
  /**
   * Why the slot is out of service: its last reset could not finish (the workspace may
   * still hold the previous trajectory's files). Calls are refused until a reset succeeds.
   */
  outOfService: string | undefined;
  /**
   * Reset (without a template) and used by no call since: an empty workspace on a fresh
   * disk, namespaces that ran nothing. A fork into it skips the child's reset (fork.ts).
   */
  pristine = false;
  /** Aborted by reset/shutdown: every running command of the slot watches it. */
  private abort = new AbortController();

  constructor(
    readonly index: number,
    /** Host path of the workspace; never sent to clients. */
    readonly workspaceDir: string,
    /** Host uid/gid the slot's commands run as (own uid per slot when the server is root). */
    readonly owner: { uid: number; gid: number } | undefined,
  ) {
    this.id = `slot_${index}`;
  }

  get state(): SlotState {
    if (this.resetting) return "resetting";
    return this.pending > 0 ? "busy" : "idle";
  }

  get queued(): number {
    return this.pending;
  }

  get abortSignal(): AbortSignal {
    return this.abort.signal;
  }

  /** Creates the workspace (mode 0700 for the slot's uid: other slots cannot even list it). */
  prepare(): void {
    mkdirSync(this.workspaceDir, { recursive: true, mode: 0o700 });
    chmodSync(this.workspaceDir, 0o700);
    if (this.owner) chownSync(this.workspaceDir, this.owner.uid, this.owner.gid);
  }

  /** Runs `fn` after every call enqueued before it; enqueue order = arrival order. */
  enqueue<T>(fn: () => Promise<T>): Promise<T> {
    this.pending++;
    const run = this.queueTail.then(fn, fn);
    this.queueTail = run.then(
      () => undefined,
      () => undefined,
    );
    return run.finally(() => {
      this.pending--;
    });
  }

  /**
   * Kills whatever runs now (the running call ends with its partial output). `why` becomes
   * the signal's reason, so the call's answer can say whether a reset or the server's
   * shutdown cut it off (its infra marker, protocol/infra.ts).
   */
  killRunning(why: "reset" | "shutdown" = "reset"): void {
    this.abort.abort(why);
    this.abort = new AbortController();
  }

  async withResetting<T>(fn: () => Promise<T>): Promise<T> {
    this.resetting = true;
    try {
      return await fn();
    } finally {
      this.resetting = false;
    }
  }
}
