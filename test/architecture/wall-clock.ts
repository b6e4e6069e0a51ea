/**
 * Wall-clock time in the suite's tests (issue 39: "a wall-clock bound in a test is a bug
 * unless it has a stated reason"). On a loaded 2-core box every duration stretches, so a test
 * waits for events; where it cannot, it says why, in a comment the scan below finds:
 *
 * - a **bound** — `expect(<a duration>).toBeLessThan(n)` — needs `bound: <why this figure, and
 *   its margin on a loaded box>` on its line or in the comment lines just above it;
 * - a **fixed wait** — `await sleep(n)` / `await new Promise((r) => setTimeout(r, n))` as a
 *   statement of its own, not the pause of a polling loop — needs `wait: <what it lets happen
 *   that no event tells>` there;
 * - a **short give-up** — `eventually(…, n)`, `until(…, n)`, `within(n, …)`, `waitFor(…, n)`
 *   with n under 10 s — needs `bound:` too: a wait for an event costs nothing when the event
 *   comes, so its give-up can be generous, and a short one is a bound in disguise.
 *
 * Kept apart from its test so a test can feed it made-up files and watch it find them.
 */
import { readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";

export interface Finding {
  file: string;
  line: number;
  kind: "bound" | "wait";
  text: string;
}

/** A duration measured by the test: clocks, and the names durations go by here. */
const DURATION = /Date\.now\(\)|performance\.now\(\)|\.ms\b|\bms\b|[a-z]Ms\b|elapsed|duration|took\b|\bseconds\b/;
const BOUND = /expect(?:\.soft)?\((.*)\)\.toBeLessThan(?:OrEqual)?\(/;
const SLEEP = /^\s*await (?:new Promise(?:<void>)?\(\((?:r|resolve)\) => setTimeout\((?:r|resolve), [^)]+\)\)|sleep\([^)]*\)|delay\([^)]*\));?\s*(?:\/\/.*)?$/;
const LOOP = /\b(?:while|for)\s*\(|\bdo\s*\{/;
/** A helper that waits for an event with a give-up time: its figure (first argument of `within`, last of the others). */
const GIVE_UP = /\b(?:within\(\s*([0-9][0-9_]*)\s*,|(?:eventually|until|waitFor)\(.*,\s*([0-9][0-9_]*)\)\)?[;,]?\s*(?:\/\/.*)?$)/;
const SHORT_GIVE_UP_MS = 10_000;

/** The comment lines right above line `i` (contiguous `//` lines) and the line's own comment. */
function saidAt(lines: readonly string[], i: number): string {
  const said: string[] = [lines[i]!.includes("//") ? lines[i]!.slice(lines[i]!.indexOf("//")) : ""];
  for (let j = i - 1; j >= 0 && /^\s*(\/\/|\*|\/\*)/.test(lines[j]!); j--) said.push(lines[j]!);
  return said.join("\n");
}

/** The line opening the block line `i` sits in: the nearest line above indented less. */
function enclosingLine(lines: readonly string[], i: number): string {
  const indent = (l: string) => l.length - l.trimStart().length;
  const own = indent(lines[i]!);
  for (let j = i - 1; j >= 0; j--) if (lines[j]!.trim() && indent(lines[j]!) < own) return lines[j]!;
  return "";
}

/** The unexplained bounds and fixed waits of one test file's text. */
export function wallClockFindings(file: string, text: string): Finding[] {
  const lines = text.split("\n");
  const out: Finding[] = [];
  lines.forEach((line, i) => {
    if (/^\s*(\*|\/\/|\/\*)/.test(line)) return; // prose about a bound is not one
    const bound = BOUND.exec(line);
    if (bound && DURATION.test(bound[1]!) && !/\bbound:/.test(saidAt(lines, i))) out.push({ file, line: i + 1, kind: "bound", text: line.trim() });
    const giveUp = GIVE_UP.exec(line);
    const ms = giveUp ? Number((giveUp[1] ?? giveUp[2] ?? "").replace(/_/g, "")) : NaN;
    if (ms < SHORT_GIVE_UP_MS && !/\bbound:/.test(saidAt(lines, i))) out.push({ file, line: i + 1, kind: "bound", text: line.trim() });
    if (SLEEP.test(line)) {
      // The pause of a polling loop (the block it sits in is a loop's) waits for an event.
      const inLoop = LOOP.test(line) || LOOP.test(enclosingLine(lines, i));
      if (!inLoop && !/\bwait:/.test(saidAt(lines, i))) out.push({ file, line: i + 1, kind: "wait", text: line.trim() });
    }
  });
  return out;
}

/** Every test file of the suite (test/**, support files included; benchmarks and E2B's own upstream tests left out). */
export function suiteFiles(root: string): string[] {
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      const rel = relative(root, p);
      if (e.isDirectory()) {
        if (!["test/bench", "test/e2b/upstream", "test/fixtures"].includes(rel)) walk(p);
      } else if (e.name.endsWith(".ts")) files.push(rel);
    }
  };
  walk(join(root, "test"));
  return files.sort();
}

export function suiteFindings(root: string): Finding[] {
  // Its own test holds made-up findings in a string.
  return suiteFiles(root).filter((f) => f !== "test/architecture/wall-clock.test.ts").flatMap((f) => wallClockFindings(f, readFileSync(join(root, f), "utf8")));
}
