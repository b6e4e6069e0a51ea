import { describe, expect, it } from "vitest";
import { z } from "zod";
import {
  BUILTIN_DISTRIBUTIONS,
  ToolRegistry,
  Toolsets,
  UnknownToolError,
  UnknownToolsetError,
  defineTool,
  resolveGroupTools,
  seededRng,
} from "../../src/tools/index.js";
import { sampleToolsets } from "../../src/tools/distributions.js";

const weather = defineTool({ name: "lookup_weather", description: "w", kind: "external", parameters: z.object({ city: z.string() }) });
const registry = ToolRegistry.withBuiltins([weather]);

describe("toolsets", () => {
  const sets = new Toolsets();

  it("resolves the built-in toolsets", () => {
    expect(sets.resolve({ enabled: ["default"] }, registry)).toEqual(["bash", "read_file", "write_file"]);
    expect(sets.resolve({ enabled: ["terminal"] }, registry)).toEqual(["bash"]);
    expect(sets.resolve({ enabled: ["stateful"] }, registry)).toEqual(["bash_stateful", "tmux"]);
    expect(sets.resolve({ enabled: ["filesystem"] }, registry)).toEqual(["read_file", "write_file"]);
    expect(sets.resolve({ enabled: ["full"] }, registry)).toEqual(registry.names());
    expect(sets.resolve({}, registry)).toEqual(["bash", "read_file", "write_file"]);
  });

  it("applies disabled toolsets after enabled ones", () => {
    expect(sets.resolve({ enabled: ["full"], disabled: ["stateful", "filesystem", "browser"] }, registry)).toEqual(["bash", "lookup_weather"]);
    expect(sets.resolve({ enabled: ["terminal", "filesystem"], disabled: ["terminal"] }, registry)).toEqual(["read_file", "write_file"]);
  });

  it("the browser toolset adds the seed's ten browser tools to the default ones", () => {
    expect(sets.resolve({ enabled: ["default", "browser"] }, registry)).toEqual([
      "bash", "read_file", "write_file",
      "browser_navigate", "browser_snapshot", "browser_click", "browser_type", "browser_scroll", "browser_back", "browser_press", "browser_close", "browser_get_images", "browser_vision",
    ]); // prettier-ignore
    expect(sets.resolve({ enabled: ["default"] }, registry)).not.toContain("browser_navigate");
  });

  it("supports user-defined toolsets, with includes and aliases", () => {
    const custom = new Toolsets({ web: ["lookup_weather"], research: { description: "r", tools: ["terminal"], includes: ["web"] } });
    expect(custom.resolve({ enabled: ["research"] }, registry)).toEqual(["bash", "lookup_weather"]);
  });

  it("names unknown toolsets and unknown tools", () => {
    expect(() => sets.resolve({ enabled: ["web"] }, registry)).toThrow(UnknownToolsetError);
    expect(() => sets.resolve({ enabled: ["web"] }, registry)).toThrow(/unknown toolset 'web'; available toolsets: default, terminal/);
    const bad = new Toolsets({ broken: ["nope"] });
    expect(() => bad.resolve({ enabled: ["broken"] }, registry)).toThrow(UnknownToolError);
  });
});

describe("toolset distributions", () => {
  it("includes each toolset with its probability (seeded)", () => {
    const rng = seededRng(7);
    const dist = { description: "", toolsets: { terminal: 100, filesystem: 50, stateful: 0 } };
    const counts = { terminal: 0, filesystem: 0, stateful: 0 };
    for (let i = 0; i < 2000; i++) for (const s of sampleToolsets(dist, rng)) counts[s as keyof typeof counts]++;
    expect(counts.terminal).toBe(2000);
    expect(counts.stateful).toBe(0);
    expect(counts.filesystem).toBeGreaterThan(850);
    expect(counts.filesystem).toBeLessThan(1150);
  });

  it("falls back to the most probable toolset when nothing was drawn", () => {
    const dist = { description: "", toolsets: { terminal: 1, stateful: 2 } };
    expect(sampleToolsets(dist, () => 0.99)).toEqual(["stateful"]);
  });

  it("is reproducible with the same seed", () => {
    const a = Array.from({ length: 20 }, (_, i) => sampleToolsets(BUILTIN_DISTRIBUTIONS["mixed"]!, seededRng(i)));
    const b = Array.from({ length: 20 }, (_, i) => sampleToolsets(BUILTIN_DISTRIBUTIONS["mixed"]!, seededRng(i)));
    expect(a).toEqual(b);
  });

  it("rejects probabilities outside 0..100", () => {
    expect(() => sampleToolsets({ description: "", toolsets: { terminal: 150 } })).toThrow(/between 0 and 100/);
  });

  it("resolves one group's tools from a distribution or an enabled list", () => {
    const g = resolveGroupTools({ registry, distribution: "terminal_tasks", rng: () => 0.5 });
    expect(g.toolsets).toEqual(["terminal", "filesystem"]);
    expect(g.names).toEqual(["bash", "read_file", "write_file"]);
    expect(g.tools.map((t) => t.function.name)).toEqual(g.names);
    const e = resolveGroupTools({ registry, enabled: ["stateful"], disabled: ["filesystem"] });
    expect(e.names).toEqual(["bash_stateful", "tmux"]);
    expect(() => resolveGroupTools({ registry, distribution: "nope" })).toThrow(/unknown distribution 'nope'/);
  });
});
