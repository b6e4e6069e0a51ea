import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { HttpError } from "../../http/errors.js";
import { childrenOf } from "../run/process-barrier.js";
import type { SlotCgroups } from "./cgroups.js";

/**
 * Pause and resume of a slot: every process of the slot stops where it is (memory, open
 * files, its workspace and /tmp untouched) and goes on from there when thawed. E2B's
 * `pause()` / `connect()` (src/e2b) and the freeze between an agent's turns.
 *
 * Two mechanisms, the first the host allows:
 * - `cgroup-freezer`: the slot's freezer cgroup (v1 `freezer.state`, v2 `cgroup.freeze`),
 *   where the server can create per-slot cgroups (root, writable cgroupfs). The kernel
 *   freezes every task of the cgroup at once, including ones forked while freezing, and
 *   the processes cannot tell (no signal, no state change a parent's wait could see).
 * - `signals`: SIGSTOP of every process in the trees of the slot's process sessions (each a
 *   bubblewrap sandbox with its own pid namespace), repeated until no new process shows
 *   up, then SIGCONT of the same trees. Works as a non-root user and in a container. Its
 *   limits: a parent that waits with WUNTRACED sees its child stopped, and a process the
 *   slot stopped itself (SIGSTOP of its own) is continued by the resume too.
 */
export type FreezeMechanism = "cgroup-freezer" | "signals";

/** The slot's processes could not all be stopped in time (HTTP 500, code SLOT_FREEZE). */
export class SlotFreezeError extends HttpError {
  override name = "SlotFreezeError";
  constructor(slotId: string, why: string) {
    super(500, `${slotId} could not be paused: ${why}; it was resumed again, its processes keep running`);
  }
}

/** How long a freeze may take before it is given up (a task in uninterruptible sleep delays it). */
const FREEZE_TIMEOUT_MS = 10_000;

export interface FreezeResult {
  mechanism: FreezeMechanism;
  /** Processes stopped (signals) or in the frozen cgroup. */
  processes: number;
}

export class SlotFreezer {
  /** Slots frozen now, with the pids stopped by signal (empty for the cgroup freezer). */
  private readonly frozen = new Map<number, { mechanism: FreezeMechanism; stopped: Set<number> }>();

  constructor(
    private readonly cgroups: SlotCgroups,
    /** The pids whose process trees are the slot's (signals mechanism). */
    private readonly roots: (index: number) => number[],
  ) {}

  isFrozen(index: number): boolean {
    return this.frozen.has(index);
  }

  /** The mechanism a freeze of the slot uses now. */
  mechanism(index: number): FreezeMechanism {
    return this.cgroups.freezerDir(index) ? "cgroup-freezer" : "signals";
  }

  /** Freezes every process of the slot; resolves once all are stopped. Freezing a frozen slot is a no-op. */
  async freeze(index: number, slotId: string): Promise<FreezeResult> {
    const done = this.frozen.get(index);
    if (done) return { mechanism: done.mechanism, processes: done.mechanism === "signals" ? done.stopped.size : this.cgroups.pids(index).length };
    const cg = this.cgroups.freezerDir(index);
    if (cg) {
      this.frozen.set(index, { mechanism: "cgroup-freezer", stopped: new Set() });
      const [file, on] = cg.version === "v1" ? ["freezer.state", "FROZEN"] : ["cgroup.freeze", "1"];
      writeFileSync(join(cg.dir, file), on);
      const deadline = Date.now() + FREEZE_TIMEOUT_MS;
      // The kernel freezes asynchronously: v1 reads FREEZING until every task is frozen.
      while (!cgroupFrozen(cg.dir, cg.version)) {
        if (Date.now() > deadline) {
          await this.thaw(index);
          throw new SlotFreezeError(slotId, `its freezer cgroup did not reach frozen within ${FREEZE_TIMEOUT_MS} ms`);
        }
        await sleep(5);
      }
      return { mechanism: "cgroup-freezer", processes: this.cgroups.pids(index).length };
    }
    const stopped = new Set<number>();
    this.frozen.set(index, { mechanism: "signals", stopped });
    const deadline = Date.now() + FREEZE_TIMEOUT_MS;
    // Stop what is there; a process forked before its parent stopped shows up on the next
    // walk. Done when a walk finds nothing new and every stopped process is in state T.
    for (;;) {
      let fresh = 0;
      for (const pid of tree(this.roots(index))) {
        if (stopped.has(pid)) continue;
        if (signal(pid, "SIGSTOP")) {
          stopped.add(pid);
          fresh++;
        }
      }
      if (fresh === 0 && [...stopped].every(isStoppedOrGone)) return { mechanism: "signals", processes: stopped.size };
      if (Date.now() > deadline) {
        await this.thaw(index);
        throw new SlotFreezeError(slotId, `its processes did not all stop within ${FREEZE_TIMEOUT_MS} ms`);
      }
      await sleep(fresh > 0 ? 0 : 2);
    }
  }

  /** Thaws the slot (no-op when it is not frozen). Before any kill: a v1-frozen task cannot die until thawed. */
  async thaw(index: number): Promise<void> {
    const f = this.frozen.get(index);
    if (!f) return;
    this.frozen.delete(index);
    if (f.mechanism === "signals") {
      for (const pid of f.stopped) signal(pid, "SIGCONT");
      return;
    }
    const cg = this.cgroups.freezerDir(index);
    if (!cg) return;
    writeFileSync(join(cg.dir, cg.version === "v1" ? "freezer.state" : "cgroup.freeze"), cg.version === "v1" ? "THAWED" : "0");
  }
}

function cgroupFrozen(dir: string, version: "v1" | "v2"): boolean {
  try {
    if (version === "v1") return readFileSync(join(dir, "freezer.state"), "utf8").trim() === "FROZEN";
    return /^frozen 1$/m.test(readFileSync(join(dir, "cgroup.events"), "utf8"));
  } catch {
    return true;
  }
}

/** `roots` and all their descendants (through every thread's children list). */
function tree(roots: number[]): number[] {
  const seen = new Set<number>();
  const todo = [...roots];
  while (todo.length > 0) {
    const pid = todo.pop()!;
    if (seen.has(pid)) continue;
    seen.add(pid);
    todo.push(...childrenOf(pid));
  }
  return [...seen];
}


/** State T (stopped) or t (traced), or the process is gone / a zombie: nothing more will run. */
function isStoppedOrGone(pid: number): boolean {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return true;
  }
  const state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
  return state === "T" || state === "t" || state === "Z" || state === "X";
}

function signal(pid: number, sig: NodeJS.Signals): boolean {
  try {
    process.kill(pid, sig);
    return true;
  } catch {
    return false;
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
