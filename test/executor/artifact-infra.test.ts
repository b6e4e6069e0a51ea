/**
 * Issue 29: the executor's artifact calls follow the one rule for infra failures. A sandbox
 * server that cannot be asked (here: killed, and the pool not told) makes the answer an
 * infra failure (`metadata.infra: "sandbox_error"`), as a tool call's HTTP failure is; the
 * server refusing the request itself (4xx, a bad path) is the request's fault: no marker.
 */
import { describe, expect, it } from "vitest";
import { ToolExecutor } from "../../src/executor/tool-executor.js";
import { DirectSlotPool } from "./support/direct-slot-pool.js";
import { startSandboxes } from "./support/sandboxes.js";

const bash = (command: string) => ({ name: "bash", arguments: { command } });

describe("ToolExecutor artifact calls and the infra marker", () => {
  it("a sandbox server that cannot be asked: sandbox_error on read, list and archive; a refused path: no marker", async () => {
    const sb = await startSandboxes(1, 1);
    const ex = new ToolExecutor({ pool: new DirectSlotPool(sb.containers), config: { batchWindowMs: 1 } });
    try {
      await ex.start();
      const t = "artifact-infra-1";
      expect((await ex.execute(t, bash("echo x > f"))).success).toBe(true);
      // Refused by the server itself (HTTP 400: the path's fault), not the infrastructure.
      const refused = await ex.readArtifact(t, { path: "a\0b" });
      expect(refused.success).toBe(false);
      expect(refused.metadata?.["infra"], refused.error).toBeUndefined();
      const ok = await ex.readArtifact(t, { path: "f" });
      expect(ok).toMatchObject({ success: true, content: "x\n" });
      expect(ok.metadata).toBeUndefined();
      // The server dies; the pool is not told (no slot loss): the calls cannot reach it.
      sb.processes[0]!.child.kill("SIGKILL");
      await new Promise<void>((r) => (sb.processes[0]!.child.exitCode !== null || sb.processes[0]!.child.signalCode !== null ? r() : sb.processes[0]!.child.once("exit", () => r())));
      const read = await ex.readArtifact(t, { path: "f" });
      const list = await ex.listArtifacts(t, { path: "." });
      const archive = await ex.archiveArtifacts(t, { path: "." });
      for (const r of [read, list, archive]) {
        expect(r.success).toBe(false);
        expect(r.metadata).toEqual({ infra: "sandbox_error" });
      }
    } finally {
      await ex.close().catch(() => undefined);
      await sb.stop();
    }
  }, 90_000);
});
