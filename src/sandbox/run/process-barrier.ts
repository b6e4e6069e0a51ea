import { readdirSync, readFileSync } from "node:fs";

/**
 * The reset barrier: helpers that make "every process of the slot is dead" a fact the
 * server waits for, not a signal it sent. Killing a holder's bwrap only starts the
 * teardown: its namespace's init dies through PR_SET_PDEATHSIG a moment later, and the
 * kernel kills the rest of the PID namespace after that. Until then a process of the
 * previous trajectory can still write into the workspace.
 */

/** A process identified by pid and start time (a pid alone may be reused). */
export interface ProcessRef {
  pid: number;
  startTime: string;
}

/** `/proc/<pid>/stat` split after the command name (which may hold spaces and parentheses). */
function statFields(pid: number): string[] | null {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return null;
  }
  const close = stat.lastIndexOf(")");
  // Fields from 3 (state) on: index 0 = state, index 19 = starttime (field 22).
  return close < 0 ? null : stat.slice(close + 2).split(" ");
}

export function processRef(pid: number): ProcessRef | null {
  const f = statFields(pid);
  return f ? { pid, startTime: f[19] ?? "" } : null;
}

/** Whether the process still runs (a zombie has exited: it can do nothing more). */
export function isRunning(ref: ProcessRef): boolean {
  const f = statFields(ref.pid);
  if (!f || f[19] !== ref.startTime) return false;
  return f[0] !== "Z" && f[0] !== "X";
}

/** The children of every thread of `pid` (each thread has its own list); none once it is gone. */
export function childrenOf(pid: number): number[] {
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
  const out: number[] = [];
  for (const tid of tids) {
    try {
      for (const c of readFileSync(`/proc/${pid}/task/${tid}/children`, "utf8").trim().split(" ")) if (c) out.push(Number(c));
    } catch {
      /* thread or process gone */
    }
  }
  return out;
}

/** Every process below `root` (not `root` itself), parents before their children. */
export function descendants(root: number): number[] {
  const out: number[] = [];
  const seen = new Set<number>([root]);
  const queue = [root];
  while (queue.length > 0) {
    for (const child of childrenOf(queue.shift()!)) {
      if (seen.has(child)) continue;
      seen.add(child);
      out.push(child);
      queue.push(child);
    }
  }
  return out;
}

/**
 * Stops `pid` (SIGSTOP) and resolves once it is stopped, gone or a zombie: from then on it
 * starts no child, so the children read afterwards are all it will ever have. (A signal is
 * only queued by kill(2): a process in the middle of clone(2) finishes it first.) Gives up
 * after `timeoutMs` (the caller kills it anyway).
 */
export async function stopProcess(pid: number, timeoutMs = 2_000): Promise<void> {
  try {
    process.kill(pid, "SIGSTOP");
  } catch {
    return; // gone
  }
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const state = statFields(pid)?.[0];
    if (state === undefined || state === "T" || state === "t" || state === "Z" || state === "X") return;
    if (performance.now() > deadline) return;
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** The first child of `pid` (bwrap's child: the init of the sandbox's PID namespace). */
export function firstChild(pid: number): ProcessRef | null {
  try {
    const kids = readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(" ").filter(Boolean);
    return kids[0] ? processRef(Number(kids[0])) : null;
  } catch {
    return null;
  }
}

/**
 * Kills the init of a PID namespace and resolves once it has exited. The kernel kills
 * every other process of the namespace and waits for them before init itself exits, so
 * when this resolves no process of the namespace runs any more.
 */
export async function killNamespaceInit(init: ProcessRef, timeoutMs = 10_000): Promise<void> {
  if (isRunning(init)) {
    try {
      process.kill(init.pid, "SIGKILL");
    } catch {
      /* exited meanwhile */
    }
  }
  const deadline = performance.now() + timeoutMs;
  while (isRunning(init)) {
    if (performance.now() > deadline) throw new Error(`process ${init.pid} (a slot's PID namespace) did not exit within ${timeoutMs} ms of SIGKILL`);
    await new Promise((r) => setTimeout(r, 1));
  }
}

/** Running processes whose real uid is `uid`, or in [uid, uid + count) with `count`. */
export function processesOfUid(uid: number, count = 1): number[] {
  const pids: number[] = [];
  for (const name of readdirSync("/proc")) {
    const c = name.charCodeAt(0);
    if (c < 48 || c > 57) continue;
    let status: string;
    try {
      status = readFileSync(`/proc/${name}/status`, "utf8");
    } catch {
      continue;
    }
    const u = Number(/\nUid:\s+(\d+)/.exec(status)?.[1] ?? -1);
    if (u < uid || u >= uid + count) continue;
    const state = /\nState:\s+(\S)/.exec(status)?.[1];
    if (state !== "Z" && state !== "X") pids.push(Number(name));
  }
  return pids;
}
