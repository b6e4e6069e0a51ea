import { spawnSync } from "node:child_process";
import { SlotpoolError } from "../../protocol/errors.js";
import { compileNative, NATIVE_DIR, nativeSource, prebuiltNative } from "../native/native-build.js";

/**
 * The seccomp filter every slot process runs under (issue 28, docs/security-model.md).
 *
 * The policy is built by `native/seccomp-filter.c` with libseccomp (Docker's default profile
 * for an unprivileged process, less new namespaces, io_uring, bpf, perf_event_open,
 * userfaultfd, keyrings, kexec/modules, the mount APIs, SysV message queues, other socket
 * families, raw and MPTCP sockets, 32-bit ABIs and unknown syscalls). It is compiled to a
 * classic-BPF program once at start-up; every sandbox the server starts gets the program
 * through bubblewrap's `--seccomp FD`, which installs it just before the sandbox's first
 * exec (and in bubblewrap's own init of the PID namespace), so every process of a slot
 * inherits it and no process of a slot can remove it.
 *
 * bubblewrap reads the fd to its end: each spawn gets its own pipe (`filterArgs` +
 * `sendFilter`), the bytes come from memory.
 */

export interface SlotFilter {
  /** The compiled program (struct sock_filter[], native byte order). */
  readonly program: Buffer;
  /** Whether ptrace (strace, gdb) is allowed inside a slot. */
  readonly ptrace: boolean;
}

export interface SlotFilterOptions {
  /** Allow ptrace and process_vm_readv/writev inside slots (default true; `--no-ptrace` turns it off). */
  ptrace?: boolean;
  /** Where the helper may be compiled when no prebuilt one exists (the server's state dir). */
  cacheDirs?: string[];
}

/** Why the filter could not be built; the server refuses to start with it (fail closed). */
export class SlotFilterError extends SlotpoolError {
  override name = "SlotFilterError";
  constructor(reason: string) {
    super(
      `cannot build the slots' seccomp filter: ${reason}. Fix: install libseccomp (Debian: apt-get install libseccomp-dev) and a C compiler, ` +
        "or set SLOTPOOL_SECCOMP_FILTER to a prebuilt slotpool-seccomp-filter. For benchmarks only, --no-seccomp starts without it (/health then says unfiltered)",
      { code: "seccomp_unavailable" },
    );
  }
}

const cache = new Map<boolean, SlotFilter>();

/** The slots' filter, built once per ptrace setting; throws SlotFilterError when it cannot be. */
export function buildSlotFilter(options: SlotFilterOptions = {}): SlotFilter {
  const ptrace = options.ptrace ?? true;
  const cached = cache.get(ptrace);
  if (cached) return cached;
  const helper = filterHelper(options.cacheDirs ?? []);
  const res = spawnSync(helper, ptrace ? [] : ["--no-ptrace"], { timeout: 30_000, maxBuffer: 1 << 20 });
  if (res.status !== 0) throw new SlotFilterError(`${helper} failed: ${(res.stderr?.toString() || res.error?.message || `exit ${res.status}`).trim()}`);
  const program = res.stdout;
  // struct sock_filter is 8 bytes; an empty program would allow everything.
  if (program.length === 0 || program.length % 8 !== 0) throw new SlotFilterError(`${helper} wrote ${program.length} bytes, not a BPF program`);
  const filter: SlotFilter = { program, ptrace };
  cache.set(ptrace, filter);
  return filter;
}

/** The syscall names the filter allows on this machine (for tests and docs). */
export function allowedSyscalls(cacheDirs: string[] = []): string[] {
  const res = spawnSync(filterHelper(cacheDirs), ["--list"], { encoding: "utf8", timeout: 30_000 });
  if (res.status !== 0) throw new SlotFilterError(res.stderr || `exit ${res.status}`);
  return res.stdout.split("\n").filter((l) => l !== "");
}

/** The helper binary: SLOTPOOL_SECCOMP_FILTER, the image's prebuilt one, or compiled from source. */
function filterHelper(cacheDirs: string[]): string {
  const explicit = process.env["SLOTPOOL_SECCOMP_FILTER"];
  if (explicit) return explicit;
  const src = nativeSource("seccomp-filter.c");
  if (!src) return prebuiltNative("slotpool-seccomp-filter");
  const built = compileNative("slotpool-seccomp-filter", src, [NATIVE_DIR, ...cacheDirs], 0o755, ["-lseccomp"]);
  if ("error" in built) throw new SlotFilterError(built.error);
  return built.path;
}

/** bubblewrap arguments that load the filter from `fd` (none when the server runs unfiltered). */
export function filterArgs(filter: SlotFilter | null | undefined, fd: number): string[] {
  return filter ? ["--seccomp", String(fd)] : [];
}

/** Writes the program into the child's pipe for `--seccomp` and closes it (bubblewrap reads to EOF). */
export function sendFilter(pipe: NodeJS.WritableStream | null | undefined, filter: SlotFilter | null | undefined): void {
  if (!filter || !pipe) return;
  pipe.on("error", () => undefined);
  pipe.end(filter.program);
}

/** How /health and the start-up line name the filter in force. */
export function filterDescription(filter: SlotFilter | null | undefined): string {
  return filter ? `seccomp filter (ptrace ${filter.ptrace ? "on" : "off"})` : "UNFILTERED syscalls (--no-seccomp)";
}
