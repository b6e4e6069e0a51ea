import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { ToolBackendConfigError, ToolBackendConfigSchema, ToolBackendSettingsSchema, parseToolBackendConfig } from "../../src/executor/backend-config.js";
import { ToolExecutorConfigSchema } from "../../src/executor/config.js";
import { SlotPoolConfigSchema } from "../../src/pool/config.js";

describe("the tool backend config: one schema, one set of defaults", () => {
  const defaults = ToolBackendConfigSchema.parse({});

  it("takes the pool's and the executor's fields with their own defaults", () => {
    const pool = SlotPoolConfigSchema.parse({});
    const executor = ToolExecutorConfigSchema.parse({});
    expect(defaults).toMatchObject({
      provisioner: "local",
      slotsPerContainer: pool.slotsPerContainer,
      minContainers: pool.minContainers,
      maxContainers: pool.maxContainers,
      idleTimeoutMs: pool.idleTimeoutMs,
      acquireTimeoutMs: pool.acquireTimeoutMs,
      batchWindowMs: executor.batchWindowMs,
      maxBatchSize: executor.maxBatchSize,
      toolTimeoutS: executor.defaultTimeoutS,
      allowNetwork: executor.allowNetwork,
      requireSandbox: executor.requireSandbox,
    });
  });

  it("the env config's backend fields are the backend's, defaults included", () => {
    const env = AgentEnvConfigSchema.parse({});
    for (const key of Object.keys(ToolBackendSettingsSchema.shape) as (keyof typeof defaults)[]) {
      if (key in env) expect((env as Record<string, unknown>)[key], key).toEqual(defaults[key]);
    }
    expect(env).toMatchObject({ slotsPerContainer: 10, acquireTimeoutMs: 120_000, allowNetwork: false, provisioner: "local" });
  });

  it("refuses minContainers above maxContainers, in the env config too", () => {
    expect(() => parseToolBackendConfig({ minContainers: 5, maxContainers: 2 })).toThrow(ToolBackendConfigError);
    expect(() => parseToolBackendConfig({ minContainers: 5, maxContainers: 2 })).toThrow(/minContainers: minContainers must not exceed maxContainers/);
    expect(AgentEnvConfigSchema.safeParse({ minContainers: 5, maxContainers: 2 }).success).toBe(false);
  });

  it("names every bad field", () => {
    expect(() => parseToolBackendConfig({ slotsPerContainer: 0, nomadDriver: "podman" })).toThrow(/slotsPerContainer: .*; nomadDriver: nomadDriver must be docker, raw_exec or exec/);
  });

  it("takes the Nomad job's datacenters, namespace and node pool, from an env config too", () => {
    const placed = { nomadDatacenters: ["eu-1", "eu-2"], nomadNamespace: "ml", nomadNodePool: "sandboxes" };
    expect(parseToolBackendConfig(placed)).toMatchObject(placed);
    expect(AgentEnvConfigSchema.parse(placed)).toMatchObject(placed);
    expect(() => parseToolBackendConfig({ nomadDatacenters: [] })).toThrow(/nomadDatacenters/);
    expect(() => parseToolBackendConfig({ nomadDatacenters: ["dc1", ""] })).toThrow(/nomadDatacenters/);
  });

  it("ignores an env config's own fields, so an env config can be passed whole", () => {
    const env = AgentEnvConfigSchema.parse({ groupSize: 3, slotsPerContainer: 3 });
    expect(parseToolBackendConfig(env).slotsPerContainer).toBe(3);
  });
});

describe("slotpool executor-server flags map onto the backend config", () => {
  const cli = fileURLToPath(new URL("../../dist/src/cli/main.js", import.meta.url));
  const run = (...args: string[]) => spawnSync(process.execPath, [cli, "executor-server", ...args], { encoding: "utf8", timeout: 30_000 });

  it("--help shows the schema's defaults", () => {
    const d = ToolBackendConfigSchema.parse({});
    const help = run("--help").stdout;
    expect(help).toContain(`--slots-per-container N    slots per container (default ${d.slotsPerContainer})`);
    expect(help).toContain(`(default ${d.acquireTimeoutMs})`);
    expect(help).toContain("--allow-network");
  });

  it("a bad value gets an error naming its flag, before anything starts", () => {
    const r = run("--slots-per-container", "0", "--driver", "podman");
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/--slots-per-container 0: .*>=1/);
    expect(r.stderr).toContain('--driver "podman": nomadDriver must be docker, raw_exec or exec');
    const dcs = run("--datacenters", "dc1,");
    expect(dcs.status).toBe(2);
    expect(dcs.stderr).toContain('--datacenters ["dc1",""]');
    expect(run("--help").stdout).toMatch(/--datacenters DC\[,DC\.\.\.\].*default dc1/);
    const order = run("--min-containers", "3", "--max-containers", "2");
    expect(order.status).toBe(2);
    expect(order.stderr).toContain("--min-containers 3: minContainers must not exceed maxContainers");
  });
});
