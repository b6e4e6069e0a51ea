import { createHash } from "node:crypto";
import { REPORT_CSS, REPORT_SCRIPT } from "./assets.js";
import type { Entry, GroupView, ReportModel, TrajectoryView } from "./model.js";
import type { RewardCallExtras } from "./rollout-extras.js";
import { fmtScore, summarize, type ReportSummary } from "./run-summary.js";
import { textCap, textLengths } from "./text-budget.js";
import { formatMs, formatToolErrorLine } from "./tool-stats.js";
import { countRepeats, withCount } from "./repeats.js";

/** Text as HTML text: model output never becomes markup. */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => (c === "&" ? "&amp;" : c === "<" ? "&lt;" : c === ">" ? "&gt;" : c === '"' ? "&quot;" : "&#39;"));
}

export interface RenderOptions {
  /** The file must stay under this many bytes (default 19 MB: the 1,000-trajectory bound is 20 MB). */
  maxBytes?: number;
  /** Characters of model text kept in the file before the longest texts are cut (default 8 M: the browser scans every byte at load). */
  textBudget?: number;
  /** Links to JSONL lines are this plus the line number (when served, e.g. `line/`); else the page names file and line. */
  lineHrefPrefix?: string;
  /** Shown in the header (default: now). */
  generatedAt?: Date;
}

export interface RenderedReport {
  html: string;
  bytes: number;
  /** Longest text kept whole (Infinity: nothing was cut). */
  textCap: number;
  summary: ReportSummary;
}

/** However tight the budget, a text keeps this much. */
const MIN_KEPT = 120;
const ERROR_LINES_SHOWN = 50;

/**
 * The report as one self-contained HTML page. Texts are kept whole while they fit the text
 * budget; past it the longest are cut (the rest is in the JSONL line, which the page names),
 * and the page is rendered again with a smaller budget if it still exceeds `maxBytes`.
 */
export function renderReport(model: ReportModel, options: RenderOptions = {}): RenderedReport {
  const maxBytes = options.maxBytes ?? 19_000_000;
  let budget = options.textBudget ?? 8_000_000;
  const lengths = textLengths(model);
  const summary = summarize(model);
  for (let attempt = 0; ; attempt++) {
    const cap = textCap(lengths, budget);
    const html = new Renderer(model, summary, options, cap).page();
    const bytes = Buffer.byteLength(html);
    if (bytes <= maxBytes || attempt >= 6) return { html, bytes, textCap: cap, summary };
    budget = Math.floor(budget * Math.min(0.8, (maxBytes / bytes) * 0.9));
  }
}

class Renderer {
  constructor(
    private readonly model: ReportModel,
    private readonly s: ReportSummary,
    private readonly options: RenderOptions,
    private readonly cap: number,
  ) {}

  page(): string {
    const script = REPORT_SCRIPT;
    const hash = createHash("sha256").update(script).digest("base64");
    const csp = `default-src 'none'; style-src 'unsafe-inline'; img-src data:; script-src 'sha256-${hash}'; base-uri 'none'; form-action 'none'`;
    return [
      "<!doctype html>",
      `<html lang="en"><head><meta charset="utf-8">`,
      `<meta http-equiv="Content-Security-Policy" content="${csp}">`,
      `<meta name="viewport" content="width=device-width, initial-scale=1">`,
      `<title>${escapeHtml(this.model.title)}</title>`,
      `<style>${REPORT_CSS}</style></head>`,
      `<body data-source="${escapeHtml(this.model.source)}" data-line-href="${escapeHtml(this.options.lineHrefPrefix ?? "")}">`,
      this.header(),
      "<main>",
      this.filters(),
      this.model.groups.map((g) => this.group(g)).join(""),
      this.model.groups.length === 0 ? `<p class="sub">No groups or samples in this file.</p>` : "",
      "</main>",
      `<script>${script}</script>`,
      "</body></html>\n",
    ].join("\n");
  }

  private header(): string {
    const s = this.s;
    const m = this.model;
    const when = (this.options.generatedAt ?? new Date()).toISOString().replace("T", " ").slice(0, 19) + " UTC";
    const card = (value: string, label: string, cls = "") => `<div class="card${cls ? " " + cls : ""}"><b>${escapeHtml(value)}</b><span>${escapeHtml(label)}</span></div>`;
    const lat = s.timedCalls ? `${formatMs(s.latency.p50)} / ${formatMs(s.latency.p90)} / ${formatMs(s.latency.p99)}` : "n/a";
    const cards = [
      card(String(s.trajectories), `trajectories in ${s.groups} ${m.groups.every((g) => g.kind === "sample") && s.groups ? "samples" : "groups"}`),
      card(`${(s.successRate * 100).toFixed(1)}%`, `success rate (score ≥ ${s.successThreshold})`),
      card(s.meanScore.toFixed(3), "mean score"),
      card(String(s.toolCalls), m.run ? "tool calls in the file" : "tool calls"),
      card(String(s.toolErrors), `tool errors (${s.trajectoriesWithErrors} trajectories)`, s.toolErrors ? "bad" : ""),
      card(lat, "tool latency p50 / p90 / p99"),
      card(String(s.slotLosses), "slot losses", s.slotLosses ? "bad" : ""),
      card(String(s.retries), "slot-loss restarts"),
    ];
    const nw = m.run?.notWritten;
    if (nw) {
      cards.push(card(String(nw.failedGroups), "failed groups (not in the file)", nw.failedGroups ? "bad" : ""));
      cards.push(card(String(nw.infraFailures), "infra failures (not scored)", nw.infraFailures ? "bad" : ""));
      if (nw.filteredGroups) cards.push(card(String(nw.filteredGroups), "filtered groups (not in the file)"));
    }
    if (m.skipped.length) cards.push(card(String(m.skipped.length), "lines skipped", "bad"));
    const panels = [this.histogram(), this.toolTable(), this.errorPanel(), this.slowestPanel(), this.metricsPanel(), this.runPanel(), this.skippedPanel()].filter(Boolean);
    return `<header class="top"><h1>${escapeHtml(m.title)}</h1><div class="sub">${escapeHtml(m.source)} · generated ${escapeHtml(when)}${
      Number.isFinite(this.cap) ? ` · texts over ${this.cap.toLocaleString("en")} characters are cut here (full text in the JSONL)` : ""
    }</div><div class="cards">${cards.join("")}</div><div class="panels">${panels.join("")}</div></header>`;
  }

  private histogram(): string {
    const bins = this.s.histogram;
    if (bins.length === 0) return "";
    const top = Math.max(...bins.map((b) => b.count));
    const bars = bins
      .map(
        (b) =>
          `<button class="bar" type="button" data-min="${b.min}" data-max="${b.max}" title="${escapeHtml(`${b.label}: ${b.count}`)}"><small>${b.count}</small><i style="height:${((b.count / top) * 100).toFixed(1)}%"></i><em>${escapeHtml(b.label)}</em></button>`,
      )
      .join("");
    return `<div class="panel"><h2>Scores <span class="sub">(click a bar to filter)</span></h2><div class="hist">${bars}</div></div>`;
  }

  private toolTable(): string {
    if (this.s.tools.length === 0) return "";
    const rows = this.s.tools
      .map(
        (t) =>
          `<tr><td>${escapeHtml(t.tool)}</td><td class="num">${t.calls}</td><td class="num${t.errors ? " bad" : ""}">${t.errors}</td><td class="num">${formatMs(t.p50)}</td><td class="num">${formatMs(t.p99)}</td><td class="num">${formatMs(t.max)}</td></tr>`,
      )
      .join("");
    return `<div class="panel"><h2>Tools, slowest first</h2><table><thead><tr><th>tool</th><th class="num">calls</th><th class="num">errors</th><th class="num">p50</th><th class="num">p99</th><th class="num">max</th></tr></thead><tbody>${rows}</tbody></table></div>`;
  }

  private errorPanel(): string {
    const errs = this.s.errors;
    if (errs.length === 0) return "";
    const items = errs
      .slice(0, ERROR_LINES_SHOWN)
      .map((e) => `<li><a href="#${e.trajectory}">${escapeHtml(e.trajectory)}</a> ${escapeHtml(formatToolErrorLine(e))}</li>`)
      .join("");
    const more = errs.length > ERROR_LINES_SHOWN ? `<p class="sub">… and ${errs.length - ERROR_LINES_SHOWN} more (filter by "had a tool error")</p>` : "";
    return `<div class="panel"><h2>Tool errors per turn</h2><ul class="errlines" id="tool-errors">${items}</ul>${more}</div>`;
  }

  private slowestPanel(): string {
    if (this.s.slowest.length === 0) return "";
    const rows = this.s.slowest
      .map(
        (c) =>
          `<tr><td class="num">${formatMs(c.durationMs!)}</td><td>${escapeHtml(c.tool)}</td><td><a href="#${c.trajectory}">${escapeHtml(c.trajectory)}</a> turn ${c.turn}</td><td>${escapeHtml(oneLine(c.arguments, 60))}</td></tr>`,
      )
      .join("");
    return `<div class="panel wide"><h2>Slowest tool calls</h2><table><tbody>${rows}</tbody></table></div>`;
  }

  /** The env's custom metrics (per trajectory and per group): mean, min, max over the file. */
  private metricsPanel(): string {
    if (this.s.metrics.length === 0) return "";
    const rows = this.s.metrics
      .map((m) => `<tr><td>${escapeHtml(m.name)}</td><td>${m.per}</td><td class="num">${m.count}</td><td class="num">${fmtScore(m.mean)}</td><td class="num">${fmtScore(m.min)}</td><td class="num">${fmtScore(m.max)}</td></tr>`)
      .join("");
    return `<div class="panel"><h2>Metrics</h2><table><thead><tr><th>metric</th><th>per</th><th class="num">n</th><th class="num">mean</th><th class="num">min</th><th class="num">max</th></tr></thead><tbody>${rows}</tbody></table></div>`;
  }

  private runPanel(): string {
    const run = this.model.run;
    if (!run) return "";
    const rows = run.rows.map(([k, v]) => `<tr><td class="key">${escapeHtml(k)}</td><td>${escapeHtml(v)}</td></tr>`).join("");
    // One line per distinct reason ("× 48"): a dead model server fails every group the same way.
    const failures = run.failures.length
      ? `<h2>Failed groups (not in the JSONL)</h2><ul class="errlines">${countRepeats(run.failures).map((f) => `<li>${escapeHtml(withCount(f))}</li>`).join("")}</ul>`
      : "";
    const stacks = (run.failedStacks ?? [])
      .map((s) => `<details class="fold stack" open><summary>where the env's code threw${s.count > 1 ? ` (× ${s.count})` : ""}: ${escapeHtml(s.stack.split("\n")[0] ?? "")}</summary><pre>${escapeHtml(s.stack)}</pre></details>`)
      .join("");
    const sidecar = run.failedSidecar
      ? `<p class="sidecar">Transcripts and reward calls of the ${run.failedSidecar.trajectories} unscored trajectories: <a href="${escapeHtml(encodeURI(run.failedSidecar.href))}">${escapeHtml(run.failedSidecar.href)}</a> (one JSON line each; not training data)</p>`
      : "";
    return `<div class="panel wide"><h2>Run</h2><table><tbody>${rows}</tbody></table>${failures}${stacks}${sidecar}</div>`;
  }

  private skippedPanel(): string {
    const sk = this.model.skipped;
    if (sk.length === 0) return "";
    const items = sk.slice(0, 50).map((x) => `<li>line ${x.line}: ${escapeHtml(x.reason)}</li>`).join("");
    return `<div class="panel"><h2>Lines not shown</h2><ul class="errlines skipped">${items}</ul></div>`;
  }

  private filters(): string {
    return `<div class="filters" id="filters"><label>score ≥ <input type="number" id="f-min" step="any"></label><label>score ≤ <input type="number" id="f-max" step="any"></label><label><input type="checkbox" id="f-err"> had a tool error</label><button type="button" id="f-clear">clear</button><button type="button" id="f-expand">expand shown</button><button type="button" id="f-collapse">collapse all</button><span id="f-count" class="sub"></span></div>`;
  }

  private group(g: GroupView): string {
    const scores = g.trajectories.map((t) => (t.score === null ? "–" : fmtScore(t.score)));
    const label =
      g.kind === "sample"
        ? `sample ${g.index} <span>line ${g.line}${g.item ? ` · item ${escapeHtml(oneLine(g.item, 160))}` : ""}</span>`
        : `group ${g.index} <span>line ${g.line} · scores ${escapeHtml(scores.join(", "))}</span>`;
    const tree = g.tree ? `<pre class="meta">${escapeHtml(g.tree.join("\n"))}</pre>` : "";
    const metrics = g.metrics ? `<div class="meta">group metrics: ${escapeHtml(formatMetrics(g.metrics))}</div>` : "";
    return `<section class="group" id="g${g.index}"><h3>${label}</h3>${tree}${metrics}${g.trajectories.map((t) => this.trajectory(t, g)).join("")}</section>`;
  }

  private trajectory(t: TrajectoryView, g: GroupView): string {
    const scoreCls = t.score === null ? "none" : t.score > 0 ? "pos" : t.score < 0 ? "neg" : "zero";
    const bits: string[] = [g.kind === "sample" ? `sample ${g.index}` : `group ${g.index} · trajectory ${t.index}`];
    if (t.turnsUsed !== undefined) bits.push(`${t.turnsUsed} turn${t.turnsUsed === 1 ? "" : "s"}`);
    bits.push(`${t.toolCalls.length} tool call${t.toolCalls.length === 1 ? "" : "s"}`);
    if (t.toolErrors.length) bits.push(`<span class="bad">${t.toolErrors.length} tool error${t.toolErrors.length === 1 ? "" : "s"}</span>`);
    if (t.slotLosses.length) bits.push(`<span class="bad">${t.slotLosses.length} slot loss${t.slotLosses.length === 1 ? "" : "es"}</span>`);
    if (t.durationMs !== undefined) bits.push(formatMs(t.durationMs));
    if (t.finishReason !== undefined) bits.push(escapeHtml(t.finishReason));
    if (t.rewardError !== undefined) bits.push(`<span class="bad">reward error</span>`);
    if (t.error !== undefined) bits.push(`<span class="bad">model error</span>`);
    const score = t.score === null ? "–" : fmtScore(t.score);
    const summary = `<summary><span class="score ${scoreCls}">${escapeHtml(score)}</span> ${bits.join(" · ")}</summary>`;
    const attr = `class="traj" id="${t.id}" data-score="${t.score ?? ""}" data-err="${t.toolErrors.length}" data-line="${t.line}"`;
    // The conversation is data, turned into elements by the page's script when the trajectory
    // is opened: a thousand closed trajectories then cost the browser one text node each.
    const body = t.entries === null ? `<p class="meta">No messages in this line${t.tokenCount !== undefined ? ` (${t.tokenCount} tokens)` : ""}.</p>` : `<script type="application/json">${jsonForScript(this.entries(t.entries))}</script>`;
    return `<details ${attr}>${summary}${this.meta(t)}${body}</details>`;
  }

  private meta(t: TrajectoryView): string {
    const parts: string[] = [`JSONL ${this.lineRef(t.line)}`];
    if (t.tokenCount !== undefined) parts.push(`${t.tokenCount} tokens`);
    if (t.attempts !== undefined && t.attempts > 1) parts.push(`${t.attempts} attempts`);
    let extra = "";
    if (t.slotLosses.length) extra += `<div class="bad">slot lost: ${escapeHtml(oneLine(t.slotLosses.join(" | "), 1000))}</div>`;
    if (t.rewardError !== undefined) extra += `<div class="bad">reward error: ${escapeHtml(oneLine(t.rewardError, 1000))}</div>`;
    if (t.error !== undefined) extra += `<div class="bad">model server: ${escapeHtml(oneLine(t.error, 1000))}</div>`;
    if (t.ownScore !== undefined) parts.push(`own score ${escapeHtml(fmtScore(t.ownScore))} (the group's scoring changed it)`);
    if (t.metrics !== undefined) extra += `<div>metrics: ${escapeHtml(formatMetrics(t.metrics))}</div>`;
    if (t.rewardCalls?.length) extra += this.rewardCalls(t.rewardCalls);
    if (t.scoreMetadata !== undefined) extra += `<details class="fold"><summary>score metadata</summary><pre>${escapeHtml(cut(JSON.stringify(t.scoreMetadata, null, 2), 2000))}</pre></details>`;
    return `<div class="meta">${parts.join(" · ")}${extra}</div>`;
  }

  /** What the reward ran and what came back (folded; opened when a call failed). */
  private rewardCalls(calls: RewardCallExtras[]): string {
    const failed = calls.filter((c) => !c.success).length;
    const items = calls
      .map((c) => {
        const exit = c.timed_out ? "timed out" : c.exit_code !== undefined ? `exit ${c.exit_code}` : c.success ? "ok" : "failed";
        const text = [c.output, c.error].filter((x) => x).join("\n");
        return `<li class="${c.success ? "" : "bad"}"><code>${escapeHtml(c.tool)} ${escapeHtml(oneLine(c.arguments, 300))}</code> → ${escapeHtml(exit)} · ${escapeHtml(formatMs(c.duration_ms))}${text ? `<pre>${escapeHtml(cut(text, 4000))}</pre>` : ""}</li>`;
      })
      .join("");
    return `<details class="fold reward-calls"${failed ? " open" : ""}><summary>reward's tool calls: ${calls.length}${failed ? `, ${failed} failed` : ""}</summary><ul>${items}</ul></details>`;
  }

  /**
   * The conversation for the page's script, compact: `[kind, turn, …, text]` with kind
   * x (message: role), k (thinking), c (call: tool), r (result: tool, exit code, ms, error).
   * A text is a string, or `[kept, droppedCharacters]` when the budget cut it.
   */
  private entries(entries: Entry[]): unknown[] {
    return entries.map((e) => {
      switch (e.kind) {
        case "text":
          return ["x", e.turn, e.role, this.text(e.text)];
        case "thinking":
          return ["k", e.turn, this.text(e.text)];
        case "call":
          return ["c", e.turn, e.tool, this.text(displayArguments(e.arguments))];
        case "result":
          return ["r", e.turn, e.tool, e.exitCode === undefined ? "" : e.exitCode, e.durationMs ?? null, e.error === undefined ? null : oneLine(e.error, 300), this.text(e.output)];
      }
    });
  }

  private text(s: string): string | [string, number] {
    if (!Number.isFinite(this.cap) || s.length <= this.cap) return s;
    const kept = Math.max(this.cap, MIN_KEPT);
    return kept >= s.length ? s : [s.slice(0, kept), s.length - kept];
  }

  private lineRef(line: number): string {
    const prefix = this.options.lineHrefPrefix;
    return prefix ? `<a href="${escapeHtml(prefix + line)}">line ${line}</a>` : `line ${line}`;
  }
}

/**
 * Arguments for reading: a JSON object as `key: value` lines with strings unquoted (a file's
 * content shows as the file); anything else as the model wrote it.
 */
export function displayArguments(args: string): string {
  let v: unknown;
  try {
    v = JSON.parse(args);
  } catch {
    return args;
  }
  if (typeof v !== "object" || v === null || Array.isArray(v)) return args;
  return Object.entries(v)
    .map(([k, x]) => {
      const text = typeof x === "string" ? x : JSON.stringify(x);
      return text.includes("\n") ? `${k}:\n${text}` : `${k}: ${text}`;
    })
    .join("\n");
}

/** JSON inside a <script> element: no `<` at all, so neither `</script>` nor `<!--` can end it early. */
export function jsonForScript(value: unknown): string {
  return JSON.stringify(value).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
}

/** `name 1 · other 0.25`. */
function formatMetrics(m: Record<string, number>): string {
  return Object.entries(m)
    .map(([k, v]) => `${k} ${fmtScore(v)}`)
    .join(" · ");
}

function oneLine(s: string, max: number): string {
  const flat = s.replace(/\s+/g, " ");
  return flat.length > max ? flat.slice(0, max) + "…" : flat;
}

function cut(s: string, max: number): string {
  return s.length > max ? s.slice(0, max) + "\n…" : s;
}
