/**
 * Per-command resource limits. Applied as hard rlimits by the shell that runs the command
 * (so the command cannot raise them), plus cgroups where the host offers them (see
 * `cgroups.ts`). Each slot runs under its own host uid when the server is root, so
 * RLIMIT_NPROC (counted per uid) is effectively a per-slot process cap.
 */
export interface CommandLimits {
  /** Default wall-clock timeout, seconds (a call may ask for another, up to maxTimeoutS). */
  defaultTimeoutS: number;
  maxTimeoutS: number;
  /** Max processes/threads of the slot's uid (RLIMIT_NPROC). */
  maxProcesses: number;
  /** Max size of one written file, bytes (RLIMIT_FSIZE). */
  maxFileBytes: number;
  /** CPU seconds per command (RLIMIT_CPU). */
  cpuSeconds: number;
  /** Memory per slot, bytes (cgroup memory limit; RLIMIT_AS when cgroups are unavailable and this is set). */
  memoryBytes: number;
  /**
   * Cap each process's address space (RLIMIT_AS) at memoryBytes when there is no slot
   * cgroup (non-root, or no writable cgroupfs): the only memory bound then. On by default;
   * runtimes that reserve large virtual ranges (Go, JVM) may need a larger --memory-mb
   * (node 20, python3, gcc and git run under 1 GB).
   */
  addressSpaceLimit: boolean;
  /** Characters of output returned per call (head + tail). */
  outputCap: number;
}

export const DEFAULT_LIMITS: CommandLimits = {
  defaultTimeoutS: 30,
  maxTimeoutS: 3600,
  maxProcesses: 256,
  maxFileBytes: 1024 * 1024 * 1024,
  cpuSeconds: 600,
  memoryBytes: 1024 * 1024 * 1024,
  addressSpaceLimit: true,
  outputCap: 50_000,
};

/** Shell prologue that sets the hard limits before the command runs. */
export function ulimitPrologue(limits: CommandLimits, timeoutS: number): string {
  const cpu = Math.max(1, Math.min(limits.cpuSeconds, Math.ceil(timeoutS) + 1));
  const fsizeBlocks = Math.max(1, Math.floor(limits.maxFileBytes / 1024));
  return `ulimit -H -S -u ${limits.maxProcesses} -f ${fsizeBlocks} -t ${cpu} -c 0 2>/dev/null\n`;
}
