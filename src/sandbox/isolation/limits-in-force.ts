import type { CommandLimits } from "./limits.js";

/**
 * Which per-slot bounds this server actually applies, said plainly in `/health`, the
 * listening line and the README's "Supported set-ups": they differ by how the server runs.
 *  - root with writable cgroups: distinct slot uids, memory + pids cgroups, CPU weight;
 *  - root without cgroups: distinct slot uids (RLIMIT_NPROC per slot), RLIMIT_AS per process;
 *  - non-root: every slot runs as the server's own uid, no cgroups (no delegation): memory
 *    is RLIMIT_AS per process, and RLIMIT_NPROC counts the processes of every slot together
 *    (and the user's others), so a fork bomb in one slot can make forks fail in the others.
 */
export interface LimitsInForce {
  /** Slots run as distinct host uids (base + i). */
  per_slot_uids: boolean;
  /** Memory bound: the slot's cgroup, each process's RLIMIT_AS, or none. */
  memory: "cgroup" | "rlimit_as_per_process" | "none";
  /** Process-count bound: the slot's pids cgroup, RLIMIT_NPROC of the slot's own uid, or of the uid all slots share. */
  pids: "cgroup" | "rlimit_nproc_per_slot_uid" | "rlimit_nproc_shared_uid";
  /** Equal CPU weight per slot (cgroup), or none (the kernel's per-process scheduling only). */
  cpu_weight: "cgroup" | "none";
  /** rlimits set on every command. */
  rlimits: string[];
  /** Disk: the slot's whole writable storage on one tmpfs of `disk_mb`, or only its /tmp and /var/tmp. */
  disk: "workspace_and_tmp" | "tmp_only";
  disk_mb: number;
  /** What is not bounded per slot here, in words. */
  gaps: string[];
}

export function limitsInForce(opts: { perSlotUids: boolean; cgroups: "v1" | "v2" | "none"; addressSpaceBytes: number; limits: CommandLimits; uid: number; disk: { mode: "tmpfs" | "tmp-only"; bytes: number; reason?: string } }): LimitsInForce {
  const cg = opts.cgroups !== "none";
  const gaps: string[] = [];
  if (!opts.perSlotUids) {
    gaps.push(
      `every slot runs as the server's uid ${opts.uid}: RLIMIT_NPROC (${opts.limits.maxProcesses}) counts all slots' processes together${cg ? "" : ", so a fork bomb in one slot can make forks fail in the others"} (run as root for one uid per slot)`,
    );
  }
  if (!cg) {
    gaps.push(
      opts.addressSpaceBytes > 0
        ? `no per-slot memory cgroup: each process is capped at ${Math.round(opts.addressSpaceBytes / 1048576)} MB of address space, a slot's processes together are not`
        : "no per-slot memory bound (no cgroup, RLIMIT_AS off)",
    );
    gaps.push("no per-slot CPU weight (no cgroup)");
  }
  const diskMb = Math.round(opts.disk.bytes / 1048576);
  if (opts.disk.mode === "tmpfs" && cg && opts.disk.bytes >= opts.limits.memoryBytes) {
    gaps.push(`a slot's disk (${diskMb} MB of tmpfs) is not below its memory bound (${Math.round(opts.limits.memoryBytes / 1048576)} MB) and its pages count as the slot's memory: a slot that fills it meets the OOM killer, not a write error (lower --disk-mb)`);
  }
  if (opts.disk.mode !== "tmpfs") {
    gaps.push(`a slot's workspace disk use (only its /tmp and /var/tmp are bounded, at ${diskMb} MB each): ${opts.disk.reason ?? "the workspace is not bounded"}`);
  }
  return {
    per_slot_uids: opts.perSlotUids,
    memory: cg ? "cgroup" : opts.addressSpaceBytes > 0 ? "rlimit_as_per_process" : "none",
    pids: cg ? "cgroup" : opts.perSlotUids ? "rlimit_nproc_per_slot_uid" : "rlimit_nproc_shared_uid",
    cpu_weight: cg ? "cgroup" : "none",
    disk: opts.disk.mode === "tmpfs" ? "workspace_and_tmp" : "tmp_only",
    disk_mb: diskMb,
    rlimits: ["RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CPU", "RLIMIT_CORE=0", ...(opts.addressSpaceBytes > 0 ? ["RLIMIT_AS"] : [])],
    gaps,
  };
}
