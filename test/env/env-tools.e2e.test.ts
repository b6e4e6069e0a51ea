/**
 * Env-defined tools through the tool table, end to end on real sandbox servers (local
 * provisioner, bubblewrap): an in-process `submit` (runs in the env's process with the
 * trajectory's ToolContext) and an in-slot `count_lines` (a command run in the trajectory's
 * slot), offered to the model beside the built-ins, routed by the registry, and their results
 * in the transcript and the process-mode JSONL like a built-in's.
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { AgentResult } from "../../src/agent/agent-loop.js";
import type { OracleScript } from "../../src/agent/oracle-policy.js";
import type { OpenAIFunctionTool } from "../../src/agent/messages.js";
import { AgentEnv } from "../../src/env/agent-env.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { defineEnvTool } from "../../src/env/env-tools.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { runProcessMode } from "../../src/env/run-modes/process.js";
import type { ToolContext } from "../../src/env/tool-context.js";
import { silentLogger } from "../../src/observability/logger.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import { DuplicateToolError, InvalidToolDefinitionError } from "../../src/tools/errors.js";
import type { ToolDefinition } from "../../src/tools/types.js";

const log = silentLogger();

interface Item {
  id: number;
}

/** Each trajectory writes three lines, counts them with the env's in-slot tool and submits the count. */
class SubmitEnv extends AgentEnv<Item> {
  static override envName = "env-tools-test";
  private next = 0;
  /** What `submit` saw, by trajectory: the answer and the file as the ToolContext read it in the slot. */
  readonly submitted = new Map<string, { answer: number; file: string }>();
  /** The tools the model was offered on its first turn. */
  offered: readonly OpenAIFunctionTool[] = [];

  override envTools(): readonly ToolDefinition[] {
    return [
      defineEnvTool({
        name: "submit",
        description: "Submit your final answer: the number of lines of lines.txt.",
        parameters: z.object({ answer: z.number().int().describe("The line count.") }),
        run: async ({ answer }, ctx: ToolContext) => {
          const file = await ctx.readFile("lines.txt");
          this.submitted.set(ctx.trajectoryId, { answer, file: file.content });
          return `submitted ${answer}`;
        },
      }),
      defineEnvTool({
        name: "count_lines",
        description: "Count the lines of a file in your workspace.",
        parameters: z.object({ path: z.string().min(1).describe("The file.") }),
        command: ({ path }) => `wc -l < '${path.replaceAll("'", "'\\''")}'`,
      }),
    ];
  }

  getNextItem(): Item {
    return { id: this.next++ };
  }

  buildTask(): string {
    return "Write three lines to lines.txt, count them, submit the count.";
  }

  override async computeReward(_item: Item, _result: AgentResult, ctx: ToolContext): Promise<number> {
    return this.submitted.get(ctx.trajectoryId)?.answer === 3 ? 1 : 0;
  }

  override oracle(): OracleScript {
    return ({ turn, tools, messages }) => {
      if (turn === 1) {
        this.offered = tools;
        return {
          toolCalls: [
            { name: "bash", arguments: { command: "printf 'a\\nb\\nc\\n' > lines.txt" } },
            { name: "count_lines", arguments: { path: "lines.txt" } },
            { name: "no_such_tool", arguments: {} },
          ],
        };
      }
      if (turn === 2) {
        const counted = JSON.parse(messages.filter((m) => m.role === "tool")[1]!.content as string) as { output: string };
        return { toolCalls: [{ name: "submit", arguments: { answer: Number(counted.output.trim()), allow_network: true } }] };
      }
      return { final: "done" };
    };
  }
}

let backend: ToolBackend;
let dir: string;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "slotpool-env-tools-"));
  const provisioner = new LocalProvisioner({ slotsPerContainer: 2 });
  backend = await poolBackend(AgentEnvConfigSchema.parse({ slotsPerContainer: 2, minContainers: 1, maxContainers: 1, acquireTimeoutMs: 30_000, toolTimeoutS: 30 }), provisioner, log);
}, 90_000);

afterAll(async () => {
  await backend?.close();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("env-defined tools", () => {
  it("an in-process submit and an in-slot count_lines are offered, routed and written to the JSONL like built-ins", async () => {
    const env = new SubmitEnv({ groupSize: 2, maxTurns: 4 }, { backend, logger: log });
    await env.start();
    const out = join(dir, "run.jsonl");
    const report = await runProcessMode(env, { out, groups: 1, report: false });
    await env.close();

    // Offered beside the enabled toolsets' built-ins, with the schema the model reads.
    const names = env.offered.map((t) => t.function.name);
    expect(names).toEqual(["bash", "read_file", "write_file", "submit", "count_lines"]);
    const submit = env.offered.find((t) => t.function.name === "submit")!;
    expect(submit.function.parameters).toMatchObject({ type: "object", properties: { answer: { type: "integer", description: "The line count." } }, required: ["answer"] });

    // The in-process tool ran with a ToolContext on the trajectory's own slot (it read the agent's file).
    expect(env.submitted.size).toBe(2);
    for (const s of env.submitted.values()) expect(s).toEqual({ answer: 3, file: "a\nb\nc\n" });

    expect(report.written).toBe(1);
    const line = JSON.parse(readFileSync(report.out, "utf8").trim()) as { scores: number[]; messages: Array<Array<{ role: string; name?: string; content: string }>> };
    expect(line.scores).toEqual([1, 1]);
    for (const conversation of line.messages) {
      const tool = (name: string) => JSON.parse(conversation.find((m) => m.role === "tool" && m.name === name)!.content) as { output: string; exit_code?: number; error?: string };
      // The in-slot tool ran in the slot as a shell command: its exit code and output came back.
      expect(tool("count_lines")).toEqual({ output: "3", exit_code: 0 });
      expect(tool("submit")).toEqual({ output: "submitted 3" });
      // An unknown name is an error result naming the tools the model may call, env tools included.
      expect(tool("no_such_tool").error).toMatch(/unknown tool 'no_such_tool'; available tools: .*count_lines.*submit/);
    }
  }, 120_000);

  it("an env tool run in the slot gets bash's isolation arguments from the config (network off), whatever the model asks", async () => {
    const env = new SubmitEnv({ groupSize: 1, maxTurns: 2 }, { backend, logger: log });
    await env.start();
    const tid = "env-tools-policy";
    const r = await backend.executor.execute(tid, { name: "count_lines", arguments: { path: "/etc/hostname", allow_network: true } });
    await backend.executor.release(tid);
    await env.close();
    expect(r.metadata["sandboxed"]).toBe(true);
    expect(r.metadata["network_isolated"]).toBe(true);
  }, 60_000);

  it("two envs on one backend may not both hold a tool name: the second start names the clash; after close the name is free", async () => {
    const first = new SubmitEnv({ groupSize: 1 }, { backend, logger: log });
    await first.start();
    const second = new SubmitEnv({ groupSize: 1 }, { backend, logger: log });
    await expect(second.start()).rejects.toThrow(/env tool 'submit': the name 'submit' is already taken by the in-process tool 'submit' in this backend's registry/);
    await first.close();
    expect(backend.registry.has("submit")).toBe(false);
    expect(backend.registry.has("count_lines")).toBe(false);
    const third = new SubmitEnv({ groupSize: 1 }, { backend, logger: log });
    await third.start();
    expect(backend.registry.has("submit")).toBe(true);
    await third.close();
  });

  it("an in-process tool called through the executor gets a clear error instead of running", async () => {
    const env = new SubmitEnv({ groupSize: 1 }, { backend, logger: log });
    await env.start();
    const r = await backend.executor.execute("env-tools-direct", { name: "submit", arguments: { answer: 3 } });
    await backend.executor.release("env-tools-direct");
    await env.close();
    expect(r.success).toBe(false);
    expect(r.error).toMatch(/tool 'submit' runs in the env's own process/);
  });
});

describe("defining env tools", () => {
  const parameters = z.object({});

  it("a name or alias of a built-in tool is refused where the tool is defined", () => {
    expect(() => defineEnvTool({ name: "bash", description: "", parameters, command: () => "true" })).toThrow(DuplicateToolError);
    expect(() => defineEnvTool({ name: "terminal", description: "", parameters, run: () => "x" })).toThrow(/the name 'terminal' is the built-in tool 'bash''s alias; pick another name/);
    expect(() => defineEnvTool({ name: "finish", aliases: ["read_file"], description: "", parameters, run: () => "x" })).toThrow(/built-in tool 'read_file'/);
  });

  it("needs exactly one of run (in-process) or command (in the slot), and a valid name", () => {
    expect(() => defineEnvTool({ name: "neither", description: "", parameters } as never)).toThrow(InvalidToolDefinitionError);
    expect(() => defineEnvTool({ name: "both", description: "", parameters, run: () => "x", command: () => "true" } as never)).toThrow(/exactly one of run/);
    expect(() => defineEnvTool({ name: "has space", description: "", parameters, run: () => "x" })).toThrow(InvalidToolDefinitionError);
  });
});
