/** Starts real sandbox-server processes for executor tests (run `npm run build` first). */
import { chmod, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startSandboxProcess, type SandboxProcess } from "../../../src/pool/sandbox-process.js";
import type { ContainerInfo } from "../../../src/pool/types.js";

export interface Sandboxes {
  containers: ContainerInfo[];
  processes: SandboxProcess[];
  stop(): Promise<void>;
}

export async function startSandboxes(count: number, slots: number, token = "sandbox-test-token"): Promise<Sandboxes> {
  const dir = await mkdtemp(join(tmpdir(), "slotpool-exec-"));
  // mkdtemp makes the dir 0700; the sandbox runs each slot under its own uid, which must
  // be able to reach its workspace below it (else bubblewrap is reported unavailable).
  await chmod(dir, 0o755);
  const processes = await Promise.all(
    Array.from({ length: count }, (_, i) => startSandboxProcess({ slots, dataDir: join(dir, `c${i}`), token })),
  );
  const containers = processes.map((p, i) => ({ id: `local-${i}`, index: i, url: p.url, token, slots }));
  return {
    containers,
    processes,
    async stop() {
      await Promise.all(processes.map((p) => p.stop()));
      await rm(dir, { recursive: true, force: true });
    },
  };
}
