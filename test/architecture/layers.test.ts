import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { importCycles, layerViolations, readImportGraph, sandboxLayerViolations, type ImportGraph } from "./import-graph.js";

const SRC = fileURLToPath(new URL("../../src", import.meta.url));

describe("layers of src/", () => {
  const graph = readImportGraph(SRC);

  it("reads the real import graph (type-only and re-exports included)", () => {
    expect(graph.size).toBeGreaterThan(50);
    expect(graph.get("pool/slot-pool.ts")).toContain("pool/errors.ts");
  });

  it("imports point one way: protocol <- sandbox; protocol <- nomad <- pool <- executor <- env <- openenv <- cli", () => {
    expect(layerViolations(graph)).toEqual([]);
  });

  it("has no import cycle between files", () => {
    expect(importCycles(graph)).toEqual([]);
  });

  it("inside sandbox/, sub-rooms import one way: core <- run, native <- isolation <- workspace <- images <- templates, tools <- fork <- service <- http", () => {
    expect(graph.get("sandbox/http/server.ts")).toContain("sandbox/service/service.ts");
    expect(sandboxLayerViolations(graph)).toEqual([]);
  });
});

describe("the layer rules themselves", () => {
  const fake = (edges: Record<string, string[]>): ImportGraph => new Map(Object.entries(edges));

  it("report a lower room importing a higher one", () => {
    const graph = fake({
      "pool/sandbox-process.ts": ["cli/command.ts", "pool/errors.ts"],
      "sandbox/server.ts": ["executor/http-json.ts", "protocol/sandbox.ts"],
      "cli/command.ts": [],
      "pool/errors.ts": [],
      "executor/http-json.ts": [],
      "protocol/sandbox.ts": [],
    });
    expect(layerViolations(graph)).toEqual([
      "pool/sandbox-process.ts -> cli/command.ts (pool may not import cli)",
      "sandbox/server.ts -> executor/http-json.ts (sandbox may not import executor)",
    ]);
  });

  it("report an unknown room", () => {
    expect(layerViolations(fake({ "utils/misc.ts": ["protocol/sandbox.ts"] }))).toEqual([
      "utils/misc.ts -> protocol/sandbox.ts (utils may not import protocol)",
    ]);
  });

  it("report a sandbox sub-room importing a higher one, and a file outside any sub-room", () => {
    const graph = fake({
      "sandbox/isolation/spawner.ts": ["sandbox/tools/bash.ts", "sandbox/run/runner.ts"],
      "sandbox/tools/bash.ts": ["sandbox/templates/templates.ts", "sandbox/index.ts", "sandbox/core/slot.ts"],
      "sandbox/helpers.ts": ["sandbox/core/slot.ts"],
      "sandbox/index.ts": ["sandbox/http/server.ts"],
      "sandbox/http/server.ts": ["sandbox/service/service.ts", "protocol/sandbox.ts"],
      "sandbox/gadgets/x.ts": ["sandbox/core/slot.ts"],
    });
    expect(sandboxLayerViolations(graph)).toEqual([
      "sandbox/gadgets/x.ts -> sandbox/core/slot.ts (sandbox/gadgets may not import sandbox/core)",
      "sandbox/helpers.ts (is in no sandbox sub-room: move it into one)",
      "sandbox/isolation/spawner.ts -> sandbox/tools/bash.ts (sandbox/isolation may not import sandbox/tools)",
      "sandbox/tools/bash.ts -> sandbox/index.ts (sandbox/tools may not import sandbox/index.ts)",
      "sandbox/tools/bash.ts -> sandbox/templates/templates.ts (sandbox/tools may not import sandbox/templates)",
    ]);
  });

  it("report a cycle, type-only or not", () => {
    const graph = fake({
      "sandbox/service.ts": ["sandbox/bash.ts"],
      "sandbox/bash.ts": ["sandbox/service.ts", "sandbox/slot.ts"],
      "sandbox/slot.ts": [],
    });
    expect(importCycles(graph)).toEqual(["sandbox/bash.ts -> sandbox/service.ts -> sandbox/bash.ts"]);
  });
});

describe("file sizes in src/", () => {
  it("no file is over 500 lines unless its header says why", async () => {
    const { readFileSync } = await import("node:fs");
    const long = [...readImportGraph(SRC).keys()].filter((file) => {
      const text = readFileSync(`${SRC}/${file}`, "utf8");
      return text.split("\n").length > 500 && !/^\/\/ Longer than 500 lines on purpose: \S/.test(text);
    });
    expect(long).toEqual([]);
  });
});
