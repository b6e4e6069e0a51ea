/**
 * Report benchmark: a 1,000-trajectory JSONL (250 groups of 4, process-mode lines with token
 * lists and slotpool's extras; long reasoning, big file writes, 5 % of tool outputs 100 KB
 * logs, tool errors in a fifth of the turns) rendered to HTML, then loaded in headless
 * Chromium. Targets: the page is ready (parsed, script run, filters wired) in under 2 s, and
 * the file stays under 20 MB.
 *
 * Run: npx tsx test/bench/report-bench.ts      Knobs (env): BENCH_TRAJECTORIES (default 1000),
 * BENCH_RUNS (browser loads, default 3; the median is reported).
 */
import { mkdtemp, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { readReportModel, renderReport } from "../../src/report/index.js";
import { launchBrowser } from "../support/browser.js";

const TRAJECTORIES = Number(process.env["BENCH_TRAJECTORIES"] ?? 1000);
const RUNS = Number(process.env["BENCH_RUNS"] ?? 3);
const GROUP = 4;

/** Deterministic pseudo-random numbers, so every run measures the same file. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), a | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = "the file script output error check tree count answer line value test fix run path directory shell print sum grep find".split(" ");
function prose(r: () => number, chars: number): string {
  let s = "";
  while (s.length < chars) s += WORDS[Math.floor(r() * WORDS.length)]! + (r() < 0.08 ? ".\n" : " ");
  return s.slice(0, chars);
}

function trajectory(r: () => number, g: number, i: number) {
  const turns = 6 + Math.floor(r() * 7);
  const messages: unknown[] = [
    { role: "system", content: "You are working in a Linux shell. Use the tools; when done, reply with a short summary and no tool call." },
    { role: "user", content: `Task ${g}: ${prose(r, 300)}` },
  ];
  const toolCalls: unknown[] = [];
  const toolErrors: unknown[] = [];
  for (let turn = 1; turn < turns; turn++) {
    const id = `call_${g}_${i}_${turn}`;
    const write = r() < 0.2;
    const args = write ? { path: `src/f${turn}.ts`, content: prose(r, 3000 + Math.floor(r() * 7000)) } : { command: `grep -rn ${WORDS[turn % WORDS.length]} src | head -${turn * 10}` };
    messages.push({ role: "assistant", content: null, reasoning_content: prose(r, 500 + Math.floor(r() * 1500)), tool_calls: [{ id, type: "function", function: { name: write ? "write_file" : "bash", arguments: JSON.stringify(args) } }] });
    const failed = r() < 0.2;
    const big = r() < 0.05;
    const output = big ? prose(r, 100_000) : prose(r, 200 + Math.floor(r() * 2800));
    messages.push({ role: "tool", tool_call_id: id, name: write ? "write_file" : "bash", content: JSON.stringify({ output, exit_code: failed ? 1 : 0, ...(failed ? { error: "Exit code: 1" } : {}) }) });
    toolCalls.push({ turn, tool: write ? "write_file" : "bash", call_id: id, duration_ms: Math.round(5 + r() * 2000), success: !failed, exit_code: failed ? 1 : 0 });
    if (failed) toolErrors.push({ turn, tool: "bash", arguments: JSON.stringify(args).slice(0, 500), error: "Exit code: 1" });
  }
  messages.push({ role: "assistant", content: prose(r, 200) });
  const score = r() < 0.6 ? 1 : 0;
  const tokens = Array.from({ length: 3000 + Math.floor(r() * 3000) }, (_, k) => (k * 7919) % 50000);
  const extras = { trajectory_id: `t-${g}-${i}`, finish_reason: "stop", turns_used: turns, duration_ms: Math.round(2000 + r() * 30000), attempts: 1, slot_losses: [], tool_calls: toolCalls, tool_errors: toolErrors };
  return { messages, score, tokens, extras };
}

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "report-bench-"));
  try {
    const r = rng(42);
    const lines: string[] = [];
    let rawText = 0;
    for (let g = 0; g < TRAJECTORIES / GROUP; g++) {
      const ts = Array.from({ length: GROUP }, (_, i) => trajectory(r, g, i));
      for (const t of ts) rawText += JSON.stringify(t.messages).length;
      lines.push(
        JSON.stringify({
          tokens: ts.map((t) => t.tokens),
          masks: ts.map((t) => t.tokens.map((x, k) => (k < 500 ? -100 : x))),
          scores: ts.map((t) => t.score),
          messages: ts.map((t) => t.messages),
          slotpool: { version: 1, trajectories: ts.map((t) => t.extras) },
        }),
      );
    }
    const jsonl = join(dir, "bench.jsonl");
    await writeFile(jsonl, lines.join("\n") + "\n");
    const jsonlBytes = (await stat(jsonl)).size;

    const t0 = performance.now();
    const model = await readReportModel(jsonl);
    const t1 = performance.now();
    const budget = process.env["BENCH_TEXT_BUDGET"];
    const rendered = renderReport(model, budget ? { textBudget: Number(budget) } : {});
    const t2 = performance.now();
    const html = join(dir, "bench.html");
    await writeFile(html, rendered.html);
    if (process.env["BENCH_KEEP_HTML"]) await writeFile(process.env["BENCH_KEEP_HTML"], rendered.html);

    const browser = await launchBrowser();
    const loads: Array<{ ready: number; dcl: number; fcp: number; filter: number; expand: number; busy: number; baseline: number }> = [];
    const tiny = join(dir, "tiny.html");
    await writeFile(tiny, `<!doctype html><html><body><p>hi</p><script>document.documentElement.setAttribute("data-ready", "1")</script></body></html>`);
    try {
      for (let i = 0; i < RUNS; i++) {
        // The same browser loading a one-line page, just before: what the machine's load adds to any page.
        const base = await browser.context.newPage();
        const b0 = performance.now();
        await base.goto(pathToFileURL(tiny).href, { waitUntil: "domcontentloaded" });
        await base.waitForSelector("html[data-ready='1']", { state: "attached" });
        const baseline = performance.now() - b0;
        await base.close();
        const page = await browser.context.newPage();
        const cdp = await browser.context.newCDPSession(page);
        await cdp.send("Performance.enable");
        const started = performance.now();
        await page.goto(pathToFileURL(html).href, { waitUntil: "domcontentloaded" });
        await page.waitForSelector("html[data-ready='1']", { state: "attached" });
        const ready = performance.now() - started;
        const nav = await page.evaluate(() => {
          const n = performance.getEntriesByType("navigation")[0] as PerformanceNavigationTiming;
          const fcp = performance.getEntriesByName("first-contentful-paint")[0];
          return { dcl: n.domContentLoadedEventEnd, fcp: fcp ? fcp.startTime : NaN };
        });
        // The "had a tool error" filter, and opening one trajectory, timed inside the page.
        const filter = await page.evaluate(() => {
          const box = document.getElementById("f-err") as HTMLInputElement;
          const s = performance.now();
          box.checked = true;
          box.dispatchEvent(new Event("change"));
          return performance.now() - s;
        });
        const expand = await page.evaluate(
          () =>
            new Promise<number>((resolve) => {
              const d = document.querySelector("details.traj:not([hidden])") as HTMLDetailsElement;
              const s = performance.now();
              d.open = true;
              requestAnimationFrame(() => setTimeout(() => resolve(performance.now() - s), 0));
            }),
        );
        // Main-thread busy time of the renderer (parse, script, style, layout), less sensitive to other processes than wall time.
        const metrics = (await cdp.send("Performance.getMetrics")).metrics;
        const busy = (metrics.find((m) => m.name === "TaskDuration")?.value ?? NaN) * 1000;
        loads.push({ ready, dcl: nav.dcl, fcp: nav.fcp, filter, expand, busy, baseline });
        await page.close();
      }
    } finally {
      await browser.close();
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const mb = (b: number) => `${(b / 1e6).toFixed(2)} MB`;
    const ready = median(loads.map((l) => l.ready));
    const rows: Array<[string, string]> = [
      ["trajectories", `${model.groups.reduce((a, g) => a + g.trajectories.length, 0)} in ${model.groups.length} groups`],
      ["JSONL", `${mb(jsonlBytes)} (message text ${mb(rawText)})`],
      ["HTML", `${mb(rendered.bytes)} (texts cut at ${Number.isFinite(rendered.textCap) ? rendered.textCap.toLocaleString("en") + " characters" : "never"})`],
      ["read JSONL (node)", `${(t1 - t0).toFixed(0)} ms`],
      ["render HTML (node)", `${(t2 - t1).toFixed(0)} ms`],
      ["browser: ready, median", `${ready.toFixed(0)} ms (runs: ${loads.map((l) => l.ready.toFixed(0)).join(", ")}) — goto to script done`],
      ["browser: main-thread busy", `${median(loads.map((l) => l.busy)).toFixed(0)} ms (CDP TaskDuration, median)`],
      ["browser: one-line page", `${median(loads.map((l) => l.baseline)).toFixed(0)} ms ready, median (the machine's load on any page)`],
      ["browser: DOMContentLoaded", `${median(loads.map((l) => l.dcl)).toFixed(0)} ms after navigation start`],
      ["browser: first paint", `${median(loads.map((l) => l.fcp)).toFixed(0)} ms after navigation start`],
      ["filter 'had a tool error'", `${median(loads.map((l) => l.filter)).toFixed(1)} ms`],
      ["open one trajectory", `${median(loads.map((l) => l.expand)).toFixed(1)} ms`],
    ];
    const w = Math.max(...rows.map(([k]) => k.length));
    process.stdout.write(`report bench (${TRAJECTORIES} trajectories, ${RUNS} browser loads)\n${rows.map(([k, v]) => `  ${k.padEnd(w)}  ${v}`).join("\n")}\n`);
    const okSize = rendered.bytes < 20_000_000;
    const okTime = ready < 2000;
    process.stdout.write(`targets: file < 20 MB ${okSize ? "met" : "MISSED"}; ready < 2 s ${okTime ? "met" : "MISSED"}\n`);
    if (!okSize || !okTime) process.exitCode = 1;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

await main();
