import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/**
 * The kernel probe (fixtures/kernel-probe.c): compiled on this machine once, carried into a
 * slot as base64 inside a command (no host path is visible there), run there, and its lines
 * read back. Shared by the host, E2B and container suites.
 */

/** Every primitive the slots' filter refuses (the probe's names, in its order). */
export const PRIMITIVES = [
  "unshare-user", "unshare-net", "clone-newuser", "clone-newns-newpid", "clone3-newuser", "setns",
  "io_uring_setup", "bpf", "perf_event_open", "userfaultfd", "add_key", "keyctl", "request_key", "msgget",
  "socket-af_packet", "socket-inet-raw", "socket-inet6-raw", "socket-af_vsock", "socket-mptcp", "socket-mptcp-high-bits",
  "fsopen", "open_tree", "kexec_load", "init_module",
  // What a nested user namespace would hand the slot: nf_tables, packet and raw sockets, mounts.
  "userns-nftables", "userns-af_packet", "userns-inet-raw", "userns-mount-tmpfs", "userns-mount-overlay", "mount-tmpfs",
  // A syscall the kernel has and the filter does not list (libseccomp 2.5 does not know it either), and one no kernel has yet.
  "new-syscall-lsm_list_modules", "future-syscall-1023",
  ...(process.arch === "x64" ? ["int80-getpid", "x32-getpid"] : []),
] as const;

/** Primitives whose refusal must be the filter's own answer (ENOSYS), not the kernel's. */
const EXACT: Record<string, string> = { "new-syscall-lsm_list_modules": "refused ENOSYS", "future-syscall-1023": "refused ENOSYS" };

/** What must keep working under the filter. */
export const CONTROLS = ["control-socket-tcp", "control-socket-udp6", "control-socket-unix", "control-socket-netlink", "control-fork"] as const;

let compiled: string | undefined;

/** The probe binary (small and dynamically linked: the image is the same Debian as this machine). */
export function probeBinary(): string {
  if (compiled) return compiled;
  const dir = mkdtempSync(join(tmpdir(), "slotpool-kernel-probe-"));
  const out = join(dir, "kernel-probe");
  const src = fileURLToPath(new URL("./fixtures/kernel-probe.c", import.meta.url));
  const res = spawnSync("cc", ["-Os", "-s", "-Wall", "-o", out, src], { encoding: "utf8" });
  if (res.status !== 0) throw new Error(`compiling the kernel probe failed: ${res.stderr || res.error?.message}`);
  compiled = out;
  return out;
}

/** A shell command that writes the probe to `path` in the slot (as base64, < 32 KB) and runs it. */
export function probeCommand(path = "/workspace/kernel-probe"): string {
  const b64 = readFileSync(probeBinary()).toString("base64");
  return `printf %s '${b64}' | base64 -d > ${path} && chmod +x ${path} && ${path}`;
}

export interface ProbeResult {
  seccompMode: number | undefined;
  /** primitive → "refused EPERM" / "ALLOWED" / "allowed" (controls). */
  lines: Map<string, string>;
}

export function parseProbe(output: string): ProbeResult {
  const lines = new Map<string, string>();
  let seccompMode: number | undefined;
  for (const l of output.split("\n")) {
    const m = /^(\S+) (.+)$/.exec(l.trim());
    if (!m) continue;
    if (m[1] === "seccomp-mode") seccompMode = Number(m[2]);
    else lines.set(m[1]!, m[2]!);
  }
  return { seccompMode, lines };
}

/** Primitives the probe did not see refused (empty: all refused), and controls that failed. */
export function probeProblems(r: ProbeResult): string[] {
  const problems: string[] = [];
  if (r.seccompMode !== 2) problems.push(`Seccomp mode ${r.seccompMode} (2 = filter)`);
  for (const p of PRIMITIVES) {
    const v = r.lines.get(p);
    if (!v?.startsWith("refused") || (EXACT[p] !== undefined && v !== EXACT[p])) problems.push(`${p}: ${v ?? "no line"}`);
  }
  for (const c of CONTROLS) {
    const v = r.lines.get(c);
    if (v !== "allowed") problems.push(`${c}: ${v ?? "no line"}`);
  }
  return problems;
}
