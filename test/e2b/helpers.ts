import { chmodSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { E2bServer, type E2bServerOptions } from "../../src/e2b/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { SlotPool } from "../../src/pool/slot-pool.js";
import type { TemplateSpec } from "../../src/pool/types.js";

/** A real local pool (sandbox-server processes, bubblewrap) behind an E2bServer on 127.0.0.1. */
export interface E2bHarness {
  server: E2bServer;
  pool: SlotPool;
  url: string;
  apiKey: string;
  /** ConnectionOpts for the e2b SDK pointing at this server. */
  opts: { apiUrl: string; sandboxUrl: string; apiKey: string };
  stop(): Promise<void>;
}

/** Bounds of the server under test (the rest of E2bServerOptions is the harness's). */
type Bounds = Pick<E2bServerOptions, "maxDownloadBytes" | "uploadBudgetBytes" | "sandboxUploadBudgetBytes" | "maxStreamsPerSandbox" | "maxWatchersPerSandbox" | "fileTimeoutMs" | "maxStdinBytesPerSandbox" | "domain" | "portLimits" | "tls" | "secretsFile" | "logger" | "templateRegistry" | "templateStartTimeoutMs">;

export async function startE2b(options: { slots?: number; containers?: number; templates?: TemplateSpec[]; maxUploadBytes?: number; allowNetwork?: boolean; sandboxServerArgs?: string[] } & Bounds = {}): Promise<E2bHarness> {
  const baseDir = mkdtempSync(join(tmpdir(), "slotpool-e2b-"));
  chmodSync(baseDir, 0o755); // the slot uids (root runs) must reach their workspaces
  const slots = options.slots ?? 4;
  const pool = new SlotPool({ provisioner: new LocalProvisioner({ slotsPerContainer: slots, baseDir, ...(options.sandboxServerArgs ? { extraArgs: options.sandboxServerArgs } : {}) }), slotsPerContainer: slots, minContainers: options.containers ?? 1, maxContainers: options.containers ?? 1 });
  await pool.start();
  const apiKey = "e2b_test_key_" + Math.random().toString(36).slice(2);
  const server = new E2bServer({
    pool,
    apiKey,
    templates: new Map((options.templates ?? []).map((t) => [t.name, t])),
    ...(options.maxUploadBytes ? { maxUploadBytes: options.maxUploadBytes } : {}),
    ...(options.allowNetwork ? { allowNetwork: true } : {}),
    ...Object.fromEntries(
      (["maxDownloadBytes", "uploadBudgetBytes", "sandboxUploadBudgetBytes", "maxStreamsPerSandbox", "maxWatchersPerSandbox", "fileTimeoutMs", "maxStdinBytesPerSandbox", "domain", "portLimits", "tls", "secretsFile", "logger", "templateRegistry", "templateStartTimeoutMs"] as const).filter((k) => options[k] !== undefined).map((k) => [k, options[k]]),
    ),
  });
  const url = await server.listen(0, "127.0.0.1");
  return {
    server,
    pool,
    url,
    apiKey,
    opts: { apiUrl: url, sandboxUrl: url, apiKey },
    async stop() {
      await server.close();
      await pool.stop({ purge: true });
      rmSync(baseDir, { recursive: true, force: true });
    },
  };
}
