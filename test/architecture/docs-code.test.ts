/**
 * What the env author's docs show compiles against the package as it is (issue 39, item 5:
 * docs named hooks, paths and fields that had moved or never worked that way):
 *
 * - every TypeScript block of README.md, docs/env-authoring.md, docs/env.md and docs/tools.md
 *   that is a whole module — its first line names its file, `// my-env.ts` (so `run.ts` can
 *   import `./my-env.js`) — type-checks with the strict settings the docs tell a project of
 *   one's own to use; fragments (a method shown alone, an abridged class) have no such line;
 * - every repository path they name exists;
 * - the hooks docs/env-authoring.md says "may be async" take an `async` override, and those it
 *   says "return at once" do not (TypeScript's TS2416), so neither list can drift.
 *
 * One TypeScript program for all of it, from the sources ("slotpool" and its subpaths mapped
 * to src/, as the examples are): no build needed.
 */
import { mkdir, rm, writeFile } from "node:fs/promises";
import { existsSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
/** Inside the repository (ignored), so the blocks' own imports (zod) resolve from node_modules. */
const WORK = join(ROOT, ".build", `docs-code-${process.pid}`);
const PAGES = ["README.md", "docs/env-authoring.md", "docs/env.md", "docs/tools.md"];
const SUBPATHS = ["protocol", "pool", "nomad", "executor", "e2b", "tools", "agent", "env", "report", "sandbox"];

/** The whole-module TypeScript blocks of a page, each with the file name it is written to. */
export function moduleBlocks(text: string): Array<{ name: string; code: string }> {
  const blocks: Array<{ name: string; code: string }> = [];
  const re = /^```ts\n([\s\S]*?)^```/gm;
  for (const m of text.matchAll(re)) {
    const code = m[1]!;
    const named = /^\/\/ ([\w-]+\.ts)\n/.exec(code)?.[1];
    if (named) blocks.push({ name: named, code });
  }
  return blocks;
}

/** The hooks a sentence of docs/env-authoring.md lists: "`name(args)`" → name. */
function hooksIn(sentence: string): string[] {
  return [...sentence.matchAll(/`(\w+)\([^`]*\)`/g)].map((m) => m[1]!);
}

const authoring = readFileSync(join(ROOT, "docs", "env-authoring.md"), "utf8");
const mayBeAsync = hooksIn(/\*\*Hooks\.\*\* These may be async[^:]*:([\s\S]*?)\n\n/.exec(authoring)?.[1]?.split(/These return at once/)[0] ?? "");
const atOnce = hooksIn(/These return at once[^:]*:([\s\S]*?)\n\n/.exec(authoring)?.[1] ?? "");

/** An env whose `hook` is an async method (the other abstract hooks written plainly). */
function asyncOverride(hook: string): string {
  const plain: Record<string, string> = {
    getNextItem: "getNextItem() { return { n: 1 }; }",
    buildTask: 'buildTask() { return "t"; }',
    computeReward: "computeReward() { return 1; }",
  };
  const others = Object.entries(plain).filter(([name]) => name !== hook).map(([, code]) => `  ${code}`);
  return `import { AgentEnv } from "slotpool";
export default class E extends AgentEnv<{ n: number }> {
${others.join("\n")}
  override async ${hook}(..._args: any[]): Promise<never> { throw new Error("never run: only compiled"); }
}
`;
}

let diagnostics: Map<string, string[]>;
beforeAll(async () => {
  await rm(WORK, { recursive: true, force: true });
  const files: string[] = [];
  for (const page of PAGES) {
    const dir = join(WORK, page.replace(/[/.]/g, "_"));
    await mkdir(dir, { recursive: true });
    for (const b of moduleBlocks(readFileSync(join(ROOT, page), "utf8"))) {
      await writeFile(join(dir, b.name), b.code);
      files.push(join(dir, b.name));
    }
  }
  await mkdir(join(WORK, "hooks"), { recursive: true });
  for (const hook of [...mayBeAsync, ...atOnce]) {
    await writeFile(join(WORK, "hooks", `${hook}.ts`), asyncOverride(hook));
    files.push(join(WORK, "hooks", `${hook}.ts`));
  }
  const paths: Record<string, string[]> = { slotpool: [join(ROOT, "src/index.ts")], "slotpool/atropos": [join(ROOT, "src/env/atropos/index.ts")] };
  for (const s of SUBPATHS) paths[`slotpool/${s}`] = [join(ROOT, `src/${s}/index.ts`)];
  const program = ts.createProgram(files, {
    target: ts.ScriptTarget.ES2022,
    lib: ["lib.es2023.d.ts"],
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    skipLibCheck: true,
    noEmit: true,
    types: ["node"],
    paths,
  });
  diagnostics = new Map(files.map((f) => [f, []]));
  for (const d of ts.getPreEmitDiagnostics(program)) {
    if (!d.file || !diagnostics.has(d.file.fileName)) continue;
    const line = d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : 0;
    diagnostics.get(d.file.fileName)!.push(`TS${d.code} line ${line}: ${ts.flattenDiagnosticMessageText(d.messageText, " ")}`);
  }
}, 180_000);
afterAll(async () => {
  await rm(WORK, { recursive: true, force: true });
});

describe("the docs' code compiles against the package", () => {
  it("finds the whole-module blocks (my-env.ts and run.ts of env-authoring, the env of env.md, the tools env of tools.md)", () => {
    const names = [...diagnostics.keys()].map((f) => relative(WORK, f));
    expect(names).toEqual(expect.arrayContaining(["docs_env-authoring_md/my-env.ts", "docs_env-authoring_md/run.ts"]));
    expect(names.filter((n) => n.startsWith("docs_env_md/")).length).toBeGreaterThanOrEqual(1);
    expect(names.filter((n) => n.startsWith("docs_tools_md/")).length).toBeGreaterThanOrEqual(1);
  });

  it("every whole-module block type-checks (strict, NodeNext)", () => {
    const broken = [...diagnostics].filter(([f, d]) => !relative(WORK, f).startsWith("hooks/") && d.length > 0).map(([f, d]) => `${relative(WORK, f)}: ${d.join(" | ")}`);
    expect(broken).toEqual([]);
  });
});

describe("the paths the env author's docs name", () => {
  it("every src/, test/, examples/, scripts/ and docs/ path in them exists (an example's .js is its built .ts)", () => {
    const missing: string[] = [];
    for (const page of PAGES) {
      for (const m of readFileSync(join(ROOT, page), "utf8").matchAll(/\b((?:src|test|examples|scripts|docs)\/[\w./-]*\w)/g)) {
        const p = m[1]!;
        if (!existsSync(join(ROOT, p)) && !existsSync(join(ROOT, p.replace(/\.js$/, ".ts")))) missing.push(`${page}: ${p}`);
      }
    }
    expect(missing).toEqual([]);
  });
});

describe("the install lines for a project of one's own", () => {
  it("name zod, typescript and @types/node at the versions slotpool is built with (package.json)", () => {
    const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { dependencies: Record<string, string>; devDependencies: Record<string, string> };
    const install = authoring.slice(authoring.indexOf("## Using slotpool from your own project"), authoring.indexOf("## The env class"));
    expect(install).toContain(`npm install zod@${pkg.dependencies["zod"]}`);
    expect(install).toContain(`npm install -D typescript@${pkg.devDependencies["typescript"]} @types/node@${pkg.devDependencies["@types/node"]}`);
  });
});

describe("the hooks docs/env-authoring.md says may be async, and those it says return at once", () => {
  it("lists both (the hooks paragraph is where the test reads them)", () => {
    expect(mayBeAsync).toEqual(expect.arrayContaining(["setup", "getNextItem", "setupWorkspace", "computeReward"]));
    expect(atOnce).toEqual(expect.arrayContaining(["buildTask", "oracle"]));
  });

  it("an async override of a 'may be async' hook compiles", () => {
    const wrong = mayBeAsync.filter((h) => diagnostics.get(join(WORK, "hooks", `${h}.ts`))!.length > 0).map((h) => `${h}: ${diagnostics.get(join(WORK, "hooks", `${h}.ts`))!.join(" | ")}`);
    expect(wrong).toEqual([]);
  });

  it("an async override of a 'return at once' hook is TS2416", () => {
    const accepted = atOnce.filter((h) => !diagnostics.get(join(WORK, "hooks", `${h}.ts`))!.some((d) => d.startsWith("TS2416")));
    expect(accepted).toEqual([]);
  });
});
