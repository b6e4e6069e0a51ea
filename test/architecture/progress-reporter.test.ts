/**
 * The suite's console (test/support/progress-reporter.ts, registered in vitest.config.ts): a
 * skipped test's reason is found where this suite's convention puts it.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { skipReason } from "../support/progress-reporter.js";

describe("the progress reporter", () => {
  it("is one of the suite's reporters, beside the default and the JSON CI reads", () => {
    const config = readFileSync(new URL("../../vitest.config.ts", import.meta.url), "utf8");
    expect(config).toMatch(/reporters: \["default", "\.\/test\/support\/progress-reporter\.ts", "json"\]/);
  });

  it("finds a skip's reason: ctx.skip's note, '(skipped: X)' in a suite, '… skipped without X' in the name, or says there is none", () => {
    expect(skipReason({ name: "x > y", note: "no Docker engine" })).toBe("no Docker engine");
    expect(skipReason({ name: "engine (skipped: no 'docker info' (daemon down); start one: .ci/docker-engine.sh) > memory", note: undefined })).toBe("no 'docker info' (daemon down); start one: .ci/docker-engine.sh");
    expect(skipReason({ name: "scripts > says what it installs — skipped without python3's venv", note: undefined })).toBe("skipped without python3's venv");
    expect(skipReason({ name: "a > where servers may not mount (skipped where servers may mount)", note: undefined })).toBe("skipped where servers may mount");
    expect(skipReason({ name: "plain name", note: undefined })).toMatch(/^no reason given/);
  });
});
