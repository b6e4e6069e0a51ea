/**
 * slotpool as a user's project meets it: `npm pack`, a tiny project outside the repository
 * depending on the tarball, an env written against `slotpool` and `slotpool/env`,
 * type-checked with the project's own TypeScript against the packed .d.ts files, then run
 * with the package's `slotpool` command (oracle policy, local provisioner) and
 * programmatically. docs/env-authoring.md, "Using slotpool from your own project".
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, realpath, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../../", import.meta.url));
const BUILT = existsSync(join(ROOT, "dist/src/index.js"));

const ENV_TS = `import { AgentEnv, type AgentEnvRuntime, type AgentResult, type GroupMember, type OracleScript, type ScoreResult, type ToolContext } from "slotpool";

interface Item { n: number; name: string; text: string }

export default class GreetingEnv extends AgentEnv<Item> {
  static override envName = "greeting";
  private i = 0;

  constructor(config: Record<string, unknown> = {}, runtime: AgentEnvRuntime = {}) {
    super({ groupSize: 2, totalGroups: 2, maxTurns: 4, ...config }, runtime);
  }

  getNextItem(): Item | null {
    const n = this.i++;
    return n < 2 ? { n, name: \`hello_\${n}.txt\`, text: \`hello \${n}\` } : null;
  }

  buildTask(item: Item): string {
    return \`Create \${item.name} containing exactly: \${item.text}\`;
  }

  override maxTurnsFor(item: Item): number {
    return 2 + item.n;
  }

  async computeReward(item: Item, _result: AgentResult, ctx: ToolContext): Promise<ScoreResult> {
    const r = await ctx.readFile(item.name);
    return { score: r.ok && r.content === item.text ? 1 : 0, metrics: { bytes: r.content.length } };
  }

  override scoreGroup(_item: Item, members: readonly GroupMember[]) {
    return { metrics: { solved: members.filter((m) => m.score === 1).length } };
  }

  override oracle(item: Item): OracleScript {
    return ({ turn }) => (turn === 1 ? { toolCalls: [{ name: "write_file", arguments: { path: item.name, content: item.text } }] } : { final: "done" });
  }
}
`;

const RUN_TS = `import { runProcessMode } from "slotpool/env";
import GreetingEnv from "./greeting-env.js";

const env = new GreetingEnv({ pool: { provisioner: "local", slotsPerContainer: 2, maxContainers: 1 } });
await env.start();
try {
  const report = await runProcessMode(env, { out: process.argv[2]!, report: false });
  console.log(JSON.stringify(report.stats.toJSON()));
} finally {
  await env.close();
}
`;

// Forgetting computeReward must fail the user's build, not the run.
const FORGETFUL_TS = `import { AgentEnv } from "slotpool";
export default class ForgetfulEnv extends AgentEnv<number> {
  getNextItem(): number | null { return null; }
  buildTask(): string { return "nothing"; }
}
`;

const TSCONFIG = {
  compilerOptions: { target: "ES2022", module: "NodeNext", moduleResolution: "NodeNext", strict: true, noImplicitOverride: true, skipLibCheck: false, types: ["node"], outDir: "build" },
  files: ["greeting-env.ts", "run.ts", "forgetful-env.ts"],
};

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

// A child npm must not inherit the repo's npm run context (npm_config_local_prefix would make it install here).
const KEPT_NPM = /^npm_config_(cache|registry|userconfig|globalconfig|proxy|https_proxy|noproxy|strict_ssl|cafile)$/i;
const childEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) || KEPT_NPM.test(k)));

function run(command: string, args: string[], cwd: string, timeoutMs = 240_000): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd, env: { ...childEnv, INIT_CWD: cwd }, stdio: ["ignore", "pipe", "pipe"], timeout: timeoutMs });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

const NETWORK = /E(NOTFOUND|AI_AGAIN|CONNREFUSED|CONNRESET|TIMEDOUT|NETUNREACH)|network|getaddrinfo|socket hang up/i;

let dir = "";
let project = "";
/** Why npm could not install the project (a network failure); the tests then skip saying so. */
let cannotInstall: string | undefined;
/** The project's own type-check (tsc -p .), run once: its errors are asserted, its emit is run. */
let tsc: Run;

describe.skipIf(!BUILT)("slotpool from a project of one's own, against the packed package (needs the build: npm test builds first, or npm run build)", () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "slotpool-packed-"));
    project = join(dir, "my-envs");
    const packed = await run("npm", ["pack", "--pack-destination", dir, "--silent"], ROOT);
    expect(packed.code, packed.stderr).toBe(0);
    const tarball = join(dir, packed.stdout.trim().split("\n").pop()!);
    // The repo's locked versions, so the project installs what the repo was tested with (from npm's cache when it has them).
    const lock = JSON.parse(await readFile(join(ROOT, "package-lock.json"), "utf8")) as { packages: Record<string, { version: string }> };
    const pkg = JSON.parse(await readFile(join(ROOT, "package.json"), "utf8")) as { dependencies: Record<string, string> };
    const locked = (name: string) => lock.packages[`node_modules/${name}`]!.version;
    await mkdir(project);
    await writeFile(
      join(project, "package.json"),
      JSON.stringify({
        name: "my-envs",
        private: true,
        type: "module",
        dependencies: { slotpool: `file:${tarball}` },
        devDependencies: { typescript: locked("typescript"), "@types/node": locked("@types/node") },
        overrides: Object.fromEntries(Object.keys(pkg.dependencies).map((d) => [d, locked(d)])),
      }),
    );
    await writeFile(join(project, "greeting-env.ts"), ENV_TS);
    await writeFile(join(project, "run.ts"), RUN_TS);
    await writeFile(join(project, "forgetful-env.ts"), FORGETFUL_TS);
    await writeFile(join(project, "tsconfig.json"), JSON.stringify(TSCONFIG, null, 2));
    const installed = await run("npm", ["install", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"], project);
    if (installed.code !== 0) {
      const out = `${installed.stderr}\n${installed.stdout}`;
      if (!NETWORK.test(out)) throw new Error(`npm install of the packed package failed:\n${out}`);
      cannotInstall = `npm could not reach its registry: ${out.trim().split("\n").slice(-3).join(" | ")}`;
      return;
    }
    tsc = await run(process.execPath, [join(project, "node_modules/typescript/bin/tsc"), "-p", "."], project);
  }, 420_000);

  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it("the project holds the packed copy (not a link into the repository) and type-checks against its .d.ts; forgetting computeReward fails the build", async (ctx) => {
    if (cannotInstall) ctx.skip(cannotInstall);
    const installed = await realpath(join(project, "node_modules/slotpool"));
    expect(installed.startsWith(await realpath(project))).toBe(true);
    // The build is shipped, not the TypeScript; the sandbox's C helpers as sources, compiled at first use.
    expect(existsSync(join(installed, "src/index.ts"))).toBe(false);
    expect(existsSync(join(installed, "dist/src/index.d.ts"))).toBe(true);
    expect(existsSync(join(installed, "src/sandbox/native/spawner.c"))).toBe(true);
    const errors = tsc.stdout.split("\n").filter((l) => /error TS\d+/.test(l));
    expect(errors, tsc.stdout).toHaveLength(1);
    expect(errors[0]).toMatch(/^forgetful-env\.ts\(2,\d+\): error TS2515: Non-abstract class 'ForgetfulEnv' does not implement inherited abstract member computeReward/);
    expect(tsc.code).toBe(2);
    // Errors do not stop the emit: the good env was compiled.
    expect(existsSync(join(project, "build/greeting-env.js"))).toBe(true);
  }, 240_000);

  it("`slotpool process` runs the env (oracle, local provisioner): every task solved, the env's metrics in the summary and the JSONL", async (ctx) => {
    if (cannotInstall) ctx.skip(cannotInstall);
    expect(existsSync(join(project, "build/greeting-env.js")), tsc.stdout).toBe(true);
    const r = await run(join(project, "node_modules/.bin/slotpool"), ["process", "build/greeting-env.js", "--out", "out/greeting.jsonl", "--no-progress"], project);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/success rate\s+100\.0% \(4 of 4/);
    expect(r.stdout).toMatch(/metric bytes\s+mean 7 /);
    expect(r.stdout).toMatch(/group metric solved\s+mean 2 /);
    const lines = (await readFile(join(project, "out/greeting.jsonl"), "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { scores: number[]; slotpool: { metrics?: Record<string, number>; trajectories: Array<{ metrics?: Record<string, number> }> } });
    expect(lines).toHaveLength(2);
    for (const line of lines) {
      expect(line.scores).toEqual([1, 1]);
      expect(line.slotpool.metrics).toEqual({ solved: 2 });
      expect(line.slotpool.trajectories.map((t) => t.metrics)).toEqual([{ bytes: 7 }, { bytes: 7 }]);
    }
    expect(existsSync(join(project, "out/greeting.html"))).toBe(true);
  }, 240_000);

  it("programmatically: the env and runProcessMode from slotpool/env, in the project's own script", async (ctx) => {
    if (cannotInstall) ctx.skip(cannotInstall);
    const r = await run(process.execPath, ["build/run.js", "out/programmatic.jsonl"], project);
    expect(r.code, r.stderr).toBe(0);
    // The pool's log lines share stdout with the script's one line of figures.
    const stats = JSON.parse(r.stdout.split("\n").find((l) => l.startsWith('{"groups":'))!) as { groups: number; trajectories: number; success_rate: number; group_metrics: Record<string, unknown> };
    expect(stats).toMatchObject({ groups: 2, trajectories: 4, success_rate: 1, group_metrics: { solved: { mean: 2, count: 2 } } });
  }, 240_000);
});
