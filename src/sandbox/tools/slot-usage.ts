import { readdirSync, readFileSync, statfsSync } from "node:fs";
import type { Slot } from "../core/slot.js";

/**
 * What a slot uses now (E2B's sandbox metrics, `POST /slots/usage`): the memory and CPU time
 * of its processes (those of its cgroup, or without cgroups the trees of its process
 * sessions), and its disk (the filesystem its workspace is on: the slot's own tmpfs where it
 * has one). CPU is cumulative seconds: a reader turns two samples into a percentage.
 */
export interface SlotUsage {
  /** Milliseconds since the epoch. */
  timestamp: number;
  cpu_seconds: number;
  mem_used: number;
  mem_total: number;
  disk_used: number;
  disk_total: number;
  processes: number;
}

const PAGE = 4096;
const TICKS = 100;

/** `cgroupCpu`: the slot's cgroup's CPU seconds (exited processes included), else the live processes' are summed. */
export function slotUsage(slot: Slot, pids: number[], memTotal: number, cgroupCpu?: number): SlotUsage {
  let cpu = 0;
  let rss = 0;
  let n = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      cpu += (Number(f[11]) + Number(f[12])) / TICKS;
      rss += Number(readFileSync(`/proc/${pid}/statm`, "utf8").split(" ")[1]) * PAGE;
      n++;
    } catch {
      /* gone */
    }
  }
  let diskUsed = 0;
  let diskTotal = 0;
  try {
    const fs = statfsSync(slot.workspaceDir);
    diskTotal = fs.blocks * fs.bsize;
    diskUsed = (fs.blocks - fs.bfree) * fs.bsize;
  } catch {
    /* no figure */
  }
  return { timestamp: Date.now(), cpu_seconds: cgroupCpu ?? cpu, mem_used: rss, mem_total: memTotal, disk_used: diskUsed, disk_total: diskTotal, processes: n };
}

/** `roots` and every descendant (through each thread's children list). */
export function processTree(roots: number[]): number[] {
  const seen = new Set<number>();
  const todo = [...roots];
  while (todo.length > 0) {
    const pid = todo.pop()!;
    if (seen.has(pid)) continue;
    seen.add(pid);
    try {
      for (const t of readdirSync(`/proc/${pid}/task`)) {
        for (const c of readFileSync(`/proc/${pid}/task/${t}/children`, "utf8").split(" ").filter(Boolean)) todo.push(Number(c));
      }
    } catch {
      /* gone */
    }
  }
  return [...seen];
}
