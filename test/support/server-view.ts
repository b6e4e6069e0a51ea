import { mountNamespacePlan } from "../../src/host/mount-namespace.js";
import { resolve } from "node:path";

/**
 * A host path as the sandbox server with this pid sees it. As root the server runs in a
 * mount namespace of its own, where each slot's workspace is its bounded disk (a tmpfs):
 * from the test's namespace the workspace dir is the empty directory underneath, so tests
 * that look into a workspace from outside look through the server's root
 * (`/proc/<pid>/root`, which resolves paths in that process's mount namespace). Not root,
 * it is the same directory either way.
 */
export function serverView(pid: number, path: string): string {
  return `/proc/${pid}/root${resolve(path)}`;
}

/**
 * Whether the sandbox servers the tests start (through the local launcher) may mount: as
 * root, and not root where this kernel lets the launcher give each server a user namespace
 * of its own (src/host/mount-namespace.ts). Then a slot's workspace is on its bounded disk
 * and template views are overlayfs; otherwise /tmp only and copies.
 */
export const serversMayMount = process.getuid?.() === 0 || mountNamespacePlan({}).run === "reexec";
