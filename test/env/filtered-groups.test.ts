import { Writable } from "node:stream";
import { afterEach, describe, expect, it } from "vitest";
import { AtroposClient } from "../../src/env/atropos/client.js";
import { runEnvManager } from "../../src/env/atropos/env-manager.js";
import { FILTERED_WARNING_AFTER, FilteredStreak, filterGroupForSend } from "../../src/env/atropos/group-filter.js";
import { ProgressBar } from "../../src/env/run-modes/progress.js";
import { RunStats } from "../../src/env/run-stats.js";
import type { ScoredDataGroup } from "../../src/env/scored-group.js";
import { createLogger, silentLogger } from "../../src/observability/logger.js";
import { startAtroposDouble, type AtroposDouble } from "../support/atropos-double.js";
import { startLlmServer, taskOf, turnOf, type LlmServer } from "../support/llm-server.js";
import { fakeBackend } from "./support/fake-backend.js";
import { WriteFileEnv } from "./support/counting-env.js";

/**
 * A run whose groups are all filtered sends nothing (issue 10: `serve` ran 198 s and 8,100
 * trajectories against a trainer without sending one group, because an oracle solved
 * everything and ensureScoresAreNotSame dropped every group). It must say so early, naming
 * the reason and the switch, and the progress line shows sent/filtered counts.
 */
let api: AtroposDouble | undefined;
let llm: LlmServer | undefined;
afterEach(async () => {
  await api?.close();
  await llm?.close();
  api = undefined;
  llm = undefined;
});

const sameScores: ScoredDataGroup = { tokens: [[1], [2]], masks: [[1], [2]], scores: [1, 1] };
const differing: ScoredDataGroup = { ...sameScores, scores: [1, 0] };
const filters = { groupSize: 2, ensureScoresAreNotSame: true, dropOverLength: false, includeMessages: false };

describe("the all-filtered warning", () => {
  it(`comes after ${FILTERED_WARNING_AFTER} filtered groups in a row, again at 10x, and names the reason and the switch`, () => {
    const streak = new FilteredStreak();
    const warnings: Array<[number, string]> = [];
    for (let i = 1; i <= 40; i++) {
      const w = streak.observe(filterGroupForSend(sameScores, filters));
      if (w) warnings.push([i, w]);
    }
    expect(warnings.map(([i]) => i)).toEqual([FILTERED_WARNING_AFTER, FILTERED_WARNING_AFTER * 10]);
    expect(warnings[0]![1]).toContain("the last 3 groups were all filtered, none delivered");
    expect(warnings[0]![1]).toContain("all 2 scores are equal (1)");
    expect(warnings[0]![1]).toContain('"ensureScoresAreNotSame": false');
    expect(warnings[0]![1]).toContain("--config FILE");
  });

  it("is not given while groups get through", () => {
    const streak = new FilteredStreak();
    for (let i = 0; i < 20; i++) {
      expect(streak.observe(filterGroupForSend(sameScores, filters))).toBeUndefined();
      expect(streak.observe(filterGroupForSend(sameScores, filters))).toBeUndefined();
      expect(streak.observe(filterGroupForSend(differing, filters))).toBeUndefined();
    }
  });

  it("the progress line shows sent and filtered counts", () => {
    const chunks: string[] = [];
    const stream = new Writable({
      write(c, _e, cb) {
        chunks.push(String(c));
        cb();
      },
    });
    const stats = new RunStats();
    stats.groups = 5;
    stats.sentGroups = 1;
    stats.filteredGroups = 4;
    new ProgressBar("serve x", undefined, stream as unknown as NodeJS.WriteStream, "sent").update(stats);
    expect(chunks[0]).toContain("· sent 1 · filtered 4");
  });
});

describe("serve against a trainer with a model that solves every task", () => {
  it("warns after the first few groups that nothing is sent, and why", async () => {
    api = await startAtroposDouble();
    await api.registerTrainer({ batch_size: 4, max_token_len: 100_000, num_steps: 100 });
    await api.getBatch();
    // Always right: every group scores [1, 1].
    llm = await startLlmServer({
      tokenIds: true,
      respond: (body) => {
        const m = /create (\S+) containing exactly '([^']*)'/.exec(taskOf(body))!;
        return turnOf(body) > 1 ? { text: "done" } : { toolCalls: [{ name: "bash", arguments: { command: `printf '%s' '${m[2]}' > ${m[1]}` } }] };
      },
    });
    const lines: Array<{ level: number; msg: string; sent?: number; filtered?: number }> = [];
    const logger = createLogger({
      name: "test",
      level: "warn",
      destination: new Writable({
        write(c, _e, cb) {
          for (const l of String(c).split("\n").filter(Boolean)) lines.push(JSON.parse(l));
          cb();
        },
      }),
    });
    const env = new WriteFileEnv({ name: "wf", groupSize: 2, groupConcurrency: 1, model: { url: llm.url, name: "m" } }, { backend: fakeBackend(), logger: silentLogger() });
    await env.start();
    const client = new AtroposClient({ url: api.url });
    const stats = new RunStats();
    const controller = new AbortController();
    const run = runEnvManager(env as never, client, { logger, stats, pollMs: 10, signal: controller.signal });
    const deadline = Date.now() + 20_000;
    while (!lines.some((l) => l.level === 40) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    controller.abort();
    // Aborting may land mid-request (then the manager rejects with the abort): either way it stopped.
    const report = await run.catch((err: unknown) => {
      if (!controller.signal.aborted) throw err;
      return undefined;
    });
    await client.close();
    await env.close();
    const warning = lines.find((l) => l.level === 40);
    expect(warning, "a warning once the first groups were all filtered").toBeDefined();
    expect(warning!.msg).toMatch(/the last 3 groups were all filtered, none delivered: all 2 scores are equal .*ensureScoresAreNotSame/);
    expect(warning).toMatchObject({ sent: 0, filtered: 3 });
    if (report) expect(report.sent).toBe(0);
    expect(stats.sentGroups).toBe(0);
    expect(stats.filteredGroups).toBeGreaterThanOrEqual(3);
    expect(api.requests.filter((r) => r.path.startsWith("/scored_data"))).toHaveLength(0);
  });
});
