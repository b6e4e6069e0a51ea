/**
 * The suite's console, for a person waiting on a loaded 2-core box (issue 39): beside vitest's
 * default reporter, a progress line as each test file ends — files done of the total, tests
 * passed / failed / skipped so far, time elapsed — and, at the end, every skipped test with
 * its reason (the test's name says it by convention, `… skipped without X`, or `ctx.skip(reason)`
 * gave a note) and the slowest files, which is where the suite's time goes.
 *
 * On a terminal the line is redrawn in place; otherwise (CI, a pipe) it is one line per file.
 */
import { relative } from "node:path";
import type { Reporter, TestModule, TestSpecification, Vitest } from "vitest/node";

const SLOWEST = 10;

interface Skipped {
  file: string;
  name: string;
  note: string | undefined;
}

export default class ProgressReporter implements Reporter {
  private root = process.cwd();
  private total = 0;
  private done = 0;
  private passed = 0;
  private failed = 0;
  private skipped: Skipped[] = [];
  private readonly durations: Array<{ file: string; ms: number }> = [];
  private started = performance.now();
  private readonly out = process.stderr;
  private readonly tty = Boolean(process.stderr.isTTY);

  private forks = "?";

  onInit(ctx: Vitest): void {
    this.root = ctx.config.root;
    this.forks = String(ctx.config.poolOptions?.forks?.maxForks ?? "?");
  }

  onTestRunStart(specifications: ReadonlyArray<TestSpecification>): void {
    this.total = new Set(specifications.map((s) => s.moduleId)).size;
    this.started = performance.now();
  }

  onTestModuleEnd(module: TestModule): void {
    this.done++;
    const file = relative(this.root, module.moduleId);
    for (const t of module.children.allTests()) {
      const r = t.result();
      if (r.state === "passed") this.passed++;
      else if (r.state === "failed") this.failed++;
      else if (r.state === "skipped") this.skipped.push({ file, name: t.fullName, note: r.note });
    }
    // A file that failed to load has no tests, but failed.
    if (module.state() === "failed" && ![...module.children.allTests()].some((t) => t.result().state === "failed")) this.failed++;
    this.durations.push({ file, ms: module.diagnostic().duration });
    const line = `[${this.done}/${this.total} files] ${this.passed} passed · ${this.failed} failed · ${this.skipped.length} skipped · ${clock(performance.now() - this.started)} · ${file}`;
    if (this.tty) this.out.write(`\r\x1b[2K${line}`);
    else this.out.write(`${line}\n`);
  }

  onTestRunEnd(): void {
    if (this.tty) this.out.write("\n");
    const lines: string[] = [];
    if (this.skipped.length > 0) {
      // Grouped by file and reason: a suite skipped for one missing engine is one line, not eleven.
      const groups = new Map<string, Skipped[]>();
      for (const s of this.skipped) {
        const key = `${s.file}\0${skipReason(s)}`;
        groups.set(key, [...(groups.get(key) ?? []), s]);
      }
      lines.push(`skipped: ${this.skipped.length} tests, by reason:`);
      for (const [key, tests] of groups) {
        const [file, reason] = key.split("\0") as [string, string];
        lines.push(`  ${file}: ${tests.length === 1 ? `"${tests[0]!.name}"` : `${tests.length} tests`} — ${reason}`);
      }
    }
    const slowest = [...this.durations].sort((a, b) => b.ms - a.ms).slice(0, SLOWEST);
    if (slowest.length > 0) {
      lines.push(`slowest files (their tests and hooks; ${clock(performance.now() - this.started)} in all, files run ${this.forks} at a time):`);
      for (const d of slowest) lines.push(`  ${clock(d.ms).padStart(7)}  ${d.file}`);
    }
    if (lines.length > 0) this.out.write(`\n${lines.join("\n")}\n`);
  }
}

/**
 * Why a test was skipped: `ctx.skip(note)`'s note, else what its name (or a suite's) says by
 * the suite's convention — `… skipped without X`, `(skipped: X)` —, else that none was given.
 */
export function skipReason(s: { name: string; note: string | undefined }): string {
  if (s.note) return s.note;
  // "(skipped: X)" in a suite's name, X up to its balanced closing parenthesis.
  const open = s.name.indexOf("(skipped: ");
  if (open >= 0) {
    let depth = 0;
    for (let i = open; i < s.name.length; i++) {
      if (s.name[i] === "(") depth++;
      else if (s.name[i] === ")" && --depth === 0) return s.name.slice(open + "(skipped: ".length, i).trim();
    }
  }
  let said = /\bskipped ((?:without|on|when|unless|where|as|for|with|if|here|because|outside)\b[^>]*)/.exec(s.name)?.[1]?.trim();
  // "(… skipped as root)": the closing parenthesis is the name's, not the reason's.
  while (said && (said.match(/\)/g) ?? []).length > (said.match(/\(/g) ?? []).length) said = said.replace(/\)[^)]*$/, "").trim();
  return said ? `skipped ${said}` : "no reason given (name the precondition: it.skipIf(cond)(\"… skipped without X\"), or ctx.skip(reason))";
}

function clock(ms: number): string {
  const s = Math.round(ms / 1000);
  return s >= 60 ? `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s` : `${(ms / 1000).toFixed(1)}s`;
}
