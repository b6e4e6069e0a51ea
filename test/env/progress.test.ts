import { Writable } from "node:stream";
import { describe, expect, it } from "vitest";
import { ProgressBar } from "../../src/env/run-modes/progress.js";
import { RunStats } from "../../src/env/run-stats.js";

function sink(isTTY: boolean) {
  const chunks: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      chunks.push(String(chunk));
      cb();
    },
  }) as Writable & { isTTY?: boolean };
  stream.isTTY = isTTY;
  return { stream, chunks };
}

describe("progress bar", () => {
  it("redraws one line on a terminal", () => {
    const { stream, chunks } = sink(true);
    const bar = new ProgressBar("process x", 4, stream as unknown as NodeJS.WriteStream);
    const stats = new RunStats();
    for (let i = 0; i < 4; i++) {
      stats.groups++;
      bar.update(stats);
    }
    bar.finish();
    expect(chunks).toHaveLength(5);
    expect(chunks.slice(0, 4).every((c) => c.startsWith("\r\x1b[2K") && !c.includes("\n"))).toBe(true);
    expect(chunks[3]).toContain("[########################] 4/4 groups");
    expect(chunks[4]).toBe("\n");
  });

  it("prints plain lines at most every 10 % when not a terminal", () => {
    const { stream, chunks } = sink(false);
    const bar = new ProgressBar("process x", 100, stream as unknown as NodeJS.WriteStream);
    const stats = new RunStats();
    for (let i = 0; i < 100; i++) {
      stats.groups++;
      bar.update(stats);
    }
    bar.finish();
    expect(chunks).toHaveLength(11); // the first update, then each 10 % step up to 100 %
    expect(chunks.every((c) => c.endsWith("\n") && !c.includes("\r"))).toBe(true);
    expect(chunks[10]).toContain("100/100 groups");
  });
});
