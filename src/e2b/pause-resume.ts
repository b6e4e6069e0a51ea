import type { Logger } from "../observability/logger.js";
import type { SlotProcesses } from "./slot-processes.js";

/** What a pause or resume reads and changes of a sandbox (the registry's E2bSandbox). */
export interface PausableSandbox {
  readonly id: string;
  readonly processes: Pick<SlotProcesses, "freeze" | "thaw" | "killAll">;
  state: "running" | "paused";
  endAt: Date;
  timer: NodeJS.Timeout | undefined;
}

/**
 * E2B's pause and resume of one sandbox, as the registry calls them (one at a time per
 * sandbox, see `SandboxRegistry.serial`). A pause freezes every process of the sandbox's
 * slot on its sandbox server (the slot's freezer cgroup, or SIGSTOP of its process trees:
 * sandbox/isolation/slot-freezer.ts): its workspace, /tmp and processes stay exactly as
 * they were, in memory (no snapshot to disk). A filesystem-only pause (E2B's
 * `keepMemory: false`) ends the processes instead and keeps the files. While paused the
 * sandbox's timeout does not run; a resume sets a new one from now, as E2B's does.
 */
export class PauseResume<S extends PausableSandbox> {
  constructor(
    private readonly logger: Logger,
    /** (Re)starts the sandbox's timeout from its `endAt`. */
    private readonly arm: (s: S) => void,
  ) {}

  async pause(s: S, keepMemory: boolean): Promise<void> {
    clearTimeout(s.timer);
    // Paused before the freeze: API requests arriving meanwhile are refused, not started in a freezing slot.
    s.state = "paused";
    try {
      if (keepMemory) {
        const r = await s.processes.freeze();
        this.logger.info({ sandbox: s.id, mechanism: r.mechanism, processes: r.processes }, "sandbox paused");
      } else {
        await s.processes.killAll();
        this.logger.info({ sandbox: s.id }, "sandbox paused, filesystem only: its processes ended");
      }
    } catch (err) {
      s.state = "running";
      this.arm(s);
      throw err;
    }
  }

  async resume(s: S, timeoutS: number): Promise<void> {
    await s.processes.thaw();
    s.state = "running";
    s.endAt = new Date(Date.now() + timeoutS * 1000);
    this.arm(s);
    this.logger.info({ sandbox: s.id, timeoutS }, "sandbox resumed");
  }
}
