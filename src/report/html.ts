import { createHash } from "node:crypto";
import { REPORT_CSS, REPORT_SCRIPT } from "./assets.js";
import type { Entry, GroupView, ReportModel, TrajectoryView } from "./model.js";
import { fmtScore, summarize, type ReportSummary } from "./run-summary.js";
import { textCap, textLengths } from "./text-budget.js";
import { formatMs, formatToolErrorLine } from "./tool-stats.js";

/** Text as HTML text: model output never becomes markup. */
export function escapeHtml(s: string): string {
  return s.replace(/[&<>"']/g, (c) => (c === "&" ? "&amp;" : c === "<" ? "&lt;" : c === ">" ? "&gt;" : c === '"' ? "&quot;" : "&#39;"));
}

export interface RenderOptions {
  /** The file must stay under this many bytes (default 19 MB: the 1,000-trajectory bound is 20 MB). */
  maxBytes?: number;
  /** Characters of model text kept in the file before the longest texts are cut (default 12 M). */
  textBudget?: number;
  /** Characters of a text shown before "show more" (default 800, and at most 16 lines). */
  previewChars?: number;
  /** A link to a JSONL line (when served), else the cut texts name the file and line. */
  lineHref?: (line: number) => string;
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

const PREVIEW_LINES = 16;
const ERROR_LINES_SHOWN = 50;

/**
 * The report as one self-contained HTML page. Texts are kept whole while they fit the text
 * budget; past it the longest are cut (the rest is in the JSONL line, which the page names),
 * and the page is rendered again with a smaller budget if it still exceeds `maxBytes`.
 */
export function renderReport(model: ReportModel, options: RenderOptions = {}): RenderedReport {
  const maxBytes = options.maxBytes ?? 19_000_000;
  let budget = options.textBudget ?? 12_000_000;
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
  private readonly preview: number;

  constructor(
    private readonly model: ReportModel,
    private readonly s: ReportSummary,
    private readonly options: RenderOptions,
    private readonly cap: number,
  ) {
    this.preview = Math.min(options.previewChars ?? 800, cap);
  }

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
      `<style>${REPORT_CSS}</style></head><body>`,
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
      card(`${(s.successRate * 100).toFixed(1)}%`, "success rate (score > 0)"),
      card(s.meanScore.toFixed(3), "mean score"),
      card(String(s.toolCalls), "tool calls"),
      card(String(s.toolErrors), `tool errors (${s.trajectoriesWithErrors} trajectories)`, s.toolErrors ? "bad" : ""),
      card(lat, "tool latency p50 / p90 / p99"),
      card(String(s.slotLosses), "slot losses", s.slotLosses ? "bad" : ""),
      card(String(s.retries), "restarts"),
    ];
    if (m.skipped.length) cards.push(card(String(m.skipped.length), "lines skipped", "bad"));
    const panels = [this.histogram(), this.toolTable(), this.errorPanel(), this.slowestPanel(), this.runPanel(), this.skippedPanel()].filter(Boolean);
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
    return `<div class="panel"><h2>Slowest tool calls</h2><table><tbody>${rows}</tbody></table></div>`;
  }

  private runPanel(): string {
    const run = this.model.run;
    if (!run) return "";
    const rows = run.rows.map(([k, v]) => `<tr><td>${escapeHtml(k)}</td><td>${escapeHtml(v)}</td></tr>`).join("");
    const failures = run.failures.length
      ? `<h2>Failed groups (not in the JSONL)</h2><ul class="errlines">${run.failures.map((f) => `<li>${escapeHtml(f)}</li>`).join("")}</ul>`
      : "";
    return `<div class="panel"><h2>Run</h2><table><tbody>${rows}</tbody></table>${failures}</div>`;
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
    return `<section class="group" id="g${g.index}"><h3>${label}</h3>${g.trajectories.map((t) => this.trajectory(t, g)).join("")}</section>`;
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
    const body = t.entries === null ? `<p class="meta">No messages in this line${t.tokenCount !== undefined ? ` (${t.tokenCount} tokens)` : ""}.</p>` : `<ol class="conv">${t.entries.map((e) => this.entry(e, t.line)).join("")}</ol>`;
    const attr = `class="traj" id="${t.id}" data-score="${t.score ?? ""}" data-err="${t.toolErrors.length}"`;
    return `<details ${attr}>${summary}${this.meta(t)}${body}</details>`;
  }

  private meta(t: TrajectoryView): string {
    const parts: string[] = [`JSONL ${this.lineRef(t.line)}`];
    if (t.tokenCount !== undefined) parts.push(`${t.tokenCount} tokens`);
    if (t.attempts !== undefined && t.attempts > 1) parts.push(`${t.attempts} attempts`);
    let extra = "";
    if (t.slotLosses.length) extra += `<div class="bad">slot lost: ${escapeHtml(t.slotLosses.join(" | "))}</div>`;
    if (t.rewardError !== undefined) extra += `<div class="bad">reward error: ${escapeHtml(t.rewardError)}</div>`;
    if (t.error !== undefined) extra += `<div class="bad">model server: ${escapeHtml(t.error)}</div>`;
    if (t.scoreMetadata !== undefined) extra += `<details class="fold"><summary>score metadata</summary><pre>${escapeHtml(cut(JSON.stringify(t.scoreMetadata, null, 2), 4000))}</pre></details>`;
    return `<div class="meta">${parts.join(" · ")}${extra}</div>`;
  }

  private entry(e: Entry, line: number): string {
    switch (e.kind) {
      case "text": {
        const role = escapeHtml(e.role);
        const head = `<div class="role">${role}${e.role === "assistant" ? ` · turn ${e.turn}` : ""}</div>`;
        // The system prompt is the same in every trajectory: folded so the page stays readable.
        if (e.role === "system") return `<li class="m-system"><details class="fold"><summary>system prompt (${e.text.length} characters)</summary>${this.text(e.text, line)}</details></li>`;
        return `<li class="m-${role.replace(/[^a-z]/gi, "")}">${head}${this.text(e.text, line)}</li>`;
      }
      case "thinking":
        return `<li class="thinking"><details class="fold"><summary>thinking · turn ${e.turn} (${e.text.length} characters)</summary>${this.text(e.text, line)}</details></li>`;
      case "call":
        return `<li class="call"><div class="role">tool call · turn ${e.turn}</div><code class="fn">${escapeHtml(e.tool)}</code>${this.text(displayArguments(e.arguments), line, "args")}</li>`;
      case "result": {
        const meta: string[] = [escapeHtml(e.tool)];
        if (e.exitCode !== undefined) meta.push(e.exitCode === null ? "no exit code" : `exit ${e.exitCode}`);
        if (e.durationMs !== undefined) meta.push(formatMs(e.durationMs));
        if (e.error !== undefined) meta.push(`<span class="e">error: ${escapeHtml(oneLine(e.error, 300))}</span>`);
        const output = e.output === "" ? `<pre class="sub">(no output)</pre>` : this.text(e.output, line);
        return `<li class="result${e.error !== undefined ? " err" : ""}"><div class="role">tool result · turn ${e.turn}</div><div class="rmeta">${meta.join(" · ")}</div>${output}</li>`;
      }
    }
  }

  /** A text with its first lines shown, the rest one click away, and past the cap a pointer to the JSONL. */
  private text(s: string, line: number, cls = ""): string {
    const c = cls ? ` class="${cls}"` : "";
    let head = s.slice(0, this.preview);
    const nl = nthIndex(head, "\n", PREVIEW_LINES);
    if (nl >= 0) head = head.slice(0, nl + 1);
    if (head.length >= s.length) return `<pre${c}>${escapeHtml(s)}</pre>`;
    const kept = Number.isFinite(this.cap) ? Math.max(head.length, Math.min(s.length, this.cap)) : s.length;
    const rest = s.slice(head.length, kept);
    const dropped = s.length - kept;
    const note = dropped > 0 ? `<p class="cut">✂ ${dropped.toLocaleString("en")} more characters are not in this report: see ${this.lineRef(line)} of ${escapeHtml(this.model.source)}</p>` : "";
    const moreLabel = rest.length > 0 ? `show ${rest.length.toLocaleString("en")} more characters` : "truncated";
    return `<pre${c}>${escapeHtml(head)}</pre><details class="more"><summary>${moreLabel}</summary>${rest ? `<pre${c}>${escapeHtml(rest)}</pre>` : ""}${note}</details>`;
  }

  private lineRef(line: number): string {
    const href = this.options.lineHref?.(line);
    return href ? `<a href="${escapeHtml(href)}">line ${line}</a>` : `line ${line}`;
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

function nthIndex(s: string, ch: string, n: number): number {
  let i = -1;
  for (let k = 0; k < n; k++) {
    i = s.indexOf(ch, i + 1);
    if (i < 0) return -1;
  }
  return i;
}

function oneLine(s: string, max: number): string {
  const flat = s.replace(/\s+/g, " ");
  return flat.length > max ? flat.slice(0, max) + "…" : flat;
}

function cut(s: string, max: number): string {
  return s.length > max ? s.slice(0, max) + "\n…" : s;
}
