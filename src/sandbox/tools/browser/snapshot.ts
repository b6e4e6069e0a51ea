/**
 * The text of a page snapshot: Playwright's accessibility snapshot in its "ai" mode (YAML-like
 * lines `- role "name" [ref=e5]`, nested by indentation; each element keeps its ref across
 * snapshots while it stays on the page), as the seed's agent-browser gives it, in full or
 * compact.
 *
 * Compact (the default, the seed's `snapshot -c`): structural wrappers that say nothing
 * themselves (a `generic`, `group`, `none` or `presentation` line without a name or text of its
 * own, and not made clickable) are dropped and their children lifted to their level, so what is left is the page's
 * headings, text, and interactive elements with their refs.
 */

const STRUCTURAL = new Set(["generic", "group", "none", "presentation"]);

/** `- generic [ref=e3]:` / `- group:` — a role with no name, no inline text, only children (or nothing). */
const EMPTY_WRAPPER = /^- ([a-z]+)(?: \[[^\]]*\])*:?$/;

export function compactSnapshot(full: string): string {
  const out: string[] = [];
  // Per open level: the indentation of the line that opened it and how far its children move left.
  const stack: Array<{ indent: number; shift: number }> = [];
  for (const line of full.split("\n")) {
    const indent = line.length - line.trimStart().length;
    while (stack.length > 0 && indent <= stack[stack.length - 1]!.indent) stack.pop();
    const shift = stack.length > 0 ? stack[stack.length - 1]!.shift : 0;
    const body = line.trimStart();
    const m = EMPTY_WRAPPER.exec(body);
    // A wrapper the page made clickable (a div with a click handler) keeps its ref.
    if (m && STRUCTURAL.has(m[1]!) && !body.includes("[cursor=pointer]")) {
      // Dropped: its children come up one level (two spaces).
      stack.push({ indent, shift: shift + 2 });
      continue;
    }
    stack.push({ indent, shift });
    out.push(" ".repeat(Math.max(0, indent - shift)) + body);
  }
  return out.join("\n");
}

/** The distinct element refs a snapshot shows (the seed's `element_count`). */
export function elementCount(snapshot: string): number {
  return new Set(snapshot.match(/\[ref=[a-z0-9]+\]/g) ?? []).size;
}

/** The seed's note where a snapshot was cut. */
export const TRUNCATION_NOTE = "\n\n[... content truncated ...]";

/** `text` cut at `maxChars` (with the note), and whether it was. */
export function truncateSnapshot(text: string, maxChars: number): { text: string; truncated: boolean } {
  if (text.length <= maxChars) return { text, truncated: false };
  return { text: text.slice(0, maxChars) + TRUNCATION_NOTE, truncated: true };
}
