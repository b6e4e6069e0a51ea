/**
 * Issue 32, item 10: the CLI says what is wrong. `process env.ts` (node cannot load
 * TypeScript) is a usage error (exit 2) with the ways out; `view` of a file that is not
 * rollout JSONL exits non-zero naming the problem and writes no page.
 */
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { slotpoolCommand } from "../../src/pool/slotpool-command.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "cli-usage-truth-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function runCli(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const { command, args: base } = slotpoolCommand();
  return new Promise((done) => {
    const child = spawn(command, [...base, ...args], { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (c: Buffer) => (stdout += c.toString()));
    child.stderr.on("data", (c: Buffer) => (stderr += c.toString()));
    child.on("exit", (code) => done({ code, stdout, stderr }));
  });
}

describe("the CLI names the problem", () => {
  it("process of a TypeScript env: exit 2, a usage error saying to compile it or run under tsx", async () => {
    const env = join(dir, "my-env.ts");
    await writeFile(env, `import { AgentEnv } from "slotpool";\nexport default class E extends AgentEnv<{ n: number }> {}\n`);
    const r = await runCli(["process", env, "--no-progress"]);
    expect(r.code, r.stderr).toBe(2);
    expect(r.stderr).toMatch(/my-env\.ts is TypeScript, which node cannot load: compile it first .*or run slotpool under tsx/);
    expect(r.stderr).not.toMatch(/Unknown file extension/);
  }, 60_000);

  it("view of a file that is not rollout JSONL: exit 1 naming the problem, no page written", async () => {
    const notes = join(dir, "notes.jsonl");
    await writeFile(notes, `{"event": "start"}\n{"event": "stop"}\n`);
    const r = await runCli(["view", notes]);
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/notes\.jsonl is not a slotpool or Atropos JSONL: none of its 2 lines is a scored group or an evaluation sample \(line 1: /);
    expect(existsSync(join(dir, "notes.html"))).toBe(false);
    expect(r.stdout).not.toMatch(/0 trajectories/);
  }, 60_000);
});
