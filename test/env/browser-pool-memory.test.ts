import { describe, expect, it } from "vitest";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { withBrowserMemory } from "../../src/env/pool-backend.js";
import { ToolRegistry } from "../../src/tools/registry.js";

/**
 * An env that may offer the browser tools gets Nomad slots sized for a browser each (issue 40):
 * `pool.nomad.browser` follows its toolsets unless its config says otherwise.
 */
describe("an env's Nomad slot memory and its browser tools", () => {
  const registry = ToolRegistry.withBuiltins();
  const browserOf = (config: Record<string, unknown>) => withBrowserMemory(AgentEnvConfigSchema.parse(config), registry).nomad.browser;

  it("is sized for a browser when the toolsets (enabled, full, or a distribution's) may offer one", () => {
    expect(browserOf({ tools: { enabled: ["default", "browser"] } })).toBe(true);
    expect(browserOf({ tools: { enabled: ["full"] } })).toBe(true);
    expect(browserOf({ tools: { distribution: "mixed" } })).toBe(true);
  });

  it("is not when no toolset offers one, or the browser's are disabled, or the config says", () => {
    expect(browserOf({})).toBeUndefined();
    expect(browserOf({ tools: { enabled: ["full"], disabled: ["browser"] } })).toBeUndefined();
    expect(browserOf({ tools: { distribution: "terminal_tasks" } })).toBeUndefined();
    expect(browserOf({ tools: { enabled: ["browser"] }, pool: { nomad: { browser: false } } })).toBe(false);
  });
});
