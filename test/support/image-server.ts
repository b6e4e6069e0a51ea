import { findExecutable } from "../../src/host/executables.js";
import type { ResetResponse } from "../../src/protocol/sandbox.js";
import { startServer, type TestServer } from "../sandbox/helpers.js";
import { pushImage, startRegistry, type TestRegistry } from "./registry.js";
import { busyboxMissing } from "./test-images.js";

/**
 * Test support for task images: why image tests cannot run here (checked once, named in each
 * skipped test), a registry with images pushed, and a sandbox server allowed to read it.
 */
export const imagesMissing: string | undefined =
  busyboxMissing ?? (["docker-registry", "skopeo", "bwrap", "cc"].map((t) => (findExecutable(t) ? undefined : `${t} is not installed (scripts/setup.sh)`)).find(Boolean) as string | undefined);

export interface ImageFixture {
  registry: TestRegistry;
  /** name → pushed reference (registry/name:tag). */
  refs: Record<string, string>;
  server: TestServer;
  stop(): Promise<void>;
}

/** A registry with `images` (name → OCI layout) pushed as `name:1`, and a sandbox server that may read it. */
export async function imageFixture(images: Record<string, string>, serverOpts: { slots?: number; extraArgs?: string[]; env?: NodeJS.ProcessEnv } = {}): Promise<ImageFixture> {
  const registry = await startRegistry();
  const refs: Record<string, string> = {};
  for (const [name, layout] of Object.entries(images)) refs[name] = await pushImage(layout, registry.host, `${name}:1`);
  const server = await startServer({ slots: serverOpts.slots ?? 4, extraArgs: ["--insecure-registry", registry.host, ...(serverOpts.extraArgs ?? [])], ...(serverOpts.env ? { env: serverOpts.env } : {}) });
  return {
    registry,
    refs,
    server,
    async stop() {
      await server.stop();
      await registry.stop();
    },
  };
}

/** POST /reset into `image`; throws with the answer unless it is a 200. */
export async function resetInto(server: TestServer, slot: number, image: string): Promise<ResetResponse> {
  const r = await server.post("/reset", { slot_id: `slot_${slot}`, image });
  if (r.status !== 200) throw new Error(`reset into ${image}: HTTP ${r.status}: ${r.text}`);
  return r.json as ResetResponse;
}

/** One tool call on a slot: its answer (HTTP 200 only). */
export async function call(server: TestServer, slot: number, tool: string, args: Record<string, unknown>): Promise<{ success: boolean; output: string; error: string; metadata: Record<string, unknown> }> {
  const r = await server.post("/execute", { slot_id: `slot_${slot}`, tool, args });
  if (r.status !== 200) throw new Error(`${tool}: HTTP ${r.status}: ${r.text}`);
  return r.json;
}

/** A bash call's stdout (throws unless it succeeded). */
export async function sh(server: TestServer, slot: number, command: string): Promise<string> {
  const r = await call(server, slot, "bash", { command });
  if (!r.success) throw new Error(`\`${command}\` failed: ${r.error}\n${r.output}`);
  return r.output;
}
