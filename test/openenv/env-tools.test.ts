/**
 * An env with a workspace template and tools of its own (`defineEnvTool`: one in-process, one
 * run in the slot, and its own `submit`) served over OpenEnv: reset puts the episode's slot into
 * the template, the env's tools run as in `process`, the env's `submit` ends the episode, and the
 * final observation carries the reward's metadata and metrics; a reward that cannot be computed
 * is an infrastructure failure, never a score.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { AgentResult } from "../../src/agent/agent-loop.js";
import type { ScoreResult } from "../../src/env/rollout-score.js";
import { AgentEnv } from "../../src/env/agent-env.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { defineEnvTool } from "../../src/env/env-tools.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import type { ToolContext } from "../../src/env/tool-context.js";
import { silentLogger } from "../../src/observability/logger.js";
import { OpenEnvServer } from "../../src/openenv/server.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import type { TemplateSpec } from "../../src/pool/types.js";
import type { ToolDefinition } from "../../src/tools/types.js";
import { WsClient } from "./support.js";

const log = silentLogger();

/** Count the lines of the template's poem; the env's own `submit` records the answer, the reward checks it. */
class PoemEnv extends AgentEnv<{ id: number }> {
  static override envName = "poem";
  private next = 0;
  readonly answers = new Map<string, number>();

  getNextItem() {
    return { id: this.next++ };
  }
  buildTask(): string {
    return "How many lines has poem.txt? Submit the number.";
  }
  override workspaceTemplate(): TemplateSpec {
    return { name: "poem", setup: ["printf 'a\\nb\\nc\\n' > poem.txt"] };
  }
  override envTools(): readonly ToolDefinition[] {
    return [
      defineEnvTool({
        name: "count_lines",
        description: "Count the lines of a file in your workspace.",
        parameters: z.object({ path: z.string().min(1).describe("The file.") }),
        command: ({ path }) => `wc -l < '${path.replaceAll("'", "'\\''")}'`,
      }),
      defineEnvTool({
        name: "submit",
        description: "Submit the line count.",
        parameters: z.object({ answer: z.number().int() }),
        run: async ({ answer }, ctx: ToolContext) => {
          this.answers.set(ctx.trajectoryId, answer);
          return `submitted ${answer}`;
        },
      }),
    ];
  }
  async computeReward(_item: { id: number }, _result: AgentResult, ctx: ToolContext): Promise<ScoreResult> {
    const answer = this.answers.get(ctx.trajectoryId);
    // A negative answer stands for a reward that cannot be computed (its checker is down).
    if (answer !== undefined && answer < 0) throw new Error("the line-count checker is unreachable");
    // Recount in the slot: the metadata says what the reward saw.
    const lines = Number((await ctx.terminal("wc -l < poem.txt")).output.trim());
    return { score: answer === lines ? 1 : 0, metadata: { answer: answer ?? null, lines }, metrics: { off_by: Math.abs((answer ?? 0) - lines) } };
  }
}

let backend: ToolBackend;
let env: PoemEnv;
let server: OpenEnvServer;
let wsUrl: string;

beforeAll(async () => {
  backend = await poolBackend(AgentEnvConfigSchema.parse({ pool: { slotsPerContainer: 2, minContainers: 1, maxContainers: 1 } }), new LocalProvisioner({ slotsPerContainer: 2 }), log);
  env = new PoemEnv({}, { backend, logger: log });
  await env.start();
  server = new OpenEnvServer({ env, logger: log });
  wsUrl = `${(await server.listen(0)).replace(/^http/, "ws")}/ws`;
}, 120_000);

afterAll(async () => {
  await server?.close();
  await env?.close();
  await backend?.close();
});

describe("an env's template and own tools over OpenEnv", () => {
  it("reset resets the slot into the template; the env's in-slot and in-process tools run; its own submit ends the episode with its reward", async () => {
    const c = await WsClient.connect(wsUrl);
    const reset = await c.reset();
    const tools = reset.data.observation.available_tools as Array<{ name: string; input_schema: any }>;
    expect(tools.map((t) => t.name).sort()).toEqual(["bash", "count_lines", "read_file", "submit", "write_file"]);
    // The env's submit, not the server's: its schema is the env's.
    expect(tools.find((t) => t.name === "submit")!.input_schema.required).toEqual(["answer"]);
    const counted = await c.call("count_lines", { path: "poem.txt" });
    expect(counted.data.observation.result.data).toBe("3");
    const done = await c.call("submit", { answer: 3 });
    expect(done.data).toEqual(expect.objectContaining({ done: true, reward: 1 }));
    expect(done.data.observation.result.data).toBe("submitted 3");
    // The final observation carries what computeReward returned beside the score.
    const meta = { finish_reason: "stop", steps: 2, reward_metadata: { answer: 3, lines: 3 }, metrics: { off_by: 0 } };
    expect(done.data.metadata).toEqual(meta);
    expect(done.data.observation.metadata).toEqual(meta);

    await c.reset();
    const wrong = await c.call("submit", { answer: 2 });
    expect(wrong.data).toEqual(expect.objectContaining({ done: true, reward: 0 }));
    expect(wrong.data.metadata).toEqual(expect.objectContaining({ reward_metadata: { answer: 2, lines: 3 }, metrics: { off_by: 1 } }));
    await c.close();
  });

  it("a reward that cannot be computed is an EXECUTION_ERROR saying it is an infrastructure failure, with no reward; the slot is released", async () => {
    const c = await WsClient.connect(wsUrl);
    await c.reset();
    const failed = await c.call("submit", { answer: -1 });
    expect(failed).toEqual({
      type: "error",
      data: expect.objectContaining({ code: "EXECUTION_ERROR", infra_failure: true, cause: "reward", message: expect.stringMatching(/^infrastructure failure \(reward\).*checker is unreachable.*no reward/) }),
    });
    expect((await c.send({ type: "state" })).data).toEqual(expect.objectContaining({ done: true, reward: null }));
    expect(backend.poolStats!().slots.free).toBe(2);
    await c.close();
  });
});
