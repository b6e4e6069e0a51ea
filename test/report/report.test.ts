/**
 * The report from JSONL: Atropos process-mode lines (no extras), slotpool lines (extras),
 * evaluation samples, bad lines; escaping; the size bound; the seeds' tool-error format.
 */
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReportBuilder, readReportModel, renderReport, reportPathFor, writeReport } from "../../src/report/index.js";
import { displayArguments, escapeHtml } from "../../src/report/html.js";
import { histogram } from "../../src/report/run-summary.js";
import { textCap } from "../../src/report/text-budget.js";
import { formatToolErrorLine, toolLatencyTable } from "../../src/report/tool-stats.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "report-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const call = (id: string, name: string, args: Record<string, unknown>) => ({ id, type: "function", function: { name, arguments: JSON.stringify(args) } });

/** A line as Atropos's process mode writes it: tokens, masks, scores, messages, nothing of ours. */
const atroposLine = {
  tokens: [[1, 2, 3], [4, 5]],
  masks: [[-100, 2, 3], [-100, 5]],
  scores: [1.0, -0.5],
  advantages: null,
  ref_logprobs: null,
  messages: [
    [
      { role: "system", content: "Be brief." },
      { role: "user", content: "What is 2+2?" },
      { role: "assistant", content: "<think>Add them.</think>4" },
    ],
    [
      { role: "user", content: [{ type: "text", text: "What is 3+3?" }] },
      { role: "assistant", content: "7" },
    ],
  ],
  overrides: null,
  group_overrides: null,
  images: null,
};

/** A line as slotpool's process mode writes it, with a failed tool call and the extras. */
const slotpoolLine = {
  tokens: [[]],
  masks: [[]],
  scores: [0],
  messages: [
    [
      { role: "user", content: "Read the notes." },
      { role: "assistant", content: null, reasoning_content: "Look first.", tool_calls: [call("c1", "bash", { command: "cat notes.txt" })] },
      { role: "tool", tool_call_id: "c1", name: "bash", content: JSON.stringify({ output: "cat: notes.txt: No such file or directory\n", exit_code: 1, error: "Exit code: 1" }) },
      { role: "assistant", content: null, tool_calls: [call("c2", "write_file", { path: "a.txt", content: "one\ntwo\n" })] },
      { role: "tool", tool_call_id: "c2", name: "write_file", content: JSON.stringify({ output: "Wrote 8 bytes", exit_code: 0 }) },
      { role: "assistant", content: "Done." },
    ],
  ],
  slotpool: {
    version: 1,
    trajectories: [
      {
        trajectory_id: "t-1",
        finish_reason: "stop",
        turns_used: 3,
        duration_ms: 2500,
        attempts: 2,
        slot_losses: ["container died"],
        tool_calls: [
          { turn: 1, tool: "bash", call_id: "c1", duration_ms: 812.5, success: false, exit_code: 1 },
          { turn: 2, tool: "write_file", call_id: "c2", duration_ms: 20, success: true, exit_code: 0 },
        ],
        tool_errors: [{ turn: 1, tool: "bash", arguments: '{"command":"cat notes.txt"}', error: "Exit code: 1" }],
      },
    ],
  },
};

function modelOf(lines: string[]) {
  const b = new ReportBuilder();
  lines.forEach((l, i) => b.addLine(l, i + 1));
  return b.build("t", "run.jsonl");
}

describe("reading JSONL", () => {
  it("an Atropos process-mode line renders from its messages alone: roles, thinking split out, token counts", () => {
    const m = modelOf([JSON.stringify(atroposLine)]);
    expect(m.skipped).toEqual([]);
    const [a, b] = m.groups[0]!.trajectories;
    expect(a!.score).toBe(1);
    expect(a!.tokenCount).toBe(3);
    expect(a!.entries).toEqual([
      { kind: "text", role: "system", turn: 0, text: "Be brief." },
      { kind: "text", role: "user", turn: 0, text: "What is 2+2?" },
      { kind: "thinking", turn: 1, text: "Add them." },
      { kind: "text", role: "assistant", turn: 1, text: "4" },
    ]);
    expect(b!.entries![0]).toMatchObject({ role: "user", text: "What is 3+3?" });
    expect(b!.durationMs).toBeUndefined();
    const html = renderReport(m).html;
    expect(html).toContain("group 0 · trajectory 1");
    expect(html).toContain("What is 3+3?");
  });

  it("a slotpool line pairs results with calls and takes timings, exit codes, errors and slot losses from the extras", () => {
    const m = modelOf([JSON.stringify(slotpoolLine)]);
    const t = m.groups[0]!.trajectories[0]!;
    expect(t.durationMs).toBe(2500);
    expect(t.slotLosses).toEqual(["container died"]);
    expect(t.toolCalls.map((c) => [c.tool, c.turn, c.durationMs, c.exitCode, c.success])).toEqual([
      ["bash", 1, 812.5, 1, false],
      ["write_file", 2, 20, 0, true],
    ]);
    const result = t.entries!.find((e) => e.kind === "result")!;
    expect(result).toMatchObject({ tool: "bash", exitCode: 1, error: "Exit code: 1", durationMs: 812.5, output: "cat: notes.txt: No such file or directory\n" });
    expect(t.toolErrors).toEqual([{ turn: 1, tool: "bash", arguments: '{"command":"cat notes.txt"}', error: "Exit code: 1" }]);
    const html = renderReport(m).html;
    // The conversation goes to the page as data: [kind, turn, tool, exit code, ms, error, output].
    expect(html).toContain('["r",1,"bash",1,812.5,"Exit code: 1","cat: notes.txt: No such file or directory\\n"]');
    expect(html).toContain("[turn 1] bash({&quot;command&quot;:&quot;cat notes.txt&quot;}) -&gt; Exit code: 1");
    expect(html).toContain('data-err="1"');
  });

  it("without extras, tool errors come from the results that carry one", () => {
    const { slotpool: _drop, ...plain } = slotpoolLine;
    const t = modelOf([JSON.stringify(plain)]).groups[0]!.trajectories[0]!;
    expect(t.toolErrors).toEqual([{ turn: 1, tool: "bash", arguments: '{"command":"cat notes.txt"}', error: "Exit code: 1" }]);
    expect(t.toolCalls[0]!.durationMs).toBeUndefined();
  });

  it("evaluation samples are one-trajectory groups; bad lines are listed with the reason, not fatal", () => {
    const sample = { item: { id: 7 }, score: 1, finishReason: "stop", turnsUsed: 1, toolCalls: 0, toolErrors: 0, messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "hello" }] };
    const m = modelOf([JSON.stringify(sample), "{not json", "[1,2]", JSON.stringify({ foo: 1 }), ""]);
    expect(m.groups).toHaveLength(1);
    expect(m.groups[0]).toMatchObject({ kind: "sample", item: '{"id":7}' });
    expect(m.groups[0]!.trajectories[0]!.finishReason).toBe("stop");
    expect(m.skipped.map((s) => s.line)).toEqual([2, 3, 4]);
    expect(m.skipped[0]!.reason).toMatch(/^not JSON/);
    expect(renderReport(m).html).toContain("line 4: neither a scored group");
  });

  it("a missing file is a clear error; the report of a file goes beside it", async () => {
    await expect(readReportModel(join(dir, "nope.jsonl"))).rejects.toThrow(/cannot read .*nope\.jsonl/);
    await expect(readReportModel(dir)).rejects.toThrow(/cannot read/);
    expect(reportPathFor("data/run.jsonl")).toBe(join("data", "run.html"));
    const path = join(dir, "two.jsonl");
    await writeFile(path, `${JSON.stringify(atroposLine)}\n${JSON.stringify(slotpoolLine)}\n`);
    const r = await writeReport(path);
    expect(r.path).toBe(join(dir, "two.html"));
    expect(r.summary).toMatchObject({ groups: 2, trajectories: 3, toolCalls: 2, toolErrors: 1, slotLosses: 1, retries: 1 });
  });
});

describe("escaping", () => {
  it("model output, tool names, arguments, errors and roles stay text: the only script is the report's own", () => {
    const evil = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    const line = {
      scores: [1],
      messages: [
        [
          { role: `user"><script>alert(3)</script>`, content: evil },
          { role: "assistant", content: evil, tool_calls: [call("x", `sh<script>`, { command: evil })] },
          { role: "tool", tool_call_id: "x", content: JSON.stringify({ output: evil, error: evil }) },
        ],
      ],
      slotpool: { version: 1, trajectories: [{ finish_reason: evil, slot_losses: [evil], reward_error: evil, score_metadata: { note: evil } }] },
    };
    const html = renderReport(modelOf([JSON.stringify(line)])).html;
    // Two script elements: the trajectory's data and the report's own code; nothing else opens or closes one.
    expect(html.match(/<script[^>]*>/g)).toEqual(['<script type="application/json">', "<script>"]);
    expect(html.match(/<\/script/g)).toHaveLength(2);
    expect(html).not.toContain("<img");
    // In markup, escaped as HTML; in the data, without a single '<'.
    expect(html).toContain("slot lost: &lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;");
    expect(html).toContain("\\u003cscript>alert(1)\\u003c/script>\\u003cimg src=x onerror=alert(2)>");
    expect(html).toMatch(/Content-Security-Policy" content="default-src 'none'; [^"]*script-src 'sha256-[A-Za-z0-9+/=]+'/);
    expect(escapeHtml(`&<>"'`)).toBe("&amp;&lt;&gt;&quot;&#39;");
  });
});

describe("size", () => {
  it("texts are cut longest first to fit the budget; the cut names the JSONL line", () => {
    expect(textCap([10, 20, 30], 100)).toBe(Infinity);
    expect(textCap([10, 20, 1000], 100)).toBe(70);
    expect(textCap([500, 500], 100)).toBe(50);
    const big = "x".repeat(200_000);
    const line = { scores: [1], messages: [[{ role: "user", content: "short" }, { role: "assistant", content: big }]] };
    const r = renderReport(modelOf(["", JSON.stringify(line)]), { textBudget: 10_000 });
    expect(r.textCap).toBeLessThan(10_000);
    expect(r.bytes).toBeLessThan(30_000); // the page itself (style, script) is about 13 KB
    // The cut text goes to the page as [kept, characters dropped].
    expect(r.html).toContain(`["x",1,"assistant",["${"x".repeat(r.textCap)}",${200_000 - r.textCap}]]`);
    expect(r.html).toContain('["x",0,"user","short"]');
  });

  it("a page over maxBytes is rendered again with a smaller budget", () => {
    const lines = Array.from({ length: 20 }, () => JSON.stringify({ scores: [1], messages: [[{ role: "assistant", content: "y".repeat(50_000) }]] }));
    const r = renderReport(modelOf(lines), { maxBytes: 200_000 });
    expect(r.bytes).toBeLessThanOrEqual(200_000);
  });
});

describe("summaries", () => {
  it("tool errors in the seeds' format: arguments cut to 80, error to 150, one line", () => {
    expect(formatToolErrorLine({ turn: 3, tool: "bash", arguments: '{"command": "ls /nope"}', error: "Exit code: 2\nls: cannot access" })).toBe(
      '[turn 3] bash({"command": "ls /nope"}) -> Exit code: 2 ls: cannot access',
    );
    const long = formatToolErrorLine({ turn: 1, tool: "t", arguments: "a".repeat(100), error: "e".repeat(200) });
    expect(long).toBe(`[turn 1] t(${"a".repeat(80)}) -> ${"e".repeat(150)}`);
  });

  it("tools slowest first by p99; scores binned per value when few, in ranges when many", () => {
    const rows = toolLatencyTable([
      { tool: "fast", success: true, durationMs: 1 },
      { tool: "slow", success: false, durationMs: 900 },
      { tool: "slow", success: true, durationMs: 100 },
    ]);
    expect(rows.map((r) => [r.tool, r.calls, r.errors, r.max])).toEqual([
      ["slow", 2, 1, 900],
      ["fast", 1, 0, 1],
    ]);
    expect(histogram([0, 1, 1, 0, 1]).map((b) => [b.label, b.count])).toEqual([
      ["0", 2],
      ["1", 3],
    ]);
    const many = histogram(Array.from({ length: 100 }, (_, i) => i / 99));
    expect(many).toHaveLength(10);
    expect(many.reduce((a, b) => a + b.count, 0)).toBe(100);
  });

  it("arguments read as key: value lines, a file's content as the file", () => {
    expect(displayArguments('{"path":"a.sh","content":"#!/bin/sh\\necho hi\\n"}')).toBe("path: a.sh\ncontent:\n#!/bin/sh\necho hi\n");
    expect(displayArguments("not json")).toBe("not json");
  });
});
