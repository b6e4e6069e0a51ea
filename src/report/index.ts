/**
 * The rollout report: a JSONL file of scored groups (slotpool's or Atropos's process mode) or
 * evaluation samples, as one self-contained HTML page. Depends on nothing but Node and the
 * JSONL format, so `slotpool view` works on files from anywhere.
 */
import { writeFile } from "node:fs/promises";
import { basename, dirname, extname, join } from "node:path";
import { renderReport, type RenderOptions, type RenderedReport } from "./html.js";
import type { RunInfo } from "./model.js";
import { readReportModel } from "./read-jsonl.js";

// Listed by name (guarded by test/architecture/public-api.test.ts).
export type { ReportModel, GroupView, TrajectoryView, ToolCallView, ToolErrorView, Entry, SkippedLine, RunInfo } from "./model.js";
export { renderReport, type RenderOptions, type RenderedReport } from "./html.js";
export { ReportBuilder, ReportInputError, readReportModel } from "./read-jsonl.js";
export { summarize, type ReportSummary, type MetricSummary } from "./run-summary.js";
export type { LineExtras, RolloutExtras } from "./rollout-extras.js";

/** `data/x.jsonl` → `data/x.html` (as Atropos's jsonl2html names it). */
export function reportPathFor(jsonlPath: string): string {
  const ext = extname(jsonlPath);
  return join(dirname(jsonlPath), `${ext ? basename(jsonlPath, ext) : basename(jsonlPath)}.html`);
}

export interface WriteReportOptions extends RenderOptions {
  /** Where to write (default: beside the JSONL, `.html` for `.jsonl`). */
  out?: string;
  title?: string;
  run?: RunInfo;
}

/** Reads `jsonlPath` and writes its report; returns where, and the figures. */
export async function writeReport(jsonlPath: string, options: WriteReportOptions = {}): Promise<RenderedReport & { path: string }> {
  const model = await readReportModel(jsonlPath, { ...(options.title ? { title: options.title } : {}), ...(options.run ? { run: options.run } : {}) });
  const rendered = renderReport(model, options);
  const path = options.out ?? reportPathFor(jsonlPath);
  await writeFile(path, rendered.html);
  return { ...rendered, path };
}
