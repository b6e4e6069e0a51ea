/**
 * Issue 29, end to end beyond `bash` (real sandbox servers, local provisioner, bubblewrap):
 * the agent's terminal (`bash_stateful`) cut off by a reset of its slot from outside, and the
 * reward's `ToolContext.archive` cut off the same way, are infra failures (`command_killed`)
 * at the tool and reward stages: the group is dropped and its item tried again, never
 * written with a zero, never shown to the policy; the run's stats count them by cause and stage.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { OracleScript } from "../../src/agent/oracle-policy.js";
import { AgentEnv } from "../../src/env/agent-env.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { runProcessMode } from "../../src/env/run-modes/process.js";
import type { ToolContext } from "../../src/env/tool-context.js";
import { ToolContextInfraError } from "../../src/env/errors.js";
import { silentLogger } from "../../src/observability/logger.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";
import type { ToolExecutor } from "../../src/executor/tool-executor.js";

const log = silentLogger();

interface Item {
  n: number;
}

let backend: ToolBackend;
let dir: string;
let faults: string;
const savedFaultsDir = process.env["SLOTPOOL_TEST_FAULTS_DIR"];

/**
 * Item 0: the agent's one terminal call is reset from outside 300 ms in (an injected fault,
 * src/sandbox/tools/test-faults.ts). Item 1: on its first attempt the reward archives a
 * large file and the test, as an operator would, resets the slot meanwhile. Every other
 * attempt runs whole, and scores 1 only if the terminal call wrote the item's number.
 */
class TerminalEnv extends AgentEnv<Item> {
  static override envName = "infra-surfaces";
  private next = 0;
  private archiveCut = false;
  /** Every tool result the policy was shown. */
  readonly shown: string[] = [];
  /** What the reward's archive threw when cut off. */
  rewardError: unknown;

  override async getNextItem(): Promise<Item> {
    return { n: this.next++ };
  }

  override buildTask(item: Item): string {
    return `write ${item.n} to out.txt`;
  }

  override oracle(item: Item): OracleScript {
    return ({ turn, messages }) => {
      if (turn > 1) this.shown.push(String(messages[messages.length - 1]!.content));
      return turn === 1 ? { toolCalls: [{ name: "bash_stateful", arguments: { command: `echo ${item.n} > out.txt; sleep 1 # term-${item.n}` } }] } : { final: "done" };
    };
  }

  override async computeReward(item: Item, _result: unknown, ctx: ToolContext): Promise<number> {
    if (item.n === 1 && !this.archiveCut) {
      this.archiveCut = true;
      await ctx.terminal("truncate -s 900M big1.bin && truncate -s 900M big2.bin");
      // The pool backend's executor is a ToolExecutor: the lease of the trajectory's slot, reset beside the reward's call.
      const slot = (backend.executor as ToolExecutor).slotOf(ctx.trajectoryId)!;
      setTimeout(() => void slot.reset().catch(() => undefined), 400);
      try {
        await ctx.archive(".");
      } catch (err) {
        this.rewardError = err;
        throw err;
      }
    }
    const out = await ctx.downloadFile("out.txt");
    return out.toString("utf8").trim() === String(item.n) ? 1 : 0;
  }
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "slotpool-infra-surfaces-"));
  faults = join(dir, "faults");
  mkdirSync(faults);
  // Read by the sandbox servers the local provisioner starts (they inherit this process's environment).
  process.env["SLOTPOOL_TEST_FAULTS_DIR"] = faults;
  const provisioner = new LocalProvisioner({ slotsPerContainer: 2 });
  backend = await poolBackend(AgentEnvConfigSchema.parse({ pool: { slotsPerContainer: 2, minContainers: 1, maxContainers: 1, acquireTimeoutMs: 30_000 }, executor: { defaultTimeoutS: 60 } }), provisioner, log);
}, 90_000);

afterAll(async () => {
  await backend?.close();
  if (savedFaultsDir === undefined) delete process.env["SLOTPOOL_TEST_FAULTS_DIR"];
  else process.env["SLOTPOOL_TEST_FAULTS_DIR"] = savedFaultsDir;
  if (dir) rmSync(dir, { recursive: true, force: true });
});

describe("infra failures on the terminal and the reward's artifact calls", () => {
  it("a terminal call and a reward's archive cut off by an outside reset: command_killed, dropped and retried, never scored or shown", async () => {
    writeFileSync(join(faults, "f0"), "reset term-0");
    const env = new TerminalEnv({ groupSize: 1, maxTurns: 3, tools: { enabled: ["default", "stateful"] } }, { backend, logger: log });
    await env.start();
    const out = join(dir, "run.jsonl");
    const report = await runProcessMode(env, { out, groups: 2, report: false });
    await env.close();

    expect(report.written).toBe(2);
    const lines = readFileSync(report.out, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { scores: number[]; slotpool: { dropped_attempts: number; infra_failures: Record<string, number> } });
    for (const l of lines) {
      expect(l.scores, "an infra failure is never written as a score").toEqual([1]);
      expect(l.slotpool.dropped_attempts).toBe(1);
      expect(l.slotpool.infra_failures["command_killed"]).toBe(1);
    }
    expect(report.stats.infraFailures.command_killed).toBe(2);
    expect(report.stats.infraFailuresByStage).toMatchObject({ tool: 1, reward: 1 });
    expect(report.stats.infraFailures.reward_tool).toBe(0);
    expect(report.stats.infraFailures.reward).toBe(0);
    expect(env.rewardError).toBeInstanceOf(ToolContextInfraError);
    expect((env.rewardError as ToolContextInfraError).infraCause).toBe("command_killed");
    // The policy saw only whole results: never the cut-off call's error.
    expect(env.shown.join("\n")).not.toMatch(/cut off|reset from outside|command killed/);
  }, 180_000);
});
