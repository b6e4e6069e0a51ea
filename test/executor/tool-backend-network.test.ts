/**
 * createToolBackend has its local sandbox servers pre-warm each slot's namespace for the
 * executor's network setting (--prewarm-network), so they warm the namespaces its calls use (a fresh
 * trajectory's first call finds its slot's no-network namespace up, instead of building
 * it: docs/executor.md). Every executor call still carries its isolation arguments.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createToolBackend, type ToolBackendParts } from "../../src/executor/tool-backend.js";
import { parseToolBackendConfig } from "../../src/executor/backend-config.js";
import { waitForWarmPool } from "../support/warm-pool.js";

let backend: ToolBackendParts;

beforeAll(async () => {
  backend = await createToolBackend(parseToolBackendConfig({ pool: { provisioner: "local", slotsPerContainer: 2, minContainers: 1, maxContainers: 1 } }));
}, 60_000);
afterAll(async () => {
  await backend?.close();
});

describe("createToolBackend and the servers' default network", () => {
  it("without allowNetwork every slot is pre-warmed with network off, the setting the executor's calls send", async () => {
    await waitForWarmPool(backend.pool, 30_000);
    // The pool's own calls default to the same setting (one network default per layer).
    expect(backend.pool.allowNetwork).toBe(false);
    for (const c of backend.pool.containerList()) {
      const slots = ((await (await fetch(`${c.url}/slots`, { headers: c.token ? { authorization: `Bearer ${c.token}` } : {} })).json()) as { slots: Array<{ warm_network?: string }> }).slots;
      expect(slots.map((s) => s.warm_network)).toEqual(slots.map(() => "off"));
    }
    const first = await backend.executor.execute("tbn-exec", { name: "bash", arguments: { command: "echo ok" } });
    expect(first.output).toBe("ok");
    expect(first.metadata["network_isolated"]).toBe(true);
    await backend.executor.release("tbn-exec");
  }, 60_000);
});
