import { realpathSync, existsSync, mkdirSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Logger } from "pino";
import { CGROUP_V1_CONTROLLERS } from "../../host/container-mounts.js";

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
/** v1 controllers that set no limit (pause, CPU time): a slot does without one that cannot be made. */
const OPTIONAL_V1: ReadonlySet<string> = new Set(["freezer", "cpuacct"]);

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
    sweepStale(logger);
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
      const roots = new Set<string>();
      // freezer: pause/resume of a slot (slot-freezer.ts); cpuacct: its CPU time (E2B's metrics,
      // tools/slot-usage.ts). Neither sets a limit. One hierarchy mounted under two names (cpu,cpuacct) is used once.
      for (const ctrl of CGROUP_V1_CONTROLLERS) {
        const root = join(ROOT, ctrl);
        if (!existsSync(join(root, "cgroup.procs"))) continue;
        const real = realpathSync(root);
        if (roots.has(real)) continue;
        roots.add(real);
        const dir = join(root, name);
        try {
          mkdirSync(dir);
        } catch (err) {
          // freezer and cpuacct set no limit: without them a slot loses pause or its CPU
          // figure, never its memory and pids bounds.
          if (!OPTIONAL_V1.has(ctrl)) throw err;
          logger.warn({ controller: ctrl, err: err instanceof Error ? err.message : String(err) }, "slot cgroups go without this controller");
          continue;
        }
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
    for (const dir of this.dirsOf(index)) {
      try {
        writeFileSync(join(dir, "cgroup.procs"), String(pid));
      } catch (err) {
        this.logger.warn({ err, dir, pid }, "could not move process into slot cgroup");
      }
    }
  }

  /** The `cgroup.procs` files of slot `index` (made when missing): a process that cannot be placed from here writes its own pid (the slot's browser launcher). */
  procsFiles(index: number): string[] {
    return this.dirsOf(index).map((dir) => join(dir, "cgroup.procs"));
  }

  private dirsOf(index: number): string[] {
    if (this.mode === "none") return [];
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
    return p.dirs;
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

  /**
   * The slot's cgroup that can freeze it, if any: v1's freezer hierarchy (`freezer.state`)
   * or v2's slot cgroup (`cgroup.freeze`). Undefined before the slot's first process.
   */
  freezerDir(index: number): { dir: string; version: "v1" | "v2" } | undefined {
    const dirs = this.slots.get(index)?.dirs ?? [];
    if (this.mode === "v2") return dirs[0] && existsSync(join(dirs[0], "cgroup.freeze")) ? { dir: dirs[0], version: "v2" } : undefined;
    const dir = dirs.find((d) => d.includes("/freezer/"));
    return dir ? { dir, version: "v1" } : undefined;
  }

  /** CPU time the slot's processes used since its cgroup was made, seconds (exited ones too); undefined without a cpu cgroup. */
  cpuSeconds(index: number): number | undefined {
    const dirs = this.slots.get(index)?.dirs ?? [];
    try {
      if (this.mode === "v2") {
        const usec = /^usage_usec (\d+)$/m.exec(readFileSync(join(dirs[0] ?? "", "cpu.stat"), "utf8"))?.[1];
        return usec === undefined ? undefined : Number(usec) / 1e6;
      }
      const dir = dirs.find((d) => existsSync(join(d, "cpuacct.usage")));
      return dir ? Number(readFileSync(join(dir, "cpuacct.usage"), "utf8")) / 1e9 : undefined;
    } catch {
      return undefined;
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

  /** Kills what is left and removes our cgroups once their processes are gone. */
  async cleanup(): Promise<void> {
    for (const index of this.slots.keys()) this.killAll(index);
    const dirs = [...[...this.slots.values()].flatMap((p) => p.dirs), ...this.base];
    const deadline = Date.now() + 2_000;
    for (const d of dirs) {
      while (!tryRmdir(d) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    }
  }
}

function tryRmdir(dir: string): boolean {
  try {
    rmdirSync(dir);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "ENOENT";
  }
}

function procsEmpty(dir: string): boolean {
  try {
    return readFileSync(join(dir, "cgroup.procs"), "utf8").trim() === "";
  } catch {
    return true;
  }
}

/** Removes empty cgroups left by servers that died without cleaning up. */
function sweepStale(logger: Logger): void {
  const roots = existsSync(join(ROOT, "cgroup.controllers")) ? [ROOT] : [...new Set(CGROUP_V1_CONTROLLERS.map((c) => join(ROOT, c)).filter((r) => existsSync(r)).map((r) => realpathSync(r)))];
  let removed = 0;
  for (const root of roots) {
    let names: string[];
    try {
      names = readdirSync(root).filter((n) => /^slotpool-\d+$/.test(n));
    } catch {
      continue;
    }
    for (const name of names) {
      const pid = Number(name.slice("slotpool-".length));
      if (pid === process.pid || isAlive(pid)) continue;
      const dir = join(root, name);
      try {
        for (const child of readdirSync(dir, { withFileTypes: true })) {
          if (!child.isDirectory()) continue;
          // A slot left frozen by a dead server: its processes can only die once thawed.
          const state = join(dir, child.name, "freezer.state");
          if (existsSync(state)) writeFileSync(state, "THAWED");
          if (procsEmpty(join(dir, child.name))) tryRmdir(join(dir, child.name));
        }
        if (tryRmdir(dir)) removed++;
      } catch {
        /* not ours to touch */
      }
    }
  }
  if (removed) logger.info({ removed }, "removed cgroups left by earlier servers");
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
