import type { ReportModel } from "./model.js";

/**
 * The longest text kept in the report so that all texts together stay within `budget`
 * characters: short texts are kept whole and only the longest are cut ("water-filling").
 * Infinity when everything fits.
 */
export function textCap(lengths: readonly number[], budget: number): number {
  const sorted = [...lengths].sort((a, b) => a - b);
  let used = 0;
  for (let i = 0; i < sorted.length; i++) {
    const remaining = sorted.length - i;
    // Could every remaining text be cut at sorted[i] and still fit?
    if (used + sorted[i]! * remaining > budget) return Math.max(0, Math.floor((budget - used) / remaining));
    used += sorted[i]!;
  }
  return Infinity;
}

/** The lengths of every text the report shows (message text, thinking, arguments, outputs). */
export function textLengths(model: ReportModel): number[] {
  const out: number[] = [];
  for (const g of model.groups) {
    for (const t of g.trajectories) {
      for (const e of t.entries ?? []) {
        if (e.kind === "call") out.push(e.arguments.length);
        else if (e.kind === "result") out.push(e.output.length);
        else out.push(e.text.length);
      }
    }
  }
  return out;
}
