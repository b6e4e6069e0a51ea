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
  /**
   * Which reset of the slot this is: bumped when a reset begins and when a fork replaces the
   * slot's contents. A call that names the generation its trajectory got (the pool sends it)
   * runs only in that generation: after a reset from outside it is refused as an infra
   * failure (`command_killed`) instead of running on an emptied workspace (protocol/infra.ts).
   */
  generation = 0;
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

  /**
   * Why a call made for `generation` must not run now (the slot was reset or forked into
   * since), or undefined when it may (or names no generation).
   */
  staleFor(generation: number | undefined): string | undefined {
    if (generation === undefined || generation === this.generation) return undefined;
    return `${this.id} was reset from outside since this call's trajectory got it (generation ${this.generation}, the call's ${generation}); the call did not run`;
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
