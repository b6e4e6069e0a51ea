import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";

/**
 * The environment a benchmark's baseline server (a built checkout's `dist/src/cli/main.js`)
 * starts with. Not root, the launcher starts a server in a user namespace of its own; a
 * baseline built before that existed cannot start bubblewrap there (it does not drop the
 * namespace's capabilities), so it runs where it always ran: the marker says "already
 * there". Undefined when nothing needs setting.
 */
export function baselineEnv(mainScript: string | undefined): NodeJS.ProcessEnv | undefined {
  if (!mainScript || process.getuid?.() === 0) return undefined;
  const namespaces = join(dirname(mainScript), "..", "host", "mount-namespace.js");
  const knowsUserNamespace = existsSync(namespaces) && readFileSync(namespaces, "utf8").includes("withoutCapabilities");
  return knowsUserNamespace ? undefined : { SLOTPOOL_OWN_MOUNT_NS: "1" };
}
