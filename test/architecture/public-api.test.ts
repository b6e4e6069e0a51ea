import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath, pathToFileURL } from "node:url";
import { describe, expect, it } from "vitest";
import * as root from "../../src/index.js";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));

describe("the public API", () => {
  it("the root lists by name what env authors and pool users need, and no more", () => {
    const names = Object.keys(root).sort();
    // Values only (types vanish at run time); with the types the root holds about 40 names.
    expect(names).toEqual(
      [
        "AgentEnv",
        "EnvError",
        "ExecutorServer",
        "LocalProvisioner",
        "NomadProvisioner",
        "PoolNotRunningError",
        "ProvisionerError",
        "SlotAcquireTimeoutError",
        "SlotLostError",
        "SlotPool",
        "PoolError",
        "SlotReleasedError",
        "SlotForkError",
        "SlotpoolError",
        "ToolContext",
        "ToolContextError",
        "PathRefusedError",
        "ToolExecutor",
        "ToolServer",
        "createToolBackend",
        "defineExternalTool",
        "defineTool",
        "isSlotLostError",
      ].sort(),
    );
  });

  it("every error slotpool raises has the SlotpoolError base and a stable code", () => {
    const lost = new root.SlotLostError("slot_0", "alloc-1", "the node died", "t1");
    expect(lost).toBeInstanceOf(root.SlotpoolError);
    expect(lost).toBeInstanceOf(root.PoolError);
    expect(lost.code).toBe("SLOT_LOST");
    expect(new root.PoolNotRunningError("stopped").code).toBe("POOL_NOT_RUNNING");
    expect(new root.EnvError("bad config").code).toBe("ENV");
  });

  it("one check recognises a lost slot, also from another copy of the module", () => {
    expect(root.isSlotLostError(new root.SlotLostError("slot_0", "a", "gone"))).toBe(true);
    const foreign = Object.assign(new Error("slot lost"), { name: "SlotLostError" });
    expect(root.isSlotLostError(foreign)).toBe(true);
    expect(root.isSlotLostError(Object.assign(new Error("x"), { code: "SLOT_LOST" }))).toBe(true);
    expect(root.isSlotLostError(new root.PoolError("other"))).toBe(false);
    expect(root.isSlotLostError("SlotLostError")).toBe(false);
  });

  it("each subpath export of package.json points at a built module (npm test builds first)", async () => {
    const pkg = JSON.parse(readFileSync(`${ROOT}package.json`, "utf8")) as { exports: Record<string, string | { default: string; types: string }> };
    const subpaths = Object.keys(pkg.exports).filter((k) => k !== "." && k !== "./package.json");
    expect(subpaths).toEqual(expect.arrayContaining(["./protocol", "./pool", "./nomad", "./executor", "./tools", "./agent", "./env", "./atropos", "./sandbox"]));
    for (const key of subpaths) {
      const entry = pkg.exports[key] as { default: string; types: string };
      const file = `${ROOT}${entry.default}`;
      expect(existsSync(file), `${key} -> ${entry.default}`).toBe(true);
      const mod = (await import(pathToFileURL(file).href)) as Record<string, unknown>;
      expect(Object.keys(mod).length, key).toBeGreaterThan(0);
    }
  });
});
