/**
 * An env's own config fields (docs/env.md, "Your env's own config fields"): a subclass
 * extends AgentEnvConfigSchema, sets `static configSchema`, and gets its fields typed, with
 * defaults, set from code or from `--config FILE`; a bad value is refused naming its path.
 */
import { spawnSync } from "node:child_process";
import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { AgentResult } from "../../src/agent/agent-loop.js";
import { AgentEnv } from "../../src/env/agent-env.js";
import { AgentEnvConfigSchema, withConfigDefaults } from "../../src/env/config.js";
import { EnvConfigError } from "../../src/env/errors.js";
import { silentLogger } from "../../src/observability/logger.js";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";
import { ToolsConfigSchema } from "../../src/tools/config.js";
import { fakeBackend } from "./support/fake-backend.js";

const PuzzleConfigSchema = AgentEnvConfigSchema.extend({
  /** The env's own top-level field. */
  difficulty: z.enum(["easy", "hard"]).default("easy"),
  /** A field added to a section: the section's schema extended (prefault: its defaults apply when the section is absent). */
  tools: ToolsConfigSchema.extend({ hintFile: z.string().min(1).optional() }).prefault({}),
});
type PuzzleConfig = z.output<typeof PuzzleConfigSchema>;

class PuzzleEnv extends AgentEnv<number, PuzzleConfig> {
  static override configSchema = PuzzleConfigSchema;
  static override envName = "puzzle";
  getNextItem(): number {
    return 1;
  }
  buildTask(): string {
    return `solve a ${this.config.difficulty} puzzle`;
  }
  override async computeReward(_item: number, _result: AgentResult): Promise<number> {
    return this.config.difficulty === "hard" ? 1 : 0.5;
  }
}

describe("an env's own config fields, from code", () => {
  it("are typed, take their defaults, and sit beside the sections", () => {
    const env = new PuzzleEnv({}, { backend: fakeBackend(), logger: silentLogger() });
    expect(env.config.difficulty).toBe("easy");
    expect(env.config.tools).toEqual({ enabled: ["default"], disabled: [] });
    const hard = new PuzzleEnv({ difficulty: "hard", groupSize: 2, tools: { hintFile: "HINT.md" }, model: { temperature: 0.2 } }, { backend: fakeBackend(), logger: silentLogger() });
    expect(hard.config).toMatchObject({ difficulty: "hard", groupSize: 2, tools: { enabled: ["default"], hintFile: "HINT.md" }, model: { temperature: 0.2, maxTokens: 2048 } });
    expect(hard.buildTask()).toBe("solve a hard puzzle");
  });

  it("a bad value is refused with its field's path named, a typo with the near name", () => {
    const make = (config: Record<string, unknown>) => () => new PuzzleEnv(config, { backend: fakeBackend(), logger: silentLogger() });
    expect(make({ difficulty: "impossible" })).toThrow(EnvConfigError);
    expect(make({ difficulty: "impossible" })).toThrow(/invalid config for env puzzle: difficulty: .*"easy"\|"hard"/);
    expect(make({ tools: { hintFile: "" } })).toThrow(/tools\.hintFile: /);
    expect(make({ difficulty: "hard", dificulty: "hard" })).toThrow(/unknown key 'dificulty' \(did you mean 'difficulty'\?\)/);
    expect(make({ tools: { hintFlie: "x" } })).toThrow(/unknown key 'tools\.hintFlie' \(did you mean 'tools\.hintFile'\?\)/);
  });
});

describe("an env's own defaults under the caller's config (withConfigDefaults)", () => {
  class DefaultsEnv extends PuzzleEnv {
    constructor(config: Record<string, unknown> = {}) {
      super(withConfigDefaults({ maxTurns: 5, pool: { slotsPerContainer: 2, maxContainers: 3 }, tools: { enabled: ["terminal"] } }, config), { backend: fakeBackend(), logger: silentLogger() });
    }
  }

  it("merges section by section: the caller's pool field keeps the env's other pool defaults; lists are replaced", () => {
    const env = new DefaultsEnv({ pool: { maxContainers: 8 }, tools: { enabled: ["file"] }, difficulty: "hard" });
    expect(env.config).toMatchObject({ maxTurns: 5, difficulty: "hard", pool: { slotsPerContainer: 2, maxContainers: 8 }, tools: { enabled: ["file"] } });
    expect(new DefaultsEnv().config.pool).toMatchObject({ slotsPerContainer: 2, maxContainers: 3 });
  });
});

describe("an env's own config fields, from --config FILE (built CLI, local provisioner)", () => {
  const ROOT = fileURLToPath(new URL("../../", import.meta.url));
  const PKG = pathToFileURL(join(ROOT, "dist", "src", "index.js")).href;
  const PKG_ENV = pathToFileURL(join(ROOT, "dist", "src", "env", "index.js")).href;
  let dir: string;
  let envPath: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "config-extension-"));
    envPath = join(dir, "puzzle.mjs");
    // As an env author's compiled env: plain ESM importing the built package; zod is the package's own.
    await writeFile(
      envPath,
      `import { z } from ${JSON.stringify(pathToFileURL(join(ROOT, "node_modules", "zod", "index.js")).href)};
import { AgentEnv } from ${JSON.stringify(PKG)};
import { AgentEnvConfigSchema } from ${JSON.stringify(PKG_ENV)};
export default class Puzzle extends AgentEnv {
  static configSchema = AgentEnvConfigSchema.extend({ difficulty: z.enum(["easy", "hard"]).default("easy") });
  static envName = "puzzle";
  getNextItem() { return 1; }
  buildTask() { return "solve it"; }
  oracle() { return () => ({ final: "done" }); }
  async computeReward() { return this.config.difficulty === "hard" ? 1 : 0.5; }
}
`,
    );
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });
  const run = (...args: string[]) => {
    const { command, args: base } = slotpoolCommand();
    return spawnSync(command, [...base, ...args], { cwd: ROOT, encoding: "utf8", timeout: 120_000 });
  };

  it("sets the field (the reward sees it)", async () => {
    const config = join(dir, "hard.json");
    await writeFile(config, JSON.stringify({ difficulty: "hard", pool: { slotsPerContainer: 1, maxContainers: 1 } }));
    const out = join(dir, "hard.jsonl");
    const r = run("process", envPath, "--config", config, "--out", out, "--groups", "1", "--group-size", "1", "--no-progress", "--no-report");
    expect(r.status, r.stderr).toBe(0);
    const line = JSON.parse((await readFile(out, "utf8")).trim().split("\n")[0]!) as { scores: number[] };
    expect(line.scores).toEqual([1]);
  }, 120_000);

  it("--set PATH=VALUE sets it too, over the file (and a section field by its dotted path)", async () => {
    const config = join(dir, "easy.json");
    await writeFile(config, JSON.stringify({ difficulty: "easy" }));
    const out = join(dir, "set.jsonl");
    const r = run("process", envPath, "--config", config, "--set", "difficulty=hard", "--set", "pool.slotsPerContainer=1", "--out", out, "--groups", "1", "--group-size", "1", "--no-progress", "--no-report");
    expect(r.status, r.stderr).toBe(0);
    expect((JSON.parse((await readFile(out, "utf8")).trim().split("\n")[0]!) as { scores: number[] }).scores).toEqual([1]);
    const bad = run("process", envPath, "--set", "pool.slotsPerContainer=many", "--out", join(dir, "bad-set.jsonl"), "--no-progress");
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/pool\.slotsPerContainer: .*number/);
    const malformed = run("process", envPath, "--set", "difficulty");
    expect(malformed.status).toBe(2);
    expect(malformed.stderr).toContain("--set needs PATH=VALUE");
  }, 120_000);

  it("a bad value: exit 2 before any work, naming the field", async () => {
    const config = join(dir, "bad.json");
    await writeFile(config, JSON.stringify({ difficulty: "impossible" }));
    const r = run("process", envPath, "--config", config, "--out", join(dir, "bad.jsonl"), "--no-progress");
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/invalid config for env puzzle: difficulty: .*"easy"\|"hard".*\(from --config /);
  }, 60_000);
});
