/**
 * raw_exec without an image (local development: the host's own slotpool): where the server
 * keeps its workspaces, and the poststop task that removes them.
 */

/**
 * raw_exec without an image: workspaces outside the allocation dir, which Nomad keeps under
 * its data dir (mode 0700: out of the slot uids' reach, so the server would refuse it).
 */
export const HOST_MODE_DATA_DIR = "/tmp/slotpool-nomad/${NOMAD_ALLOC_ID}";

/**
 * raw_exec without an image: a poststop task removes the allocation's workspaces dir (HOST_MODE_DATA_DIR)
 * once the server has stopped, on the node that ran it: nothing else ever would (Nomad's GC
 * removes only its own allocation dirs). Exit 0 whatever happens: a failed cleanup must not
 * make the allocation "failed" (the pool would count it as a crash).
 */
export const CLEANUP_TASK = "workspace-cleanup";

export function hostModeCleanupTask(): { name: string; command: string; args: string[]; cpu: number; memoryMb: number } {
  return { name: CLEANUP_TASK, command: "/bin/sh", args: ["-c", 'rm -rf -- "$1"; exit 0', "workspace-cleanup", HOST_MODE_DATA_DIR], cpu: 20, memoryMb: 16 };
}

/** The poststop cleanup runs when the server's data dir is the host-mode default one. */
export function hasCleanupTask(s: { driver: string; image: string | undefined; serverArgs: readonly string[] }): boolean {
  return isHostMode(s) && !s.serverArgs.includes("--data-dir");
}

/** raw_exec running the host's own slotpool (no image). */
export function isHostMode(s: { driver: string; image: string | undefined }): boolean {
  return s.driver === "raw_exec" && !s.image;
}

export function cleanupTaskJson(): Record<string, unknown> {
  const c = hostModeCleanupTask();
  return {
    Name: c.name,
    Driver: "raw_exec",
    Lifecycle: { Hook: "poststop", Sidecar: false },
    Config: { command: c.command, args: c.args },
    Resources: { CPU: c.cpu, MemoryMB: c.memoryMb },
  };
}

