/** The end-of-run table: tool errors per turn in the seeds' format, and the slowest tools. */
import { describe, expect, it } from "vitest";
import type { AgentResult } from "../../src/agent/agent-loop.js";
import { formatSummary } from "../../src/env/run-modes/summary.js";
import { RunStats } from "../../src/env/run-stats.js";
import type { TrajectoryOutcome } from "../../src/env/scored-group.js";

function outcome(calls: Array<[string, number, boolean]>, errors: AgentResult["toolErrors"]): TrajectoryOutcome {
  const result: AgentResult = {
    messages: [],
    turnsUsed: 2,
    finishReason: "stop",
    finalResponse: "",
    toolCalls: calls.map(([tool, durationMs, success], i) => ({ turn: i + 1, tool, arguments: "{}", success, durationMs })),
    toolErrors: errors,
    usage: { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 },
    turns: [],
  };
  return { trajectoryId: "t", result, score: errors.length ? 0 : 1, rewardSkipped: false, scoreMetadata: {}, attempts: 1, slotLosses: [], tokens: null };
}

describe("formatSummary", () => {
  it("lists tool errors as [turn N] tool(args) -> error, and the tools slowest first", () => {
    const stats = new RunStats();
    stats.addTrajectory(outcome([["bash", 1200, false], ["read_file", 5, true]], [{ turn: 1, tool: "bash", arguments: '{"command":"ls /nope"}', error: "Exit code: 2", toolResult: "" }]));
    stats.addTrajectory(outcome([["read_file", 7, true]], []));
    const table = formatSummary("t", stats);
    expect(table).toContain('tool errors:\n  [turn 1] bash({"command":"ls /nope"}) -> Exit code: 2\n');
    expect(table).toMatch(/slowest tools:\n\s+tool\s+calls\s+errors\s+p50\s+p99\s+max\n\s+bash\s+1\s+1\s+1\.20 s\s+1\.20 s\s+1\.20 s\n\s+read_file\s+2\s+0\s+5\.0 ms\s+7\.0 ms\s+7\.0 ms\n/);
  });

  it("shows the first ten tool errors and counts the rest", () => {
    const stats = new RunStats();
    const errors = Array.from({ length: 12 }, (_, i) => ({ turn: i + 1, tool: "bash", arguments: "{}", error: `e${i}`, toolResult: "" }));
    stats.addTrajectory(outcome([], errors));
    const table = formatSummary("t", stats);
    expect(table).toContain("[turn 10] bash({}) -> e9\n  … and 2 more\n");
    expect(table).not.toContain("e10");
  });
});
