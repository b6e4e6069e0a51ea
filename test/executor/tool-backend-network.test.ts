/**
 * createToolBackend gives its sandbox servers the executor's network setting as their
 * default, so each server pre-warms the namespaces the executor's calls use (a fresh
 * trajectory's first call finds its slot's no-network namespace up, instead of building
 * it: docs/executor.md). Every executor call still carries its isolation arguments.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createToolBackend, type ToolBackendParts } from "../../src/executor/tool-backend.js";
import { waitForWarmPool } from "../support/warm-pool.js";

let backend: ToolBackendParts;

beforeAll(async () => {
  backend = await createToolBackend({ provisioner: "local", slotsPerContainer: 2, minContainers: 1, maxContainers: 1 });
}, 60_000);
afterAll(async () => {
  await backend?.close();
});

describe("createToolBackend and the servers' default network", () => {
  it("without allowNetwork the servers default to no network, and their slots are warm for it", async () => {
    await waitForWarmPool(backend.pool, 30_000);
    const slot = await backend.pool.acquire({ trajectoryId: "tbn-direct" });
    try {
      // No allow_network in the call: the server's own default decides.
      const r = await slot.execute({ tool: "bash", args: { command: "true" } });
      expect(r.success, JSON.stringify(r)).toBe(true);
      expect(r.metadata["network_isolated"]).toBe(true);
    } finally {
      await backend.pool.release(slot);
    }
    const first = await backend.executor.execute("tbn-exec", { name: "bash", arguments: { command: "echo ok" } });
    expect(first.output).toBe("ok");
    expect(first.metadata["network_isolated"]).toBe(true);
    await backend.executor.release("tbn-exec");
  }, 60_000);
});
