import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";

/**
 * Per-slot cgroups, where the host lets us create them (root, writable cgroupfs):
 * memory limit, process count limit and equal CPU weight per slot, so a fork bomb, a
 * memory hog or `yes` in one slot cannot take the server down or starve the others.
 * cgroup v1 (separate hierarchies at /sys/fs/cgroup/{memory,pids,cpu}) and v2 (unified)
 * are both handled; when neither is usable the server degrades to rlimits only
 * (RLIMIT_NPROC per slot uid, RLIMIT_FSIZE, RLIMIT_CPU) and says so in /health.
 */
export interface SlotCgroupLimits {
  memoryBytes: number;
  maxProcesses: number;
}

interface Placement {
  dirs: string[];
}

const ROOT = "/sys/fs/cgroup";

export class SlotCgroups {
  readonly mode: "v1" | "v2" | "none";
  readonly reason: string | undefined;
  private readonly base: string[] = [];
  private readonly slots = new Map<number, Placement>();

  constructor(
    private readonly limits: SlotCgroupLimits,
    private readonly logger: Logger,
    disabled = false,
  ) {
    const name = `slotpool-${process.pid}`;
    if (disabled) {
      this.mode = "none";
      this.reason = "disabled";
      return;
    }
    try {
      if (existsSync(join(ROOT, "cgroup.controllers"))) {
        // v2: our own subtree under the root (or wherever writable), controllers enabled.
        const dir = join(ROOT, name);
        mkdirSync(dir);
        this.base.push(dir);
        try {
          writeFileSync(join(ROOT, "cgroup.subtree_control"), "+memory +pids +cpu");
        } catch {
          /* may already be enabled */
        }
        writeFileSync(join(dir, "cgroup.subtree_control"), "+memory +pids +cpu");
        this.mode = "v2";
        this.reason = undefined;
        return;
      }
      const made: string[] = [];
      for (const ctrl of ["memory", "pids", "cpu"]) {
        const root = join(ROOT, ctrl);
        if (!existsSync(join(root, "cgroup.procs"))) continue;
        const dir = join(root, name);
        mkdirSync(dir);
        made.push(dir);
      }
      if (made.length === 0) throw new Error("no cgroup v1 memory/pids/cpu hierarchy mounted");
      this.base.push(...made);
      this.mode = "v1";
      this.reason = undefined;
    } catch (err) {
      for (const d of this.base) tryRmdir(d);
      this.base.length = 0;
      this.mode = "none";
      this.reason = `cgroups unavailable (${err instanceof Error ? err.message : String(err)}); limits rely on rlimits only`;
    }
  }

  /** Puts `pid` (a holder's bwrap, before it forks) into slot `index`'s cgroups. */
  place(index: number, pid: number): void {
    if (this.mode === "none") return;
    let p = this.slots.get(index);
    if (!p) {
      p = { dirs: [] };
      for (const b of this.base) {
        const dir = join(b, `slot_${index}`);
        try {
          if (!existsSync(dir)) mkdirSync(dir);
          this.configure(dir);
          p.dirs.push(dir);
        } catch (err) {
          this.logger.warn({ err, dir }, "could not set up slot cgroup");
        }
      }
      this.slots.set(index, p);
    }
    for (const dir of p.dirs) {
      try {
        writeFileSync(join(dir, "cgroup.procs"), String(pid));
      } catch (err) {
        this.logger.warn({ err, dir, pid }, "could not move process into slot cgroup");
      }
    }
  }

  private configure(dir: string): void {
    const set = (file: string, value: string): void => {
      const f = join(dir, file);
      if (existsSync(f)) writeFileSync(f, value);
    };
    if (this.mode === "v2") {
      set("memory.max", String(this.limits.memoryBytes));
      set("memory.swap.max", "0");
      set("pids.max", String(this.limits.maxProcesses));
      set("cpu.weight", "100");
    } else if (dir.includes("/memory/")) {
      set("memory.limit_in_bytes", String(this.limits.memoryBytes));
      try {
        set("memory.memsw.limit_in_bytes", String(this.limits.memoryBytes));
      } catch {
        /* swap accounting off */
      }
    } else if (dir.includes("/pids/")) {
      set("pids.max", String(this.limits.maxProcesses));
    } else if (dir.includes("/cpu/")) {
      set("cpu.shares", "1024");
    }
  }

  /** Processes currently in the slot's cgroup (first hierarchy). */
  pids(index: number): number[] {
    const p = this.slots.get(index);
    const dir = p?.dirs[0];
    if (!dir) return [];
    try {
      return readFileSync(join(dir, "cgroup.procs"), "utf8")
        .split("\n")
        .filter(Boolean)
        .map(Number);
    } catch {
      return [];
    }
  }

  /** SIGKILLs every process in the slot's cgroup (reset, shutdown). */
  killAll(index: number): void {
    for (let i = 0; i < 20; i++) {
      const pids = this.pids(index);
      if (pids.length === 0) return;
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          /* gone */
        }
      }
    }
  }

  /** Removes our cgroups (after their processes are gone). */
  cleanup(): void {
    for (const p of this.slots.values()) for (const d of p.dirs) tryRmdir(d);
    for (const b of this.base) tryRmdir(b);
  }
}

function tryRmdir(dir: string): void {
  for (let i = 0; i < 5; i++) {
    try {
      rmdirSync(dir);
      return;
    } catch {
      /* busy: processes still exiting */
    }
  }
}
