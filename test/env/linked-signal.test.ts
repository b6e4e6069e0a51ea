import { describe, expect, it } from "vitest";
import { linkedSignal } from "../../src/env/linked-signal.js";

describe("linkedSignal: one listener on a run's signal for any number of trajectories", () => {
  it("50 trajectories each listening on their linked signal: no MaxListenersExceededWarning; the abort reaches each with the run's reason; released ones are left alone", async () => {
    const warnings: string[] = [];
    const onWarning = (w: Error) => warnings.push(w.name);
    process.on("warning", onWarning);
    try {
      const run = new AbortController();
      const links = Array.from({ length: 50 }, () => linkedSignal(run.signal));
      const heard: unknown[] = [];
      for (const l of links) l.signal.addEventListener("abort", () => heard.push(l.signal.reason), { once: true });
      // The same 50 listening on the run's signal directly is what warned.
      links[49]!.release();
      run.abort(new Error("interrupted (SIGINT)"));
      await new Promise((r) => setImmediate(r));
      expect(heard).toHaveLength(49);
      expect((heard[0] as Error).message).toBe("interrupted (SIGINT)");
      expect(links[49]!.signal.aborted).toBe(false);
      // Linked after the abort: aborted at once.
      expect(linkedSignal(run.signal).signal.aborted).toBe(true);
      expect(warnings).not.toContain("MaxListenersExceededWarning");
    } finally {
      process.off("warning", onWarning);
    }
  });
});
