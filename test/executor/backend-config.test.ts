import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { ToolBackendConfigError, ToolBackendConfigSchema, parseToolBackendConfig } from "../../src/executor/backend-config.js";
import { ToolExecutorConfigSchema } from "../../src/executor/config.js";
import { SlotPoolConfigSchema } from "../../src/pool/config.js";

describe("the tool backend config: two sections, each its owner's schema", () => {
  const defaults = ToolBackendConfigSchema.parse({});

  it("the pool section is the pool's schema plus where its containers run; the executor section is the executor's", () => {
    expect(defaults.pool).toEqual({ ...SlotPoolConfigSchema.parse({}), provisioner: "local", nomad: {} });
    expect(defaults.executor).toEqual(ToolExecutorConfigSchema.parse({}));
  });

  it("the env config's pool and executor sections are the backend's, defaults included", () => {
    const env = AgentEnvConfigSchema.parse({});
    expect(env.pool).toEqual(defaults.pool);
    expect(env.executor).toEqual(defaults.executor);
    expect(env).toMatchObject({ pool: { slotsPerContainer: 10, acquireTimeoutMs: 120_000, provisioner: "local" }, executor: { allowNetwork: false } });
  });

  it("refuses minContainers above maxContainers, in the env config too", () => {
    expect(() => parseToolBackendConfig({ pool: { minContainers: 5, maxContainers: 2 } })).toThrow(ToolBackendConfigError);
    expect(() => parseToolBackendConfig({ pool: { minContainers: 5, maxContainers: 2 } })).toThrow(/pool\.minContainers: minContainers must not exceed maxContainers/);
    expect(AgentEnvConfigSchema.safeParse({ pool: { minContainers: 5, maxContainers: 2 } }).success).toBe(false);
  });

  it("names every bad field by its path", () => {
    expect(() => parseToolBackendConfig({ pool: { slotsPerContainer: 0, nomad: { driver: "podman" } } })).toThrow(
      /pool\.slotsPerContainer: .*; pool\.nomad\.driver: must be docker, raw_exec or exec/,
    );
  });

  it("refuses an unknown key in a section and a flat key from before the sections", () => {
    expect(() => parseToolBackendConfig({ pool: { slotsPerContianer: 3 } })).toThrow("unknown key 'pool.slotsPerContianer' (did you mean 'pool.slotsPerContainer'?)");
    // The executor's schema alone would drop it without a word.
    expect(() => parseToolBackendConfig({ executor: { alowNetwork: true } })).toThrow("unknown key 'executor.alowNetwork' (did you mean 'executor.allowNetwork'?)");
    expect(() => parseToolBackendConfig({ slotsPerContainer: 3 })).toThrow(/unknown key 'slotsPerContainer'/);
  });

  it("takes the Nomad job's datacenters, namespace and node pool, from an env config too", () => {
    const placed = { pool: { nomad: { datacenters: ["eu-1", "eu-2"], namespace: "ml", nodePool: "sandboxes" } } };
    expect(parseToolBackendConfig(placed)).toMatchObject(placed);
    expect(AgentEnvConfigSchema.parse(placed)).toMatchObject(placed);
    expect(() => parseToolBackendConfig({ pool: { nomad: { datacenters: [] } } })).toThrow(/pool\.nomad\.datacenters/);
    expect(() => parseToolBackendConfig({ pool: { nomad: { datacenters: ["dc1", ""] } } })).toThrow(/pool\.nomad\.datacenters/);
  });
});

describe("slotpool executor-server flags map onto the backend config", () => {
  const cli = fileURLToPath(new URL("../../dist/src/cli/main.js", import.meta.url));
  const run = (...args: string[]) => spawnSync(process.execPath, [cli, "executor-server", ...args], { encoding: "utf8", timeout: 30_000 });

  it("--help shows the schema's defaults", () => {
    const d = ToolBackendConfigSchema.parse({}).pool;
    const help = run("--help").stdout;
    expect(help).toContain(`--slots-per-container N    slots per container (default ${d.slotsPerContainer})`);
    expect(help).toContain(`(default ${d.acquireTimeoutMs})`);
    expect(help).toContain("--allow-network");
  });

  it("a bad value gets an error naming its flag, before anything starts", () => {
    const r = run("--slots-per-container", "0", "--driver", "podman");
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/--slots-per-container 0: .*>=1/);
    expect(r.stderr).toContain('--driver "podman": must be docker, raw_exec or exec');
    const dcs = run("--datacenters", "dc1,");
    expect(dcs.status).toBe(2);
    expect(dcs.stderr).toContain('--datacenters ["dc1",""]');
    expect(run("--help").stdout).toMatch(/--datacenters DC\[,DC\.\.\.\].*default dc1/);
    const order = run("--min-containers", "3", "--max-containers", "2");
    expect(order.status).toBe(2);
    expect(order.stderr).toContain("--min-containers 3: minContainers must not exceed maxContainers");
  });
});
