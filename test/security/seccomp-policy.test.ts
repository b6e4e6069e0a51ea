/**
 * What the two seccomp policies are, read from the files themselves:
 *  - the container's profile (sandbox-image/seccomp.json) is Docker's default profile
 *    (moby/profiles seccomp v0.2.3 default.json, whose raw file has sha256 536529b6…; the
 *    hash below is of its parsed JSON re-serialized) plus exactly one entry, pivot_root;
 *  - the slots' filter (src/sandbox/native/seccomp-filter.c, `--list`) allows nothing that
 *    Docker's profile does not allow a container without extra capabilities, and none of
 *    the calls issue 28 names.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { allowedSyscalls, buildSlotFilter } from "../../src/sandbox/isolation/seccomp.js";

interface Entry {
  names: string[];
  action: string;
  args?: unknown[];
  includes?: { caps?: string[]; arches?: string[]; minKernel?: string };
  excludes?: { caps?: string[]; arches?: string[] };
  comment?: string;
}
const profile = JSON.parse(readFileSync(fileURLToPath(new URL("../../sandbox-image/seccomp.json", import.meta.url)), "utf8")) as { defaultAction: string; syscalls: Entry[] };
const DOCKER_DEFAULT_SHA256 = "afb4934b023cfceaaec1a9d752ca3f801aaa96eb2e59abe6e7ea16976948e080";

describe("the container's profile", () => {
  it("is Docker's default profile, unchanged, plus pivot_root for CAP_SYS_ADMIN", () => {
    const docker = { ...profile, syscalls: profile.syscalls.slice(0, -1) };
    expect(createHash("sha256").update(JSON.stringify(docker)).digest("hex")).toBe(DOCKER_DEFAULT_SHA256);
    const added = profile.syscalls.at(-1)!;
    expect({ ...added, comment: undefined }).toEqual({ names: ["pivot_root"], action: "SCMP_ACT_ALLOW", includes: { caps: ["CAP_SYS_ADMIN"] }, comment: undefined });
    expect(profile.defaultAction).toBe("SCMP_ACT_ERRNO");
  });
});

describe("the slots' filter", () => {
  const allowed = allowedSyscalls();
  /** What Docker allows a container without added capabilities, on any arch (arg-conditional rules included). */
  const dockerUnprivileged = new Set(profile.syscalls.slice(0, -1).filter((e) => e.action === "SCMP_ACT_ALLOW" && !e.includes?.caps).flatMap((e) => e.names));

  it("allows only what Docker's default profile allows an unprivileged container", () => {
    expect(allowed.length).toBeGreaterThan(250);
    expect(allowed.filter((n) => !dockerUnprivileged.has(n))).toEqual([]);
  });

  it("allows none of the calls issue 28 names; ptrace only unless --no-ptrace", () => {
    const refused = [
      "unshare", "setns", "clone3", "io_uring_setup", "io_uring_enter", "io_uring_register", "bpf", "perf_event_open", "userfaultfd",
      "add_key", "keyctl", "request_key", "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
      "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount", "umount2", "pivot_root", "msgget", "msgsnd", "msgrcv", "msgctl",
    ];
    expect(allowed.filter((n) => refused.includes(n))).toEqual([]);
    expect(allowed).toContain("ptrace");
    // clone, socket and personality only with their arguments checked (the probe proves which).
    expect(allowed).toEqual(expect.arrayContaining(["clone", "socket", "personality"]));
  });

  it("compiles to a BPF program; --no-ptrace gives another", () => {
    const on = buildSlotFilter({ ptrace: true });
    const off = buildSlotFilter({ ptrace: false });
    expect(on.program.length % 8).toBe(0);
    expect(on.program.length).toBeGreaterThan(800);
    expect(off.program.equals(on.program)).toBe(false);
  });
});
