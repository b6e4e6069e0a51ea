import type { RunStats } from "../run-stats.js";

/**
 * A progress bar on stderr. On a terminal it redraws one line; otherwise (CI logs, pipes) it
 * prints a plain line at most every 10 % so logs stay short.
 */
export class ProgressBar {
  private lastPrintedTenth = -1;
  private readonly tty: boolean;

  constructor(
    private readonly label: string,
    private readonly total: number | undefined,
    private readonly stream: NodeJS.WriteStream | NodeJS.WritableStream = process.stderr,
    /** Shows delivered/filtered group counts, delivered named so ("sent", "written"). */
    private readonly delivered?: string,
  ) {
    this.tty = Boolean((stream as NodeJS.WriteStream).isTTY);
  }

  update(stats: RunStats): void {
    const done = stats.groups;
    const total = this.total;
    const frac = total ? Math.min(1, done / total) : 0;
    const width = 24;
    const filled = Math.round(frac * width);
    const bar = total ? `[${"#".repeat(filled)}${".".repeat(width - filled)}] ${done}/${total}` : `${done}`;
    const line =
      `${this.label} ${bar} groups · mean score ${stats.meanScore.toFixed(3)} · tool calls ${stats.toolCalls}` +
      (this.delivered ? ` · ${this.delivered} ${stats.sentGroups} · filtered ${stats.filteredGroups}` : "") +
      (stats.failedGroups ? ` · failed ${stats.failedGroups}` : "") +
      (stats.infraFailureCount ? ` · infra failures ${stats.infraFailureCount}` : "") +
      (stats.slotLosses ? ` · slot losses ${stats.slotLosses}` : "") +
      ` · ${((Date.now() - stats.startedAt) / 1000).toFixed(1)}s`;
    if (this.tty) {
      this.stream.write(`\r\x1b[2K${line}`);
      return;
    }
    const tenth = total ? Math.floor(frac * 10) : done;
    if (tenth !== this.lastPrintedTenth) {
      this.lastPrintedTenth = tenth;
      this.stream.write(`${line}\n`);
    }
  }

  finish(): void {
    if (this.tty) this.stream.write("\n");
  }
}
