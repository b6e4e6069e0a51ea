import { existsSync, readFileSync } from "node:fs";
import type { Logger } from "pino";
import { mayChangeOwnMounts, procCovers, unmaskProc } from "../../host/container-mounts.js";
import type { IsolationSummary } from "../../protocol/sandbox.js";
import { probeBwrap, type BwrapProbe } from "./isolation.js";
import type { LimitsInForce } from "./limits-in-force.js";
import { buildSlotFilter, filterDescription, type SlotFilter } from "./seccomp.js";

/**
 * Probes bubblewrap as a slot would run it. Inside a container whose /proc is partly covered
 * (Docker's masked paths), a root server in a mount namespace of its own uncovers /proc there
 * and probes again (see host/container-mounts.ts).
 */
export function probeSandbox(workspaceDir: string, owner: { uid: number; gid: number } | undefined, logger: Logger, seccomp: { ptrace: boolean } | false, cacheDirs: string[]): BwrapProbe {
  // Fail closed, like bubblewrap: a filter that cannot be built throws (SlotFilterError names why).
  const filter = seccomp ? buildSlotFilter({ ptrace: seccomp.ptrace, cacheDirs }) : null;
  if (!filter) logger.warn("UNFILTERED (--no-seccomp, benchmarks only): slot processes run without the seccomp filter");
  const probe = probeBwrap(workspaceDir, owner?.uid, owner?.gid, filter);
  if (probe.available || !/can't mount proc/i.test(probe.reason ?? "") || !mayChangeOwnMounts() || procCovers().length === 0) return probe;
  try {
    const uncovered = unmaskProc();
    logger.info({ uncovered }, "uncovered /proc in the server's own mount namespace (the container masks parts of it)");
  } catch (err) {
    return { ...probe, reason: `${probe.reason}; uncovering /proc failed: ${err instanceof Error ? err.message : String(err)}` };
  }
  return probeBwrap(workspaceDir, owner?.uid, owner?.gid, filter);
}

/** What every result of an unsandboxed server (--allow-unsandboxed only) says in words. */
export function unsandboxedNote(reason: string | null | undefined): string {
  return `UNSANDBOXED: this command ran on the server's own system without isolation (started with --allow-unsandboxed, development only): ${reason ?? "bubblewrap cannot be used"}`;
}

/** What the server found it can isolate with (the service's probes), summed up. */
export interface IsolationFacts {
  limits: LimitsInForce;
  bwrap: { available: boolean; reason?: string | null | undefined };
  /** The slots' seccomp filter (null: --no-seccomp, or unsandboxed). */
  filter: SlotFilter | null;
  memoryBytes: number;
  maxProcesses: number;
  /** Network on reaches the internet through the slot's own namespace (slirp4netns). */
  internet: boolean;
  internetReason?: string | undefined;
}

/** The isolation the slots get, for /health and run summaries: fields, and one line of words. */
export function isolationSummary(f: IsolationFacts): IsolationSummary {
  const l = f.limits;
  const sandboxed = f.bwrap.available;
  const network = !sandboxed ? "host_unsandboxed" : f.internet ? "slirp4netns" : "loopback_only";
  const memoryMb = Math.round(f.memoryBytes / 1048576);
  const words = [
    sandboxed ? `sandboxed (bubblewrap, ${filterDescription(f.filter)})` : `UNSANDBOXED (${f.bwrap.reason ?? "bubblewrap cannot be used"})`,
    `memory: ${l.memory === "cgroup" ? `cgroup ${memoryMb} MB per slot` : l.memory === "rlimit_as_per_process" ? `${memoryMb} MB per process (RLIMIT_AS), not per slot` : "unbounded"}`,
    `processes: ${l.pids === "cgroup" ? "cgroup" : l.pids === "rlimit_nproc_per_slot_uid" ? "RLIMIT_NPROC per slot uid" : "RLIMIT_NPROC shared by all slots"} (${f.maxProcesses})`,
    `disk: ${!sandboxed ? "unbounded" : l.disk === "workspace_and_tmp" ? `workspace + /tmp ${l.disk_mb} MB per slot` : `/tmp only (${l.disk_mb} MB), workspace unbounded`}`,
    `network on: ${network === "slirp4netns" ? "own namespace via slirp4netns" : network === "loopback_only" ? `loopback only (${f.internetReason ?? "unavailable"})` : "the server's own network"}`,
  ];
  return {
    sandboxed,
    ...(sandboxed ? {} : { unsandboxed_reason: f.bwrap.reason ?? "bubblewrap cannot be used" }),
    seccomp: sandboxed && f.filter ? "filter" : "off",
    ...(sandboxed && f.filter ? { ptrace: f.filter.ptrace } : {}),
    memory: l.memory,
    memory_mb: memoryMb,
    pids: l.pids,
    max_processes: f.maxProcesses,
    disk: sandboxed ? l.disk : "none",
    disk_mb: l.disk_mb,
    network,
    summary: words.join("; "),
  };
}

/** The one start-up error of a server that cannot sandbox: what is missing, and the fix. */
export function cannotSandboxMessage(reason: string): string {
  const root = process.getuid?.() === 0;
  const refused = /pivot_root|can't mount proc|no permissions to create new namespace|operation not permitted/i.test(reason);
  const fix = /not installed/.test(reason)
    ? "install bubblewrap (Debian: apt-get install bubblewrap)"
    : refused && root && inContainer()
      ? "in a container, run it with --cap-add SYS_ADMIN --security-opt seccomp=sandbox-image/seccomp.json (the image holds a copy at /opt/slotpool/sandbox-image/seccomp.json: Docker's default profile plus pivot_root) and --security-opt apparmor=unconfined where AppArmor is on; see sandbox-image/Dockerfile and docs/security-model.md"
      : refused
        ? "let this host create user namespaces (sysctl user.max_user_namespaces > 0 and kernel.unprivileged_userns_clone=1; Ubuntu: kernel.apparmor_restrict_unprivileged_userns=0)"
        : "make the data dir reachable by the slot uids, or let this host create namespaces (see docs/security-model.md)";
  return `cannot sandbox commands here: ${reason.trim().replace(/\.+$/, "")}. Fix: ${fix}. To run commands unsandboxed anyway (development only), start with --allow-unsandboxed`;
}

/** A Docker/containerd/Kubernetes container (where the fix is the container's options). */
function inContainer(): boolean {
  if (existsSync("/.dockerenv") || existsSync("/run/.containerenv")) return true;
  try {
    return /docker|containerd|kubepods|libpod/.test(readFileSync("/proc/1/cgroup", "utf8"));
  } catch {
    return false;
  }
}
