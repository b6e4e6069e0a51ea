/**
 * The env author's kit, end to end on real sandbox slots (local provisioner, bubblewrap):
 * group-level scoring that respects honest results, custom metrics that reach the summary,
 * the JSONL and the report, per-item `maxTurns`, and `computeReward` being abstract.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, assert, beforeAll, describe, expect, it } from "vitest";
import type { AgentResult } from "../../src/agent/agent-loop.js";
import type { OracleScript } from "../../src/agent/oracle-policy.js";
import type { ToolBackend } from "../../src/env/backend.js";
import { AgentEnv, type ScoreResult } from "../../src/env/agent-env.js";
import { AgentEnvConfigSchema } from "../../src/env/config.js";
import type { GroupMember, GroupScore } from "../../src/env/group-score.js";
import { poolBackend } from "../../src/env/pool-backend.js";
import { runProcessMode } from "../../src/env/run-modes/process.js";
import { formatSummary } from "../../src/env/run-modes/summary.js";
import type { ToolContext } from "../../src/env/tool-context.js";
import { silentLogger } from "../../src/observability/logger.js";
import { MetricsRegistry } from "../../src/observability/metrics.js";
import { LocalProvisioner } from "../../src/pool/local-provisioner.js";

const log = silentLogger();
let backend: ToolBackend;
let dir: string;

interface Item {
  id: number;
  /** Per-item turn limit (maxTurnsFor); undefined: the config's. */
  turns?: number;
}

/**
 * Each trajectory writes a file of `n` characters, n its place in the group (the reward reads
 * it back in the slot); the own score is n, a metric records the length. Hooks are swapped
 * per test.
 */
class KitEnv extends AgentEnv<Item> {
  static override envName = "kit-test";
  private next = 0;
  private oracleCalls = 0;
  groupCalls: GroupMember[][] = [];
  groupHook: (members: readonly GroupMember[]) => GroupScore = () => undefined;
  rewardHook: (n: number) => ScoreResult | number = (n) => ({ score: n, metrics: { chars: n } });

  getNextItem(): Item {
    return { id: this.next++ };
  }

  buildTask(item: Item): string {
    return `task ${item.id}`;
  }

  override maxTurnsFor(item: Item): number | undefined {
    return item.turns;
  }

  override oracle(_item: Item): OracleScript {
    const n = this.oracleCalls++ % this.config.groupSize;
    // Writes on turn 1, then keeps listing until maxTurns or turn 4.
    return ({ turn }) => (turn === 1 ? { toolCalls: [{ name: "bash", arguments: { command: `printf '%${n}s' '' > out.txt` } }] } : turn < 4 ? { toolCalls: [{ name: "bash", arguments: { command: "ls" } }] } : { final: "done" });
  }

  async computeReward(_item: Item, _result: AgentResult, ctx: ToolContext): Promise<ScoreResult | number> {
    const r = await ctx.terminal("wc -c < out.txt");
    return this.rewardHook(Number(r.output.trim()));
  }

  override scoreGroup(_item: Item, members: readonly GroupMember[]): GroupScore {
    this.groupCalls.push([...members]);
    return this.groupHook(members);
  }
}

/** Relative rewards: each own score minus the group's mean; the spread as a group metric. */
const relative = (members: readonly GroupMember[]) => {
  const mean = members.reduce((a, m) => a + m.score, 0) / members.length;
  return { scores: members.map((m) => m.score - mean), metrics: { spread: Math.max(...members.map((m) => m.score)) - Math.min(...members.map((m) => m.score)) } };
};

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "slotpool-kit-"));
  backend = await poolBackend(AgentEnvConfigSchema.parse({ pool: { slotsPerContainer: 4, minContainers: 1, maxContainers: 1, acquireTimeoutMs: 30_000 }, executor: { defaultTimeoutS: 30 } }), new LocalProvisioner({ slotsPerContainer: 4 }), log);
});

afterAll(async () => {
  await backend?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe("the env author's kit", () => {
  it("scoreGroup replaces the own scores after each verification; custom metrics reach the summary, the JSONL and the report", async () => {
    const env = new KitEnv({ groupSize: 4, maxTurns: 3 }, { backend, logger: log });
    env.groupHook = relative;
    await env.start();
    const out = join(dir, "kit.jsonl");
    const report = await runProcessMode(env, { out, groups: 2 });
    await env.close();

    expect(report.written).toBe(2);
    expect(env.groupCalls).toHaveLength(2);
    // The hook saw every member's own score and metrics, from computeReward in its slot.
    for (const members of env.groupCalls) {
      expect(members.map((m) => m.score).sort()).toEqual([0, 1, 2, 3]);
      for (const m of members) expect(m.metrics).toEqual({ chars: m.score });
    }
    const lines = (await readFile(report.out, "utf8")).trim().split("\n").map((l) => JSON.parse(l) as { scores: number[]; slotpool: { metrics?: Record<string, number>; trajectories: Array<{ own_score?: number; metrics?: Record<string, number> }> } });
    for (const line of lines) {
      expect([...line.scores].sort((a, b) => a - b)).toEqual([-1.5, -0.5, 0.5, 1.5]);
      expect(line.slotpool.metrics).toEqual({ spread: 3 });
      line.scores.forEach((s, i) => {
        const t = line.slotpool.trajectories[i]!;
        expect(s).toBe(t.own_score! - 1.5);
        expect(t.metrics).toEqual({ chars: t.own_score });
      });
    }
    const summary = formatSummary("kit", report.stats);
    expect(summary).toMatch(/metric chars\s+mean 1\.5 \(min 0 · max 3, 8 trajectories\)/);
    expect(summary).toMatch(/group metric spread\s+mean 3 \(min 3 · max 3, 2 groups\)/);
    expect(report.stats.toJSON().metrics).toEqual({ chars: { mean: 1.5, min: 0, max: 3, count: 8 } });
    const registry = new MetricsRegistry();
    report.stats.registerMetrics(registry);
    expect(registry.render()).toContain('slotpool_env_metric_mean{name="chars",per="trajectory"} 1.5');
    expect(registry.render()).toContain('slotpool_env_metric_mean{name="spread",per="group"} 3');
    const html = await readFile(report.report!.path, "utf8");
    expect(html).toContain("<h2>Metrics</h2>");
    expect(html).toMatch(/<td>chars<\/td><td>trajectory<\/td><td class="num">8<\/td><td class="num">1\.50<\/td>/);
    expect(html).toMatch(/<td>spread<\/td><td>group<\/td><td class="num">2<\/td><td class="num">3<\/td>/);
    expect(html).toContain("group metrics: spread 3");
    expect(html).toContain("metric chars"); // the run panel's row, from the run's own figures
  }, 90_000);

  it("an infra-failed trajectory never reaches scoreGroup (mask); a scoreGroup that throws leaves the group unscored", async () => {
    const env = new KitEnv({ groupSize: 4, maxTurns: 3, infraFailurePolicy: "mask" }, { backend, logger: log });
    env.groupHook = relative;
    // The trajectory that wrote nothing has a reward that fails: an infra failure, not a score.
    env.rewardHook = (n) => {
      if (n === 0) throw new Error("grader crashed");
      return n;
    };
    await env.start();
    const masked = await env.collectTrajectories(env.getNextItem());
    assert(masked.ok, "the masked group is delivered");
    expect(masked.masked).toBe(1);
    expect(env.groupCalls).toHaveLength(1);
    expect(env.groupCalls[0]!.map((m) => m.score).sort()).toEqual([1, 2, 3]);
    expect([...masked.group.scores].sort((a, b) => a - b)).toEqual([-1, 0, 1]);
    expect(masked.infraFailures.map((f) => f.cause)).toEqual(["reward"]);

    // Under "drop", a group with an infra failure is not scored as a group at all.
    const dropEnv = new KitEnv({ groupSize: 4, maxTurns: 3, infraFailurePolicy: "drop", infraRetries: 0 }, { backend, logger: log });
    dropEnv.rewardHook = env.rewardHook;
    await dropEnv.start();
    const dropped = await dropEnv.collectTrajectories(dropEnv.getNextItem());
    expect(dropped.ok).toBe(false);
    expect(dropEnv.groupCalls).toHaveLength(0);

    // A group hook that throws or answers badly: every member is an infra failure (cause reward).
    for (const [hook, message] of [
      [() => { throw new Error("judge unreachable"); }, "scoreGroup threw: judge unreachable"],
      [() => [1, 2], "scoreGroup returned 2 scores for a group of 4"],
      [() => ({ scores: [0, 0, 0, Number.NaN] }), "scoreGroup's score 3 is NaN, not a finite number"],
      [() => ({ metrics: { spread: Number.POSITIVE_INFINITY } }), "scoreGroup's metrics: metric 'spread' is Infinity, not a finite number"],
    ] as Array<[() => GroupScore, string]>) {
      const bad = new KitEnv({ groupSize: 4, maxTurns: 3, infraFailurePolicy: "drop", infraRetries: 0 }, { backend, logger: log });
      bad.groupHook = hook;
      await bad.start();
      const outcome = await bad.collectTrajectories(bad.getNextItem());
      assert(!outcome.ok, message);
      expect(outcome.kind).toBe("infra");
      expect(outcome.infraFailures).toHaveLength(4);
      expect(outcome.infraFailures.every((f) => f.cause === "reward" && f.message === message)).toBe(true);
      expect(outcome.reason).toContain(message);
    }
    await env.close();
    await dropEnv.close();
  }, 120_000);

  it("branching groups: scoreGroup sees every branch, and the tree in the JSONL shows the group's scores", async () => {
    const env = new KitEnv({ groupSize: 3, maxTurns: 3 }, { backend, logger: log });
    Object.assign(env, { branchPoint: () => ({ afterTurn: 1 }) });
    let k = 0;
    env.rewardHook = () => ({ score: k++, metrics: { order: k } });
    env.groupHook = relative;
    await env.start();
    const outcome = await env.collectTrajectories(env.getNextItem());
    await env.close();
    assert(outcome.ok);
    expect(env.groupCalls).toHaveLength(1);
    expect(env.groupCalls[0]!.map((m) => m.score).sort()).toEqual([0, 1, 2]);
    expect([...outcome.group.scores].sort((a, b) => a - b)).toEqual([-1, 0, 1]);
    expect(outcome.metrics).toEqual({ spread: 2 });
    const tree = outcome.trajectories[0]!.branchTree!;
    for (const t of outcome.trajectories) {
      expect(t.ownScore! - 1).toBe(t.score);
      expect(tree.nodes.find((n) => n.trajectory_id === t.trajectoryId)!.score).toBe(t.score);
    }
  }, 60_000);

  it("evaluate: the env's metrics reach metrics.json's figures (metric_<name>: the mean over the samples)", async () => {
    const env = new KitEnv({ groupSize: 2, maxTurns: 3 }, { backend, logger: log });
    Object.assign(env, { getEvalItems: async () => [{ id: 100 }, { id: 101 }] });
    await env.start();
    const result = await env.evaluate();
    await env.close();
    expect(result.samples.map((s) => s.slotpool?.trajectories[0]?.metrics?.["chars"]).sort()).toEqual([0, 1]);
    expect(result.metrics).toMatchObject({ eval_items: 2, eval_failed: 0, metric_chars: 0.5 });
  }, 60_000);

  it("a metric that is not a finite number makes the trajectory an infra failure naming the metric", async () => {
    const env = new KitEnv({ groupSize: 2, maxTurns: 3, infraFailurePolicy: "mask" }, { backend, logger: log });
    env.rewardHook = (n) => ({ score: 1, metrics: n === 0 ? { chars: Number.NaN } : { chars: n } });
    await env.start();
    const outcome = await env.collectTrajectories(env.getNextItem());
    await env.close();
    assert(outcome.ok);
    expect(outcome.group.scores).toEqual([1]);
    expect(outcome.infraFailures).toEqual([expect.objectContaining({ cause: "reward", message: "metric 'chars' is NaN, not a finite number" })]);
  }, 60_000);

  it("per-item maxTurns: an item's own limit overrides the config's, a bad one is refused by name", async () => {
    const env = new KitEnv({ groupSize: 1, maxTurns: 3 }, { backend, logger: log });
    await env.start();
    const short = await env.collectTrajectory({ id: 0, turns: 1 }, env.resolveTools());
    const configured = await env.collectTrajectory({ id: 1 }, env.resolveTools());
    const long = await env.collectTrajectory({ id: 2, turns: 5 }, env.resolveTools());
    await expect(env.collectTrajectory({ id: 3, turns: 0 }, env.resolveTools())).rejects.toThrow("env kit-test: maxTurnsFor(item) must be a positive integer or undefined, got 0");
    await env.close();
    expect([short.result.turnsUsed, short.result.finishReason]).toEqual([1, "max_turns"]);
    expect([configured.result.turnsUsed, configured.result.finishReason]).toEqual([3, "max_turns"]);
    expect([long.result.turnsUsed, long.result.finishReason]).toEqual([4, "stop"]);
  }, 60_000);

  it("computeReward is abstract: an env without it does not compile, and a bare number is still a score", () => {
    // @ts-expect-error -- Non-abstract class 'Forgetful' does not implement inherited abstract member 'computeReward'
    class Forgetful extends AgentEnv<number> {
      getNextItem(): number | null {
        return null;
      }
      buildTask(): string {
        return "";
      }
    }
    expect(typeof Forgetful).toBe("function");
    expect(Object.getOwnPropertyNames(AgentEnv.prototype)).not.toContain("computeReward");
  });
});
